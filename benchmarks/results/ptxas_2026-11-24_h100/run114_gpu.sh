# Run 114 (H100): benchmarks.ptxas_report as committed (one process per cell), d128 S16k, plain and ALiBi: the
# same rows as run 113's single-process log, and the three-consumer ALiBi forward's serialized wgmmas by config.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
timeout 300 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 16384 --features plain,alibi --out $OUT/run114_table.md > $OUT/run114.log 2>&1
echo "rc $?"; cat $OUT/run114.log | tail -12
