# (fixed_scale_late was removed after this run; it ran at ebe4b53.)
# Run 206 (H200): the fused kernel's fixed-point scale F loaded under the dV / dK / dQ GEMMs (fixed_scale_late)
# instead of at the step's start (run 203: not loading it at all read +5-7% at d128), against the d64 default (the
# fused fixed-point kernel) of the same process (cfg_ab.py), all four d64 cells; gradients must be bitwise equal.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run206_device.txt 2>&1
cat $OUT/run206_device.txt
MOSAIC_GPU_DUMP_PTXAS=1 timeout 560 python3 $AB d64-4k-N,d64-16k-N,d64-4k-C,d64-16k-C fixed_scale_late=True \
  > $OUT/run206.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run206.log
grep -A3 "Compiling entry function 'pallas_flash_mosaic_dkdv" $OUT/run206.log | grep -E "spill stores" | cut -c1-120 | uniq
