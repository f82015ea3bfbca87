# Run 89: the PTX of the d128 backward kernels (no dropout, S1k, 2 heads) for reading their SASS off the device,
# ptxas's report, then bwd_bench with three stages (both kernels) against the default at d128 S4k N / S16k N.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
R=benchmarks/results/bwd_split_2026-11-24_h100
T0=$SECONDS
mkdir -p $OUT/ptx
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=$OUT/ptx timeout 120 python3 $R/kernel_split.py --cells 1k-N --tokens 1024 --heads 2 > $OUT/dump.log 2>&1
echo "dump rc $? $((SECONDS-T0)) s"; ls $OUT/ptx | head; grep -E "spill|entry function" $OUT/dump.log $OUT/ptx/* 2>/dev/null | cut -c1-160 | head -12
timeout $((560-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-N --variant num_stages=3 --only "ours,ours[num_stages=3]" --out $OUT/bench > $OUT/bwd_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^d|ours" $OUT/bwd_bench.log | grep -v -i warn | cut -c1-120 | tail -6
