# Run 218 (H200): the same SASS reading as run 217 for the deterministic d128 default (two kernels: dK/dV and
# dQ), to see whether ptxas also issues the dP wgmma's wait before most of the exp2 (run 217, the fused kernel).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
C=/usr/local/cuda/bin
D=benchmarks/results/bwd_2026-11-25d_h200
mkdir -p /tmp/dump
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_TO=/tmp/dump timeout 200 python3 $D/sass_spills.py /tmp/dump default > /dev/null 2>&1
ls /tmp/dump
for K in dkdv dq; do
  P=$(ls /tmp/dump/pallas_flash_mosaic_${K}_*.ptx | head -1)
  $C/ptxas -arch=sm_90a -O3 -v -o /tmp/$K.cubin $P > $OUT/run218_${K}_ptxas.log 2>&1; tail -2 $OUT/run218_${K}_ptxas.log
  $C/nvdisasm -c /tmp/$K.cubin > /tmp/$K.sass && gzip -c /tmp/$K.sass > $OUT/run218_${K}.sass.gz
  gzip -c $P > $OUT/run218_${K}.ptx.gz
  python3 $D/sass_sync.py $OUT/run218_${K}.sass.gz > $OUT/run218_${K}_sync.txt
done
head -60 $OUT/run218_dkdv_sync.txt
