# Run 90: the dK/dV kernel issuing step i's dV, dK GEMMs with step i + 1's score GEMMs (MosaicBackwardConfig.
# overlap_steps): ptxas and bitwise agreement first, then bwd_bench at d128 (with 2 and 3 stages) against the
# default and cuDNN in one process per cell.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
R=benchmarks/results/bwd_overlap_2026-11-24_h100
T0=$SECONDS
MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 $R/check_variant.py overlap_steps=True > $OUT/check.log 2>&1
echo "check rc $? $((SECONDS-T0)) s"
grep -E "bitwise|causal=|spill|rror" $OUT/check.log | grep -v "^ptxas info" | cut -c1-150 | head -24
timeout $((570-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C --variant overlap_steps=True --variant overlap_steps=True,num_stages=3 --only "ours,ours[overlap_steps=True],ours[overlap_steps=True,num_stages=3],cudnn" --out $OUT/bench > $OUT/bwd_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^d|ours|cudnn " $OUT/bwd_bench.log | grep -v -i warn | cut -c1-130 | tail -20
