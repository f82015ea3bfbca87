# Run 165 (H200): branch h-split-dv-first's `split_dv_first` in the d256 (split_head_dim) dK/dV kernel. 1: consumer 0
# issues its dV GEMM (P^T from registers), then takes dP - delta, computes dS^T and hands P^T and dS^T over, while dV
# runs. 2: also P^T handed over on its own first, so consumer 1 issues its dV before it waits for dS^T. Against the
# default, each compiled twice, interleaved in one process (bwd_ab_2026-11-24_h100/cfg_ab.py; gradients bitwise).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/bwd_ab_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run165_device.txt 2>&1
timeout 520 python3 $D/cfg_ab.py d256-4k-N,d256-4k-C,d256-1k-N,d256-1k-C split_dv_first=1 split_dv_first=2 > $OUT/run165.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run165.log
