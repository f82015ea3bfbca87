# Run 193 (H200): the stagger per kernel (dq_stagger: the dQ kernel's own, None = the dK/dV kernel's). Against the
# d128 default of the same process (cfg_ab.py): non-causal (both kernels staggered) with the dQ kernel unstaggered;
# causal (neither staggered) with the dQ kernel staggered.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run193_device.txt 2>&1
timeout 250 python3 $AB d128-4k-N,d128-16k-N dq_stagger=False > $OUT/run193.log 2>&1
echo "N rc $? $((SECONDS-T0)) s"
timeout $((570-(SECONDS-T0))) python3 $AB d128-4k-C,d128-16k-C,d128-128k-C dq_stagger=True >> $OUT/run193.log 2>&1
echo "C rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run193.log
