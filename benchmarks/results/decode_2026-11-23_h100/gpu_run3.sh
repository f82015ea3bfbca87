#!/bin/bash
# GPU call 3 (issue 15): decode tests (slow ones included), then the benchmark
# of every cell with its peers and the DecodeConfig sweep, one process.
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 100 python3 -m pytest -p no:benchmark -p no:cacheprovider -q -n 4 tests/test_decode.py > $OUT/pytest_decode.log 2>&1; tail -6 $OUT/pytest_decode.log
timeout 235 python3 -m benchmarks.decode_bench --sweep --reps 5 --sample-s 0.03 --budget-s 215 --out $OUT/bench > $OUT/bench.log 2>&1
grep -v "^  sweep\|^W1\|^E1\|^external\|^=== \|^(param\|^  %param\|^  ROOT\|^}, meta\|Warning\|return rule" $OUT/bench.log | tail -64; grep "^  sweep" $OUT/bench.log
