# Run 192 (H200): causal d128 at 240 registers per dK/dV consumer lost 6-7% at S16k C (runs 189-190) while
# non-causal, staggered, gained. Causal runs unstaggered since runs 181-182 (at 232). Here, against the causal d128
# default of the same process (cfg_ab.py): 240 registers with the stagger, the stagger alone, and 240 alone, at
# S4k C, S16k C and S128k C.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run192_device.txt 2>&1
timeout 570 python3 $AB d128-4k-C,d128-16k-C,d128-128k-C dkdv_registers=240,stagger_consumers=True \
  stagger_consumers=True dkdv_registers=240 > $OUT/run192.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run192.log
