"""Runs 105 and 107 (issue 14): forward-only A/B at d128, bf16, B1 16 heads.

ALiBi at S16k N: the default (two consumers, persistent, softmax overlap)
against three consumers (the no-bias default there) with ALiBi's linear part
(a) in the S accumulator's init (today's fold), (b) added after the S GEMM,
(c) with the key vector kept across steps (fixed_axis 1).
Dropout 0.1 at S4k N / S4k C / S16k C: the default against three consumers
(not persistent, no overlap).  No-bias / no-dropout defaults for the ratios.

Run 107 (RUN=107): the same with ALiBi's key terms from a second GEMM
(``MosaicConfig.alibi_gemm``), three consumers and the default config, at
S4k / S16k, causal and not.

Run 108 (RUN=108): non-causal ALiBi with one loop over the key tiles (each
tile's side traced: ``alibi_split`` patched to None), two and three
consumers, S4k / S16k.

  python3 fwd_ab.py time          # one process, interleaved, forward TFLOP/s
  python3 fwd_ab.py compile NAME  # one variant compiled and run once (ptxas)
"""
import dataclasses, os, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

_Tile = forward.AlibiTile


class After(_Tile):  # (b): the linear key term added to S after its GEMM
  def k_init(self, c):
    return None

  def add_rest(self, acc, c):
    if self.static and self.side != 0:
      return acc + _Tile.k_init(self, c)
    return _Tile.add_rest(self, acc, c)


class Fixed1(_Tile):  # (c): positions relative to the step's first key
  def __init__(self, *a, fixed_axis=1, side=None, **kw):
    super().__init__(*a, fixed_axis=1, side=side, **kw)


PATCHES = {"fold": {}, "after": {"AlibiTile": After},
           "fixed1": {"AlibiTile": Fixed1},
           # run 108: one loop over the key tiles, each tile's side traced
           "nosplit": {"alibi_split": lambda *a, **k: None}}


def build(h, t, causal, feature, cfg_kind, patch="fold"):
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  kw = {}
  if feature == "alibi":
    kw["alibi_slopes"] = 2.0 ** (-8.0 * jnp.arange(1, n + 1) / n)
  if feature == "dropout":
    kw.update(dropout_rate=0.1, dropout_rng=jax.random.key(7))
  cfg = None
  default = MosaicConfig.default(h, causal, kv_seqlen=t,
                                 alibi=feature == "alibi",
                                 dropout=feature == "dropout")
  if cfg_kind in ("3c", "3c gemm"):
    cfg = dataclasses.replace(default, consumers=3, persistent=False,
                              overlap_softmax=False)
  if cfg_kind == "gemm":
    cfg = default
  if cfg_kind and cfg_kind.endswith("gemm"):  # run 107: alibi_gemm
    cfg = dataclasses.replace(cfg, alibi_gemm=True)
  f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                         implementation="mosaic", config=cfg,
                                         **kw)
  saved = {name: getattr(forward, name) for name in PATCHES[patch]}
  for name, value in PATCHES[patch].items():
    setattr(forward, name, value)
  try:
    compiled = jax.jit(f).lower(q, k, v).compile()
    jax.block_until_ready(compiled(q, k, v))
  finally:
    for name, value in saved.items():
      setattr(forward, name, value)
  return compiled, (q, k, v), flops


ROWS = {  # name: (h, t, causal, feature, config, patch)
    "S16kN plain default": (128, 16384, False, "plain", None, "fold"),
    "S16kN alibi default": (128, 16384, False, "alibi", None, "fold"),
    "S16kN alibi 3c fold": (128, 16384, False, "alibi", "3c", "fold"),
    "S16kN alibi 3c after": (128, 16384, False, "alibi", "3c", "after"),
    "S16kN alibi 3c fixed1": (128, 16384, False, "alibi", "3c", "fixed1"),
    "S4kN plain default": (128, 4096, False, "plain", None, "fold"),
    "S4kN dropout default": (128, 4096, False, "dropout", None, "fold"),
    "S4kN dropout 3c": (128, 4096, False, "dropout", "3c", "fold"),
    "S4kC plain default": (128, 4096, True, "plain", None, "fold"),
    "S4kC dropout default": (128, 4096, True, "dropout", None, "fold"),
    "S4kC dropout 3c": (128, 4096, True, "dropout", "3c", "fold"),
    "S16kC plain default": (128, 16384, True, "plain", None, "fold"),
    "S16kC dropout default": (128, 16384, True, "dropout", None, "fold"),
    "S16kC dropout 3c": (128, 16384, True, "dropout", "3c", "fold"),
}

if os.environ.get("RUN") == "107":  # ALiBi's key-term GEMM (alibi_gemm)
  ROWS = {}
  for t, causal in ((16384, False), (4096, False), (4096, True), (16384, True)):
    cell = f"S{t // 1024}k{'C' if causal else 'N'}"
    ROWS[f"{cell} plain default"] = (128, t, causal, "plain", None, "fold")
    ROWS[f"{cell} alibi default"] = (128, t, causal, "alibi", None, "fold")
    ROWS[f"{cell} alibi gemm"] = (128, t, causal, "alibi", "gemm", "fold")
    if not causal and t == 16384:
      ROWS[f"{cell} alibi 3c gemm"] = (128, t, causal, "alibi", "3c gemm",
                                       "fold")

if os.environ.get("RUN") == "108":  # ALiBi without the three split loops
  ROWS = {}
  for t in (16384, 4096):
    cell = f"S{t // 1024}kN"
    ROWS[f"{cell} plain default"] = (128, t, False, "plain", None, "fold")
    ROWS[f"{cell} alibi default"] = (128, t, False, "alibi", None, "fold")
    ROWS[f"{cell} alibi nosplit"] = (128, t, False, "alibi", None, "nosplit")
    ROWS[f"{cell} alibi 3c"] = (128, t, False, "alibi", "3c", "fold")
    ROWS[f"{cell} alibi 3c nosplit"] = (128, t, False, "alibi", "3c",
                                        "nosplit")

if sys.argv[1] == "compile":
  build(*ROWS[sys.argv[2]])
  print("compiled", sys.argv[2], flush=True)
else:
  calls, flops = {}, {}
  for name, row in ROWS.items():
    try:
      f, args, flops[name] = build(*row)
      calls[name] = (f, args)
    except Exception as e:  # a variant that does not lower or compile
      print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
  tm = time_interleaved(calls, int(os.environ.get("REPS", 7)), 0.03)
  print("d128 forward TFLOP/s (dense FLOPs halved when causal; spread)")
  for name in calls:
    t, spread = tm[name][:2]
    print(f"{name:26s} {flops[name] / t / 1e12:7.1f} ({spread:.2f})", flush=True)
