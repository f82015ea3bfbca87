# Run 65, H100: d128 dropout forward configs (fwd_drop_ab.py), then backward configs with dropout (bwd_bench).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 150 python3 benchmarks/results/dropout_cfg_2026-11-23_h100/fwd_drop_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C > $OUT/run65_fwd.log 2>&1
echo "fwd rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/run65_fwd.log | tail -32
timeout $((400-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --reps 9 --cells d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --dropout 0.1 --variant block_kv_dq=128 --variant num_stages=3 --only "ours,ours dropout,ours[block_kv_dq=128],ours[num_stages=3]" --out $OUT/bwd > $OUT/run65_bwd.log 2>&1
echo "bwd rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/run65_bwd.log | grep -E "^d|ours" | sed 's/grad err.*spread/spread/' | cut -c1-110
