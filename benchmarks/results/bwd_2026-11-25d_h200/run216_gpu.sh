# Run 216 (H200): data for the next step (docs/mosaic.md, item 18): the SASS of the d128 fused kernel with f32 dQ
# adds (the deterministic=False config), each spill (STL / LDL) with its neighbours, and which CUDA tools exist.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $OUT/run216_device.txt 2>&1
{ for x in nvdisasm cuobjdump ptxas; do echo "$x: $(command -v $x || find / -name $x -type f 2>/dev/null | head -2 | tr '\n' ' ')"; done; } >> $OUT/run216_device.txt 2>&1
cat $OUT/run216_device.txt
mkdir -p /tmp/dump
MOSAIC_GPU_DUMP_SASS=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/dump timeout 240 python3 benchmarks/results/bwd_2026-11-25d_h200/sass_spills.py /tmp/dump > $OUT/run216_spills.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; head -c 3000 $OUT/run216_spills.log
ls -la /tmp/dump | head; (cd /tmp/dump && tar czf $OUT/run216_dump.tgz $(ls | grep -i dkdv | head -6)) 2>/dev/null; ls -la $OUT
