# Run 134 (H100): issue 14's table on main after position_visible's compares came back (runs 132-133), one run per cell pair, every row bias_bench has (bias with dbias: ours Triton vs
# cuDNN; ALiBi: Mosaic and Triton vs no bias; dropout 0.1: Mosaic and Triton vs no dropout, torch SDPA flash).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)"; } > $OUT/run134_device.txt 2>&1; cat $OUT/run134_device.txt
timeout 280 python3 benchmarks/bias_bench.py --cells 4k-N,4k-C --reps 5 --sample-ms 30 --out $OUT/run134_s4k > $OUT/run134_s4k.log 2>&1
echo "run134 s4k rc $? $((SECONDS-T0)) s"
timeout $((575-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 5 --sample-ms 30 --out $OUT/run134_s16k > $OUT/run134_s16k.log 2>&1
echo "run134 s16k rc $? $((SECONDS-T0)) s"
for f in run134_s4k run134_s16k; do grep -v -i warning $OUT/$f.log | tail -22; done
