"""Dropout 0.1 with the keep mask applied to the f32 P (main) or to the bf16
P (forward only), against no dropout; interleaved, one process."""
import json, os, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.triton import forward as tf
from benchmarks.timing import time_interleaved
from benchmarks.bias_bench import fwd_bwd
H, N, TOKENS, RATE = 128, 16, 16384, 0.1
rows = []
for cell in sys.argv[1].split(","):
  t, causal = int(cell.split("-")[0][:-1]) * 1024, cell.endswith("C")
  b = TOKENS // t
  ks = jax.random.split(jax.random.key(t), 4)
  q, k, v, do = (jax.random.normal(kk, (b, t, N, H), jnp.bfloat16) for kk in ks)
  flops = 4 * b * N * t * t * H * (0.5 if causal else 1.0)
  calls, outs = {}, {}
  for name, rate, bf16 in (("none", 0.0, False), ("dropout f32 P", RATE, False),
                           ("dropout bf16 P", RATE, True)):
    tf._DROP_BF16 = bf16
    f = lambda q, k, v, rate=rate: pf.flash_attention(
        q, k, v, is_causal=causal, implementation="triton", dropout_rate=rate,
        dropout_rng=jax.random.key(1) if rate else None)
    fb = fwd_bwd(f, 3)
    outs[name] = jax.block_until_ready(fb(q, k, v, do))
    jf = jax.jit(f)
    outs[name + " out"] = jax.block_until_ready(jf(q, k, v))
    calls[name], calls[name + " fb"] = (jf, (q, k, v)), (fb, (q, k, v, do))
  same = [bool(jnp.array_equal(a, b)) for a, b in zip(
      (outs["dropout f32 P out"], *outs["dropout f32 P"]),
      (outs["dropout bf16 P out"], *outs["dropout bf16 P"]))]
  print(f"{cell}: bf16-P out, dq, dk, dv bitwise equal to f32-P: {same}", flush=True)
  del outs
  times = time_interleaved(calls, 5, 0.03)
  base = times["none"][0], times["none fb"][0]
  for name in [n for n in calls if not n.endswith(" fb")]:
    fw, fb = times[name][0], times[name + " fb"][0]
    row = dict(cell=cell, name=name, fwd_ms=fw * 1e3, fb_ms=fb * 1e3,
               fwd_ratio=base[0] / fw, fb_ratio=base[1] / fb,
               bwd_ratio=(base[1] - base[0]) / (fb - fw),
               fb_tflops=3.5 * flops / fb / 1e12, fwd_tflops=flops / fw / 1e12,
               spread=max(times[name][1], times[name + " fb"][1]))
    rows.append(row)
    print(f"{cell} {name:15s} fwd {row['fwd_ms']:7.2f} ms {row['fwd_tflops']:4.0f} TF/s  "
          f"fb {row['fb_ms']:7.2f} ms {row['fb_tflops']:4.0f} TF/s  none/this fwd "
          f"{row['fwd_ratio']:.2f} bwd {row['bwd_ratio']:.2f} fb {row['fb_ratio']:.2f}"
          f"  spread {row['spread']:.2f}", flush=True)
  del calls, q, k, v, do
if os.environ.get("OUT"):
  json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                 rows=rows), open(os.path.join(os.environ["OUT"], "dropout_bf16.json"), "w"), indent=1)
