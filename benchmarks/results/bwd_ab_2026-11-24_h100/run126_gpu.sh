# Run 126 (H100): MosaicBackwardConfig.defer_dv (dV one step late, P^T through shared memory, dK / dV accumulating
# across steps without a wait per step) at d128: its native tests, then cfg_ab.py against the default (3 and 4
# stages), with ptxas's spill report of every kernel compiled.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/bwd_ab_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run126_device.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_mosaic.py -k "defer and not lowers" > $OUT/run126_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run126_pytest.log
MOSAIC_GPU_DUMP_PTXAS=1 timeout 380 python3 $D/cfg_ab.py d128-4k-N,d128-16k-C,d128-4k-C,d128-16k-N \
  defer_dv=True,num_stages=3 defer_dv=True,num_stages=4 > $OUT/run126.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "spill|C7512|Compiling entry function" $OUT/run126.log | grep -B1 -E "spill|C7512" | grep -E "entry|spill|C7512" | sort | uniq -c | head -20
grep -E "^d|^  " $OUT/run126.log
