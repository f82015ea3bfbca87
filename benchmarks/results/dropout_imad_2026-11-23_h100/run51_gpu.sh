# Run 51 (main with the one-IMAD keep bit): the 17 slow Mosaic tests (no dropout) that run 49 did not reach
# (run51_tests.txt), then bias_bench's dropout rows with the peers on d128 S4k N / S4k C, one process per cell.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_imad_2026-11-23_h100
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
mapfile -t TESTS < $D/run51_tests.txt
timeout -s INT 300 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 "${TESTS[@]}" > $OUT/pytest_slow.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_slow.log; grep -E " FAILED| ERROR" $OUT/pytest_slow.log | cut -c1-200 | head; tail -1 $OUT/pytest_slow.log
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells ${CELLS:-4k-N,4k-C} --impls mosaic,mosaic-dropout,triton-dropout,torch --out $OUT/bench > $OUT/bias_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/bias_bench.log | tail -16
