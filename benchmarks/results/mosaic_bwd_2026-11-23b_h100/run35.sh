# run 35 (ran 2026-11-23 07:45 UTC as part of .scratch/next_gpu1.sh, with a 150 s pytest limit and the cells d64-4k-N,d64-4k-C,d128-4k-N,d128-16k-C): branch h-add-under-s: fused dQ share staged under the next S^T GEMM: fused GPU tests + d64/d128 timing
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
cd .wt/addS
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 110 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow" -n 8 tests/test_mosaic.py -k "fused and not determin" > $OUT/pytest_fused.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/pytest_fused.log | cut -c1-200 | tail -8
timeout $((235-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d128-4k-N --variant deterministic=False --variant fused=True --only "ours,ours[deterministic=False],ours[fused=True],cudnn" --reps 3 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | grep -v "^|" | grep -v "^ *$" | tail -20
echo "total $((SECONDS-T0)) s"
