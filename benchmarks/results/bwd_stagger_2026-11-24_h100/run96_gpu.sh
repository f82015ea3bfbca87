# Run 96 (H100): the two-kernel backward with staggered consumers (MosaicBackwardConfig.stagger_consumers: consumer 1
# starts once consumer 0's first score GEMMs are done), with 2 and 3 stages, against the default and 3 stages alone,
# d128, one process per pair of cells; then the stagger tests natively.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run96_device.txt 2>&1
V1="stagger_consumers=True"; V2="stagger_consumers=True,num_stages=3"; V3="num_stages=3"
for cells in d128-4k-N,d128-4k-C d128-16k-N,d128-16k-C; do
  timeout $((240-(SECONDS-T0)/2)) python3 benchmarks/bwd_bench.py --cells $cells --variant $V1 --variant $V2 --variant $V3 --only "ours,cudnn,ours[$V1],ours[$V2],ours[$V3]" --out $OUT/run96_${cells//,/_} > $OUT/run96_${cells//,/_}.log 2>&1
  echo "$cells rc $? $((SECONDS-T0)) s"
done
timeout -s INT $((560-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py -k "stagger" > $OUT/run96_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/run96_pytest.log; grep -E " FAILED| ERROR" $OUT/run96_pytest.log | cut -c1-200 | head; tail -1 $OUT/run96_pytest.log
grep -hE "^d|ours|cudnn " $OUT/run96_*.log | grep -v -i warn | cut -c1-118
