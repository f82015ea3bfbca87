# Run 244 (H200, main with the ring read ahead): natively the d128 backward tests (run 243's timed out); the ring
# read ahead on the d128 defaults with dropout, ALiBi, a soft-cap (feat_ab.py); then two variants of the new
# default on the d128 non-causal cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run244_device.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 6 -k "(test_backward and d128) or ahead" tests/test_mosaic.py > $OUT/run244_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run244_pytest.log
A=benchmarks/results/bwd_2026-11-25g_h200/feat_ab.py
timeout 100 python3 $A d128-4k-N+drop prefetch_rows=True,row_ring=True > $OUT/run244_drop.log 2>&1; echo "drop rc $? $((SECONDS-T0)) s"
timeout 80 python3 $A d128-4k-N+alibi prefetch_rows=True,row_ring=True > $OUT/run244_alibi.log 2>&1; echo "alibi rc $? $((SECONDS-T0)) s"
timeout 80 python3 $A d128-4k-N+cap row_ring=True > $OUT/run244_cap.log 2>&1; echo "cap rc $? $((SECONDS-T0)) s"
timeout $((585-(SECONDS-T0))) python3 $A d128-16k-N,d128-4k-N dkdv_registers=None num_stages=3 > $OUT/run244_plain.log 2>&1; echo "plain rc $? $((SECONDS-T0)) s"
for X in drop alibi cap plain; do grep -v "^ *$" $OUT/run244_$X.log | grep -v Warning | tail -8; done
