# Run 217 (H200): run 216's PTX dump of the d128 fused f32 kernel through the device's own ptxas and nvdisasm
# (Mosaic GPU could not spawn nvdisasm from its CUDA root), then each spill (STL / LDL) with its neighbours.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
C=/usr/local/cuda/bin
mkdir -p /tmp/dump
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_TO=/tmp/dump timeout 200 python3 benchmarks/results/bwd_2026-11-25d_h200/sass_spills.py /tmp/dump > /dev/null 2>&1
P=/tmp/dump/pallas_flash_mosaic_dkdv_1.ptx
$C/ptxas -arch=sm_90a -O3 -v -o /tmp/k.cubin $P > $OUT/run217_ptxas.log 2>&1; tail -3 $OUT/run217_ptxas.log
$C/nvdisasm -c -g /tmp/k.cubin > /tmp/k.sass 2>$OUT/run217_nvdisasm.err || $C/cuobjdump -sass /tmp/k.cubin > /tmp/k.sass
wc -l /tmp/k.sass; grep -c "STL\|LDL" /tmp/k.sass
grep -n "STL\|LDL" /tmp/k.sass | head -80 > $OUT/run217_spill_lines.txt
python3 - > $OUT/run217_spills.txt <<'PY'
import re
lines = open("/tmp/k.sass").read().splitlines()
hits = [i for i, l in enumerate(lines) if re.search(r"\b(STL|LDL)(\.\w+)*\b", l)]
print(len(lines), "lines,", len(hits), "local-memory accesses")
last = -10
for i in hits:
  lo = max(0, i - 6) if i - last > 8 else last + 2
  for j in range(lo, min(len(lines), i + 3)):
    print(("> " if j == i else "  ") + lines[j].strip()[:150])
  print("---")
  last = i
PY
gzip -c /tmp/k.sass > $OUT/run217_k.sass.gz; cp $P $OUT/run217_dkdv.ptx; gzip $OUT/run217_dkdv.ptx
head -c 1500 $OUT/run217_spills.txt
