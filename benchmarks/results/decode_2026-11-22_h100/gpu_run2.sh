#!/bin/bash
# GPU call 2 (issue 15): benchmark (+ small sweep), decode tests, generation example.
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 120 python3 -m benchmarks.decode_bench --sweep --sweep-cells "1:1:128k,32:1:4k,32:1:32k ragged" --reps 5 --sample-s 0.03 --budget-s 100 --out $OUT/bench > $OUT/bench.log 2>&1
grep -v "^  sweep\|^W1\|^E1\|^external\|^=== \|^(param\|^  %param\|^  ROOT\|^}, meta" $OUT/bench.log | tail -62; grep "^  sweep" $OUT/bench.log
timeout 70 python3 -m pytest -p no:benchmark -p no:cacheprovider -q -n 4 tests/test_decode.py > $OUT/pytest_decode.log 2>&1; tail -15 $OUT/pytest_decode.log
timeout 40 python3 examples/generate.py --train-steps 20 > $OUT/generate.log 2>&1; tail -6 $OUT/generate.log
