# Run 167 (H200), branch h-put-late (main at the dV-first change plus an A/B flag): 1) put_late in the d256
# (split_head_dim) kernels: consumer 0 stores dS (and P) for consumer 1 after issuing its own GEMM on them
# (1: dQ kernel, 2: dK/dV kernel, 3: both), against the default, each compiled twice, interleaved (cfg_ab.py,
# gradients bitwise); 2) the native d256 / split-head-dim backward tests (put_late=0: main's kernels).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run167_device.txt 2>&1
timeout 250 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d256-4k-N,d256-4k-C put_late=1 put_late=2 put_late=3 > $OUT/run167.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run167.log
T="tests/test_mosaic.py::test_backward"
timeout $((575-(SECONDS-T0))) python3 -m pytest -q -p no:cacheprovider -m "slow or not slow" \
  "$T[bwd d256 (split head dim) gqa causal ragged]" "$T[bwd d128 split head dim, segments, lengths]" \
  "$T[bwd alibi d256 (split head dim) lengths]" "$T[bwd dropout d256 (split head dim) causal ragged]" \
  "$T[bwd persistent split head dim d128 dropout]" "${T}_large[bwd d256 S1k causal gqa]" \
  "${T}_large[bwd dropout d256 soft-cap window (split head dim)]" "${T}_large[bwd d256 ragged window soft-cap]" \
  "${T}_large[bwd head dim 160 (padded to 256) dense mask]" "${T}_large[bwd alibi d256 causal (split head dim)]" \
  > $OUT/run167_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run167_pytest.log
