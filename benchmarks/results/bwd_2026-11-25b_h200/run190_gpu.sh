# Run 190 (H200): registers per consumer, 232 (producer 40) or 240 (producer 24), per kernel: dkdv_registers=240
# again (run 189: +0.9% non-causal, -6% at S16k C), dq_registers=240 alone, and with the dQ kernel's Q in registers
# on 128-key steps (dq_rows_in_registers=1: -5 to -6% at 232, runs 184-185), against the d128 default of the same
# process (cfg_ab.py), with ptxas's spill report per kernel.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run190_device.txt 2>&1
MOSAIC_GPU_DUMP_PTXAS=1 timeout 570 python3 $AB d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C dkdv_registers=240 \
  dq_registers=240 dq_registers=240,dq_rows_in_registers=1 dkdv_registers=240,dq_registers=240,dq_rows_in_registers=1 \
  > $OUT/run190.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run190.log
grep -A1 "Function properties for pallas_flash_mosaic_d" $OUT/run190.log | grep -oE "mosaic_d[a-z]+_|[0-9]+ bytes spill stores" | paste - - | uniq -c
