# Run 177 (H200): what else the row ring (run 175) or the d64 kernel's launch can move, each against the default of
# the same process (cfg_ab.py: each compiled twice, interleaved, gradients bitwise):
#  - d256 (split_head_dim, both consumers load their rows at the step's start): row_ring=True;
#  - d128: the fused kernel (five GEMM units for seven), with and without the ring;
#  - d64 S4k N, the d64 cell still short of cuDNN (run 176: 0.976): the fused kernel persistent.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run177_device.txt 2>&1
timeout 240 python3 $AB d256-1k-N,d256-4k-N,d256-1k-C,d256-4k-C row_ring=True > $OUT/run177.log 2>&1
echo "d256 rc $? $((SECONDS-T0)) s"
timeout 200 python3 $AB d128-4k-N,d128-16k-C fused=True,prefetch_rows=False fused=True,prefetch_rows=False,row_ring=True >> $OUT/run177.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"
timeout $((575-(SECONDS-T0))) python3 $AB d64-4k-N persistent=True >> $OUT/run177.log 2>&1
echo "d64 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run177.log
