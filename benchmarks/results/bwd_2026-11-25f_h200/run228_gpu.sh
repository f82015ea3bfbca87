# Run 228 (H200): does the d128 non-causal backward lose its last wave (waves.py: ours and cuDNN at CTA counts
# just over, at and under a multiple of 132)? And the dQ kernel with three consumers on 64-key steps (cfg_ab).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/bwd_2026-11-25f_h200
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run228_device.txt 2>&1; cat $OUT/run228_device.txt
timeout 330 python3 $D/waves.py 1:15872 1:16384 1:16896 4:3968 4:4096 4:4224 > $OUT/run228_waves.log 2>&1
echo "waves rc $? $((SECONDS-T0)) s"
timeout $((560-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N \
  dq_consumers=3,block_kv_dq=64 > $OUT/run228_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
sed -n '/^| B/,$p' $OUT/run228_waves.log; grep -v "^ *$" $OUT/run228_ab.log | tail -8
