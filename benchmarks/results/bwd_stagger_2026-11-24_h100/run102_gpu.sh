# Run 102 (H100): bitwise_check.py (the gradients with and without stagger_consumers, d128, GQA 8/2, S2000).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
date -u > $OUT/run102_device.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $OUT/run102_device.txt
timeout 200 python3 benchmarks/results/bwd_stagger_2026-11-24_h100/bitwise_check.py 2>&1 | grep -v -i warn | tee $OUT/run102.log
