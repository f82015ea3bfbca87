set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
cd .wt/h14
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import jax; print('jax', jax.__version__, jax.devices())"; } > $OUT/device.txt 2>&1
cat $OUT/device.txt
# ptxas reports and the ALiBi GPU tests side by side (nothing timed yet)
( for v in "N 0" "N 1" "C"; do echo "==== alibi $v (causal | non-causal, fixed axis of the split loops)"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 80 python3 .scratch/ptxas_alibi.py $v 2>&1 | grep -E "spill|Used|Compiling entry"; done > $OUT/ptxas.log ) &
PT=$!
timeout -s INT 125 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py tests/test_bias_dropout.py -k "alibi and not lowers" > $OUT/pytest_alibi.log 2>&1
echo "pytest rc $? ($((SECONDS-T0)) s)"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pytest_alibi.log | grep -v "^tests" | tail -3; grep -cE "PASSED" $OUT/pytest_alibi.log; grep -E "FAILED|ERROR" $OUT/pytest_alibi.log | head -5
wait $PT
grep -E "====|spill stores|Compiling entry" $OUT/ptxas.log | sed 's/ptxas warning : Registers are spilled to local memory in function//' | grep -v "Compiling"
echo "ptxas+tests $((SECONDS-T0)) s"
timeout 140 python3 .scratch/bwd_bench_fixed.py 0 --cells d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --alibi --only "ours,ours alibi,cudnn" --reps 5 --min-ms 30 --out $OUT/a0 2>&1 | grep -v WARNING > $OUT/bench_alibi_fixed0.log
rm -f $OUT/a0/bwd_table.md; tail -7 $OUT/bench_alibi_fixed0.log
echo "bench a0 $((SECONDS-T0)) s"
timeout 45 python3 .scratch/bwd_bench_fixed.py 1 --cells d128-4k-N --alibi --only "ours,ours alibi" --reps 5 --min-ms 30 2>&1 | grep -v WARNING > $OUT/bench_alibi_fixed1.log
tail -3 $OUT/bench_alibi_fixed1.log
echo "bench a1 $((SECONDS-T0)) s"
timeout $((385 - SECONDS + T0)) python3 .scratch/dropout_sweep.py 4k-N "default,fwd s2,fwd 64x64 w4,bwd s3,bwd w8,bwd dkv q32,bwd dq k32" 2>&1 | grep -v WARNING > $OUT/dropout_sweep.log
cat $OUT/dropout_sweep.log | tail -10
echo "total $((SECONDS-T0)) s"
