# Run 171 (H200): main with `prefetch_rows` the d128 default (run 170). Issue 12's command on the d128 cells and the
# long-context cell (python -m benchmarks.run, cuDNN and tokamax in the same run, paired ratios), as run 162.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run171_device.txt 2>&1; cat $OUT/run171_device.txt
timeout 150 python3 -m benchmarks.run --dtype bf16 --workloads long --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --out $OUT/run171_long > $OUT/run171_long.log 2>&1
echo "long rc $? $((SECONDS-T0)) s"
timeout $((560-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --out $OUT/run171_conv > $OUT/run171_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
for D in long conv; do sed -n '/^Per-rep paired/,/^$/p' $OUT/run171_$D.log | cut -c1-200; done
