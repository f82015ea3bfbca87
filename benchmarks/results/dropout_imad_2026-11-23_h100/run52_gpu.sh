# Run 52 (main with the one-IMAD keep bit): the slow determinism test of the fused fixed-point backward (cut in
# run 51), bias_bench's dropout rows with the peers on d128 S16k N / S16k C (one process per cell), then the
# forward-config A/B with / without dropout (fwd_cfg_ab.py).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_imad_2026-11-23_h100
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s INT 150 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow tests/test_mosaic.py::test_fused_fixed_point_backward_is_deterministic > $OUT/pytest_det.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/pytest_det.log
timeout 200 python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --impls mosaic,mosaic-dropout,triton-dropout,torch --out $OUT/bench > $OUT/bias_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/bias_bench.log | tail -16 | grep -v " -  "
timeout $((585-(SECONDS-T0))) python3 $D/fwd_cfg_ab.py d128-4k-N,d128-16k-N,d128-4k-C > $OUT/fwd_cfg_ab.log 2>&1
echo "A/B rc $? $((SECONDS-T0)) s"; grep -E "^d[0-9]|^  [a-z0-9]|failed" $OUT/fwd_cfg_ab.log | tail -20
