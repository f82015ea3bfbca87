# Run 53: run 52's forward-config A/B again (run 52's copy keyed the calls by tuple, which the timing loop cannot
# shuffle; fixed to string keys).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_imad_2026-11-23_h100
timeout 400 python3 $D/fwd_cfg_ab.py d128-4k-N,d128-16k-N,d128-4k-C > $OUT/fwd_cfg_ab.log 2>&1
echo "A/B rc $?"; grep -E "^d[0-9]|^  [a-z0-9]|failed" $OUT/fwd_cfg_ab.log | tail -20
