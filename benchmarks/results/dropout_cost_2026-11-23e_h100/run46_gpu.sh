# On branch h6-early-keys: the slow dropout GPU tests with the key rings on, then the A/B of where the
# per-step dropout keys come from (late / early global loads, TMA rings), with ptxas spill reports.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
D=benchmarks/results/dropout_cost_2026-11-23e_h100
T0=$SECONDS
PALLAS_FLASH_RING_KEYS=1 timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k dropout > $OUT/pytest_ring.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_ring.log; grep -E " FAILED| ERROR" $OUT/pytest_ring.log | cut -c1-200 | head; tail -1 $OUT/pytest_ring.log
MOSAIC_GPU_DUMP_PTXAS=1 timeout $((585-(SECONDS-T0))) python3 $D/next_drop_cost2.py d128-4k-N,d128-4k-C,d64-4k-N > $OUT/drop_cost2.log 2>&1
echo "A/B rc $? $((SECONDS-T0)) s"
grep -E "^## |bytes spill stores" $OUT/drop_cost2.log | awk '/^##/{print; next} $0 !~ / 0 bytes spill stores/{print "   ", $0}' | cut -c1-150 | head -60
grep -E "^d[0-9]|^  [a-z]" $OUT/drop_cost2.log | tail -30
