#!/bin/bash
# GPU call 1 (issue 15): decode tests, benchmark (+ sweep), generation example.
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader
timeout 55 python3 -m pytest -p no:benchmark -p no:cacheprovider -q tests/test_decode.py 2>&1 | tail -25 | tee $OUT/pytest_decode.log
timeout 145 python3 -m benchmarks.decode_bench --sweep --reps 5 --sample-s 0.03 --budget-s 125 --out $OUT/bench > $OUT/bench.log 2>&1
grep -v "^  sweep" $OUT/bench.log | tail -40; grep "^  sweep" $OUT/bench.log
timeout 30 python3 examples/generate.py --train-steps 100 2>&1 | tail -5 | tee $OUT/generate.log
