# Run 63, H100: feat_ab.py (the three-consumer d128 S16k N forward default against two consumers, per feature).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 420 python3 benchmarks/results/issue14_2026-11-23_h100/feat_ab.py > $OUT/run63_feat_ab.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/run63_feat_ab.log | tail -12
