# Run 245 (H200, main with the ring read ahead, soft-cap included): the knobs beside it re-timed on the d128 cells
# (non-causal without the stagger; causal with 240 registers per dK/dV consumer, with the stagger); the soft-cap
# default against the ring not read ahead, causal and not (feat_ab.py).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run245_device.txt 2>&1
A=benchmarks/results/bwd_2026-11-25g_h200/feat_ab.py
timeout 150 python3 $A d128-4k-C+cap,d128-4k-N+cap row_ring=False > $OUT/run245_cap.log 2>&1; echo "cap rc $? $((SECONDS-T0)) s"
timeout 160 python3 $A d128-16k-N,d128-4k-N stagger_consumers=False > $OUT/run245_nc.log 2>&1; echo "nc rc $? $((SECONDS-T0)) s"
timeout $((585-(SECONDS-T0))) python3 $A d128-16k-C,d128-4k-C dkdv_registers=240 stagger_consumers=True > $OUT/run245_c.log 2>&1; echo "c rc $? $((SECONDS-T0)) s"
for X in cap nc c; do grep -v "^ *$" $OUT/run245_$X.log | grep -v Warning | tail -8; done
