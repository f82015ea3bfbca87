"""The forward with lazy rescaling (``forward.RESCALE_THRESHOLD = 8``:
FlashAttention-4's running max that moves only by more than 2^8, and O's
rescale skipped where no row of a thread moved) against the form before
(``None``), in one process: each compiled twice as separate executables,
timed interleaved (``timing.interleaved_samples``), with and without
dropout 0.1 and with ALiBi; outputs compared with the old form's (max
abs difference, and against an f32 XLA reference on the first batch row's
first head).

  python3 rescale_ab.py d128-16k-C,d128-4k-N [plain,dropout,alibi]
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

import pallas_flash as pf
from benchmarks.bwd_bench import alibi_slopes
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import interleaved_samples, paired_ratio
from pallas_flash.mosaic import forward

cells = sys.argv[1].split(",")
features = (sys.argv[2] if len(sys.argv) > 2 else "plain,dropout,alibi").split(",")
rng = jax.random.key(7)
for cell in cells:
  h, t, c = cell.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  kws = {"plain": {}, "dropout": dict(dropout_rate=0.1, dropout_rng=rng),
         "alibi": dict(alibi_slopes=alibi_slopes(n))}
  calls, outs = {}, {}
  for feat in features:
    for form, thresh in (("old", None), ("lazy", 8.0)):
      forward.RESCALE_THRESHOLD = thresh  # read when the kernel is traced
      for rep in "ab":
        f = jax.jit(lambda q, k, v, kw=kws[feat]: pf.flash_attention(
            q, k, v, is_causal=causal, implementation="mosaic", **kw))
        cf = f.lower(q, k, v).compile()
        calls[f"{feat} {form} {rep}"] = (cf, (q, k, v))
        outs[f"{feat} {form}"] = cf(q, k, v)
  forward.RESCALE_THRESHOLD = 8.0
  samples, _ = interleaved_samples(calls, 15, 0.03)
  med = {name: float(np.median(xs)) for name, xs in samples.items()}
  print(f"{cell}: forward TFLOP/s (two executables each); paired ratio old a "
        "time / lazy a time (median [q25, q75]); max |lazy - old|")
  for feat in features:
    tf = lambda form: " ".join(f"{flops / med[f'{feat} {form} {r}'] / 1e12:6.1f}"
                               for r in "ab")
    q25, q50, q75 = paired_ratio(samples[f"{feat} old a"], samples[f"{feat} lazy a"])
    diff = float(jnp.max(jnp.abs(outs[f"{feat} lazy"].astype(jnp.float32)
                                 - outs[f"{feat} old"].astype(jnp.float32))))
    print(f"  {feat:8s} old {tf('old')}  lazy {tf('lazy')}  "
          f"{q50:.3f} [{q25:.3f}, {q75:.3f}]  max diff {diff:.2e}", flush=True)
