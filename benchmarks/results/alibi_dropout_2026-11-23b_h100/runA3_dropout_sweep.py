"""Dropout 0.1 fwd+bwd of the Pallas-Triton kernels under several
TritonConfigs against the default no-dropout baseline, interleaved, one
process (scratch sweep for issue 14)."""
import dataclasses, json, os, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.triton.config import TritonConfig
from benchmarks.timing import time_interleaved
from benchmarks.bias_bench import fwd_bwd

H, N, TOKENS, RATE = 128, 16, 16384, 0.1
D = TritonConfig.default(H)
VARIANTS = {
    "default": {},
    "fwd s2": dict(num_stages=2),
    "fwd 64x64 w4": dict(block_q=64, block_k=64, num_warps=4),
    "fwd 128x32": dict(block_k=32),
    "bwd s3": dict(num_stages_bwd=3),
    "bwd w8": dict(num_warps_bwd=8),
    "bwd dkv q32": dict(block_q_dkv=32),
    "bwd dq k32": dict(block_k_dq=32),
    "bwd dkv k128 w8": dict(block_k_dkv=128, num_warps_bwd=8),
}
only = sys.argv[2].split(",") if len(sys.argv) > 2 else list(VARIANTS)
rows = []
for cell in sys.argv[1].split(","):
  t, causal = int(cell.split("-")[0][:-1]) * 1024, cell.endswith("C")
  b = TOKENS // t
  ks = jax.random.split(jax.random.key(t), 4)
  q, k, v, do = (jax.random.normal(kk, (b, t, N, H), jnp.bfloat16) for kk in ks)
  flops = 4 * b * N * t * t * H * (0.5 if causal else 1.0)
  calls = {}
  def add(name, **kw):
    f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                           implementation="triton", **kw)
    try:
      fb = fwd_bwd(f, 3)
      jax.block_until_ready(fb(q, k, v, do))
      calls[name] = (jax.jit(f), (q, k, v))
      calls[name + " fb"] = (fb, (q, k, v, do))
    except Exception as e:
      print(f"  {name}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
  add("none")
  for name in only:
    add(name, dropout_rate=RATE, dropout_rng=jax.random.key(1),
        config=dataclasses.replace(D, **VARIANTS[name]))
  times = time_interleaved(calls, 5, 0.03)
  base = times["none"][0], times["none fb"][0]
  for name in [n for n in calls if not n.endswith(" fb")]:
    fw, fb = times[name][0], times[name + " fb"][0]
    row = dict(cell=cell, name=name, fwd_ms=fw * 1e3, fb_ms=fb * 1e3,
               fwd_ratio=base[0] / fw, fb_ratio=base[1] / fb,
               bwd_ratio=(base[1] - base[0]) / (fb - fw),
               fb_tflops=3.5 * flops / fb / 1e12,
               spread=max(times[name][1], times[name + " fb"][1]))
    rows.append(row)
    print(f"{cell} {name:18s} fwd {row['fwd_ms']:7.2f} ms  fb {row['fb_ms']:7.2f} ms  "
          f"none/this fwd {row['fwd_ratio']:.2f} bwd {row['bwd_ratio']:.2f} "
          f"fb {row['fb_ratio']:.2f}  {row['fb_tflops']:.0f} TF/s spread {row['spread']:.2f}",
          flush=True)
  del calls, q, k, v, do
if os.environ.get("OUT"):
  json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                 rows=rows), open(os.path.join(os.environ["OUT"], "dropout_sweep.json"), "w"), indent=1)
