# Run 204 (H200): the d128 opt-in `deterministic=False` (the fused five-GEMM kernel adding dQ in f32 with TMA
# reduce-add, with the row ring; since the smem_bytes fix it runs the Mosaic kernel, not the triton fallback)
# against our deterministic default and cuDNN (default, nondeterministic) in one process (bwd_bench.py).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run204_device.txt 2>&1
cat $OUT/run204_device.txt
V=deterministic=False,prefetch_rows=False,row_ring=True
timeout 570 python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C --variant $V \
  --only "ours,ours[$V],cudnn" --out $OUT/run204 > $OUT/run204.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; tail -25 $OUT/run204.log
