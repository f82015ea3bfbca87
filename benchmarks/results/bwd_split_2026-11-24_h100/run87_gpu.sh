# Run 87: where the d128 backward's time goes between its two kernels (kernel_split.py: the whole backward against
# the dK/dV kernel alone, dq_rows_in_registers 0 and 1, one process per dropout rate), and the PTX of the d128
# backward kernels (with and without dropout) dumped for reading their SASS off the device.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
R=benchmarks/results/bwd_split_2026-11-24_h100
T0=$SECONDS
timeout 200 python3 $R/kernel_split.py > $OUT/split.log 2>&1
echo "split rc $? $((SECONDS-T0)) s"; tail -7 $OUT/split.log
timeout 150 python3 $R/kernel_split.py --dropout 0.1 --cells 4k-N,16k-N > $OUT/split_dropout.log 2>&1
echo "split dropout rc $? $((SECONDS-T0)) s"; tail -5 $OUT/split_dropout.log
mkdir -p $OUT/ptx
for d in 0 0.1; do
  MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_TO=$OUT/ptx/drop$d timeout 90 python3 $R/kernel_split.py --dropout $d --cells 1k-N --tokens 1024 --heads 2 > /dev/null 2>&1
  echo "dump $d rc $?"
done
ls -la $OUT/ptx/* | head -30
