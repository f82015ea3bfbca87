# Branch h8-imad-hash on a GPU: the slow dropout tests (Mosaic and Triton) with the one-IMAD keep bit, then the
# in-process A/B against main's xor + multiply (imad_ab.py) on d128 S4k N / S4k C / S16k N and d64 S4k N.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_imad_2026-11-23_h100  # ran as dropout_imad_next
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s INT 240 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py tests/test_bias_dropout.py -k dropout > $OUT/pytest_dropout.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_dropout.log; grep -E " FAILED| ERROR" $OUT/pytest_dropout.log | cut -c1-200 | head; tail -1 $OUT/pytest_dropout.log
timeout $((585-(SECONDS-T0))) python3 $D/imad_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d64-4k-N > $OUT/imad_ab.log 2>&1
echo "A/B rc $? $((SECONDS-T0)) s"; grep -E "^d[0-9]|^  [a-z]|failed" $OUT/imad_ab.log | tail -20
