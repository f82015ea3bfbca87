# Run 73, H100: packed keep bits (packed_ab.py, branch h-packed-keep), ptxas spill lines kept.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_packed_2026-11-24_h100
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
MOSAIC_GPU_DUMP_PTXAS=1 timeout 500 python3 $D/packed_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C > $OUT/run73_raw.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "====|spill|failed|forward finite" $OUT/run73_raw.log | grep -v "0 bytes spill" | head -60 > $OUT/run73_ptxas.log
grep -v -E "ptxas|spill|Compiling|Function properties|Used [0-9]+ registers|bytes stack|^====|^$" $OUT/run73_raw.log | grep -v -i warning > $OUT/run73_ab.log
cat $OUT/run73_ptxas.log | cut -c1-200 | head -40
tail -32 $OUT/run73_ab.log
