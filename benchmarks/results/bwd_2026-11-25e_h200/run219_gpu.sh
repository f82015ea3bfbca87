# Run 219 (H200): an L2 / TMA probe (branch h-probe-half, wrong numbers, timing only). probe_half_loads=True
# streams half the rows of each tile (dK/dV kernel: Q, dO; dQ kernel: K, V), halving the bytes each CTA pulls from
# L2. If the d128 kernels gain a lot, a 2-CTA cluster with TMA multicast of the shared tiles is worth building.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run219_device.txt 2>&1
F=deterministic=False,prefetch_rows=False,row_ring=True,stagger_consumers=False
X=fused=True,prefetch_rows=False,row_ring=True,stagger_consumers=False
timeout 570 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N probe_half_loads=True $F "$F,probe_half_loads=True" $X "$X,probe_half_loads=True" > $OUT/run219.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run219.log | cut -c1-150
