# Run 197 (H200): 240 registers per consumer where runs 189-195 did not look, each against its default in one
# process: d256 (split head dim; dK/dV kernel, dQ kernel) with cfg_ab.py; d128 with dropout 0.1 and d128 with ALiBi
# (the dK/dV kernel) with drop_ab.py.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
DAB=benchmarks/results/dropout_bwd_2026-11-24_h100/drop_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run197_device.txt 2>&1
timeout 250 python3 $AB d256-1k-N,d256-4k-N,d256-1k-C,d256-4k-C dkdv_registers=240 dq_registers=240 > $OUT/run197.log 2>&1
echo "d256 rc $? $((SECONDS-T0)) s"
timeout 150 python3 $DAB d128-4k-N,d128-16k-C dkdv_registers=240 >> $OUT/run197.log 2>&1
echo "dropout rc $? $((SECONDS-T0)) s"
AB_FEATURE=alibi timeout $((580-(SECONDS-T0))) python3 $DAB d128-4k-N,d128-16k-C dkdv_registers=240 >> $OUT/run197.log 2>&1
echo "alibi rc $? $((SECONDS-T0)) s"; grep -E "^d|^  |^[A-Za-z]" $OUT/run197.log | grep -v WARNING | cut -c1-150
