# Run 98 (H100): staggered consumers in the fused kernel: d64's default (fixed point) and d128's fused forms (f32 adds:
# deterministic=False; fixed point: fused=True), each against itself without the stagger, one process per pair of cells;
# then the stagger tests natively.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run98_device.txt 2>&1
S="stagger_consumers=True"; F="deterministic=False"; X="fused=True"
for cells in d64-4k-N,d64-4k-C d64-16k-N,d64-16k-C; do
  timeout 100 python3 benchmarks/bwd_bench.py --cells $cells --variant $S --only "ours,cudnn,ours[$S]" --out $OUT/run98_${cells//,/_} > $OUT/run98_${cells//,/_}.log 2>&1
  echo "$cells rc $? $((SECONDS-T0)) s"
done
for cells in d128-16k-N,d128-4k-C; do
  timeout 150 python3 benchmarks/bwd_bench.py --cells $cells --variant $F --variant $F,$S --variant $X --variant $X,$S --only "ours,cudnn,ours[$F],ours[$F,$S],ours[$X],ours[$X,$S]" --out $OUT/run98_${cells//,/_} > $OUT/run98_${cells//,/_}.log 2>&1
  echo "$cells rc $? $((SECONDS-T0)) s"
done
timeout -s INT $((570-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py -k "stagger and fused" > $OUT/run98_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/run98_pytest.log; grep -E " FAILED| ERROR" $OUT/run98_pytest.log | cut -c1-200 | head; tail -1 $OUT/run98_pytest.log
grep -hE "^d|ours|cudnn " $OUT/run98_*.log | grep -v -i warn | cut -c1-118
