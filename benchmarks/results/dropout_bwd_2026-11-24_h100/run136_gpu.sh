# Run 136 (H100): (1) the decode tests natively (the decode kernel calls masks.position_visible, whose compares came
# back in dbd0763; not run on a GPU since); (2) ptxas's report of the d128 plain / ALiBi / dropout kernels at S4k and
# S16k after that fix; (3) the dropout backward A/B again: staggered consumers, 128-key dQ steps, both.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/dropout_bwd_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run136_device.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_decode.py > $OUT/run136_decode.log 2>&1
echo "decode pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run136_decode.log
timeout 120 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096,16384 --features plain,alibi,dropout \
  --out $OUT/run136_ptxas.md > $OUT/run136_ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"
MOSAIC_GPU_DUMP_PTXAS=1 timeout 330 python3 $D/drop_ab.py d128-16k-C,d128-4k-C,d128-16k-N stagger_consumers=True \
  block_kv_dq=128 stagger_consumers=True,block_kv_dq=128 > $OUT/run136.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "C7512|Registers are spilled" $OUT/run136.log | sed 's/for the function.*//' | sort | uniq -c
grep -E "^d|^  [a-z]" $OUT/run136.log
cat $OUT/run136_ptxas.md
