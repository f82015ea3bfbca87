# Branch h7-bwd-pingpong on a GPU: the slow backward tests of the two-kernel path with the turns on, then the A/B
# (turns off / on / every bf16 tile in the 32-byte swizzle / cuDNN).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
D=benchmarks/results/mosaic_bwd_pingpong_next
T0=$SECONDS
PALLAS_FLASH_BWD_PINGPONG=1 timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k "backward and not fused and not split and not f32" > $OUT/pytest_pingpong.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_pingpong.log; grep -E " FAILED| ERROR" $OUT/pytest_pingpong.log | cut -c1-200 | head; tail -1 $OUT/pytest_pingpong.log
timeout $((585-(SECONDS-T0))) python3 $D/pingpong_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C > $OUT/pingpong_ab.log 2>&1
echo "A/B rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/pingpong_ab.log | tail -20
