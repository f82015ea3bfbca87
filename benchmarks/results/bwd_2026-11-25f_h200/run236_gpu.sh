# Run 236 (H200, branch h-scores-ahead): the d128 backward's speed against unused shared memory allocated last in the
# dK/dV kernel (probe_smem_pad KiB; its default uses about 129 KiB), after run 235's allocation-only gain at S16k N.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run236_device.txt 2>&1
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N \
  probe_smem_pad=1 probe_smem_pad=4 probe_smem_pad=16 probe_smem_pad=48 > $OUT/run236_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run236_ab.log | tail -20
