# NEXT SESSION, run 30 (carry [".wt/magic", ".peers"]; `cd .wt/magic` first is done here):
# branch h-fixed-magic (fixed point without cvt): GPU tests of fused=True + d64/d128 timing
# against deterministic=False and cuDNN. (h-fixed-magic rebased on main 3d1e7ba on 2026-11-23;
# its interpret-mode fused cases pass on the CPU with the magic rounding.)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
cd .wt/magic
export PYTHONPATH=/tmp/site:$PWD/../../.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 5 tests/test_mosaic.py -k "fixed" > $OUT/pytest_fixed.log 2>&1
echo "pytest rc $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pytest_fixed.log | cut -c1-150 | tail -7
timeout $((570-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-N,d128-16k-C --variant fused=True --variant deterministic=False --only "ours[fused=True],ours[deterministic=False],cudnn" --reps 5 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | grep -v "^|" | tail -24
echo "total $((SECONDS-T0)) s"
