# Run 66, H100: feat_ab.py 64 (d64's three-consumer forward default against two consumers, per feature).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
timeout 150 python3 benchmarks/results/issue14_2026-11-23_h100/feat_ab.py 64 > $OUT/run66_feat_ab_d64.log 2>&1
echo "rc $?"; grep -v -i warning $OUT/run66_feat_ab_d64.log | tail -10
