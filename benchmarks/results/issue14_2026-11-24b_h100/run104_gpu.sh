# Run 104 (H100): alibi_stagger.py (d128 S16k N, ALiBi and plain, staggered consumers on / off, one process).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
date -u > $OUT/run104_device.txt
timeout 200 python3 benchmarks/results/issue14_2026-11-24b_h100/alibi_stagger.py 2>&1 | grep -v -i warn | tee $OUT/run104.log
