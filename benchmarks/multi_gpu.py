"""Scaling of fwd+bwd over several GPUs: ``python -m benchmarks.multi_gpu``.

Issue 13's benchmark.  First, on the GPUs, correctness and communication:

* batch- and head-sharded ``jax.jit(flash_attention)`` (``NamedSharding``)
  against the same call on one device: output and dq / dk / dv (relative L2
  error), the outputs' shardings, and the compiled fwd+bwd HLO, which must
  hold no collective at all;
* ``ring_attention`` in ``shard_map`` (zigzag causal GQA, contiguous
  non-causal, zigzag causal with segment ids and key lengths, zigzag causal
  bottom-right with ragged lengths over B = 2, zigzag causal with a window
  of a quarter share) against the float32
  reference on the whole sequence,
  next to the single-device kernel's error on the same inputs; its HLO may
  move data by collective-permutes only;
* ``jax.jit(flash_attention(context_parallel="ring"))`` on q / k / v
  sharded over the sequence (the automatic ring of sharding.py; causal and
  not, causal bottom-right with
  ragged lengths, causal with a window of a quarter share) against the
  one-device call, likewise.

Per cell (the first one before the checks) (bf16, head dim 128, 16 heads,
S in ``--seqlens``, causal and not, and causal with each ``--windows`` w:
``local_window_size=(w, 0)``), in one process and interleaved
(``benchmarks.timing.time_interleaved``):

* context parallel: one sequence (B = 1) on one GPU against the same
  sequence split over P GPUs by ``ring_attention`` in ``shard_map``
  (zigzag layout when causal, contiguous otherwise), and by the automatic
  ring (``jax.jit(flash_attention(context_parallel="ring"))`` on
  ``P(None, "seq")`` arrays, which reorders causal shares into zigzag
  inside the call); efficiency =
  t_1 / (P * t_P), fwd+bwd and fwd alone;
* Ulysses (all-to-all head scattering): the same sequence split over P
  GPUs by ``ulysses_attention`` in ``shard_map`` and by
  ``jax.jit(flash_attention(context_parallel="ulysses"))`` on
  ``P(None, "seq")`` arrays; same efficiency, beside the ring's;
* batch parallel (cells without a window): B = P sequences on one GPU
  against the same batch sharded ``P("x")`` over P GPUs under
  ``jax.jit``; same efficiency.

Times are medians of ``--reps`` bursts; fwd+bwd = one ``jax.vjp`` forward
plus the backward with a random cotangent.  The run stops starting cells
after ``--budget`` seconds and writes what it has (``results.json``,
``results.md``, the ring's compiled HLO of the first cell) under ``--out``.
On a CPU (tests: ``--xla_force_host_platform_device_count``) it runs the
same code in Pallas interpret mode at tiny sizes: not performance.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from benchmarks.bwd_bench import fwd_bwd, rel_l2
from benchmarks.report import environment
from benchmarks.timing import time_interleaved
import pallas_flash as pf

_ANY_COLLECTIVE = re.compile(
    r"all-gather|all-reduce|collective-permute|all-to-all|reduce-scatter")
_NOT_PERMUTE = re.compile(r"all-gather|all-reduce|all-to-all|reduce-scatter")
HEADS, HEAD_DIM = 16, 128


_START = time.perf_counter()


def log(*a):
  print(f"[{time.perf_counter() - _START:6.1f} s]", *a, flush=True)


def _normal(key, shape, dtype=jnp.bfloat16):
  return jax.random.normal(key, shape, dtype)


def _qkv_do(b, t, n, k, h, seed=0, dtype=jnp.bfloat16):
  ks = jax.random.split(jax.random.key(seed), 4)
  return (_normal(ks[0], (b, t, n, h), dtype), _normal(ks[1], (b, t, k, h), dtype),
          _normal(ks[2], (b, t, k, h), dtype), _normal(ks[3], (b, t, n, h), dtype))


def _attn(causal, implementation=None, alignment="top_left", window=None):
  return functools.partial(pf.flash_attention, is_causal=causal,
                           implementation=implementation,
                           causal_alignment=alignment,
                           local_window_size=window)


def _ragged(t):
  """Ragged lengths of a B = 2 batch whose bottom-right diagonals
  (kv_len - q_len) are 11t/16 (row 0 sees keys far ahead) and -3t/8 (the
  first 3t/8 rows see nothing)."""
  return dict(query_seq_lengths=jnp.array([t // 4, t - t // 8], jnp.int32),
              key_value_seq_lengths=jnp.array([t - t // 16, t // 2],
                                              jnp.int32))


def _ring(mesh, causal, layout, implementation=None, masks=None,
          alignment="top_left", window=None):
  """fwd(q, k, v) over shares of axis "seq" (arrays already in layout order);
  ``masks``: {lengths [B] (replicated) and segment ids [B, T] (shared)}."""
  spec = P(None, "seq")
  masks = masks or {}
  ring = jax.shard_map(
      lambda q, k, v, m: pf.ring_attention(
          q, k, v, axis_name="seq", is_causal=causal, layout=layout,
          implementation=implementation, causal_alignment=alignment,
          local_window_size=window, **m),
      mesh=mesh, in_specs=(spec,) * 3 + (
          {name: P() if x.ndim == 1 else spec for name, x in masks.items()},),
      out_specs=spec, check_vma=False)
  return lambda q, k, v: ring(q, k, v, masks)


def _ulysses(mesh, causal, window=None, implementation=None):
  """fwd(q, k, v) over contiguous shares of axis "seq", by all-to-alls."""
  spec = P(None, "seq")
  return jax.shard_map(
      lambda q, k, v: pf.ulysses_attention(
          q, k, v, axis_name="seq", is_causal=causal,
          local_window_size=window, implementation=implementation),
      mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False)


def _collectives(hlo: str) -> dict:
  names = re.findall(r"\b(all-gather|all-reduce|collective-permute|all-to-all|"
                     r"reduce-scatter)(?:-start)?\(", hlo)
  return {n: names.count(n) for n in sorted(set(names))}


# --- correctness and communication on the devices ---------------------------

def check_partitioned(devices, size) -> list[dict]:
  """Batch / head sharding: equal to the one-device call, no collective."""
  p = len(devices)
  b, t = (p, 2048) if size == "gpu" else (p, 64)
  rows = []
  for name, spec, k_heads in [("batch", P("x"), HEADS),
                              ("heads_gqa", P(None, None, "x"), 2 * p)]:
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    q, k, v, do = _qkv_do(b, t, HEADS, k_heads, HEAD_DIM, seed=1)
    for causal in (False, True):
      fb = fwd_bwd_out(_attn(causal))
      want = fb(q, k, v, do)
      put = lambda x: jax.device_put(x, NamedSharding(mesh, spec))
      args = tuple(put(x) for x in (q, k, v, do))
      got = fb(*args)
      hlo = fb.lower(*args).compile().as_text()
      kept = all(g.sharding.is_equivalent_to(a.sharding, 4)
                 for g, a in zip(got, (args[0],) + args[:3]))
      errs = [rel_l2(g, w) for g, w in zip(got, want)]
      ok = (max(errs) < 1e-2 and kept and not _ANY_COLLECTIVE.search(hlo))
      rows.append(dict(check=f"{name} {'causal' if causal else 'full'}",
                       shape=[b, t, HEADS, k_heads, HEAD_DIM],
                       err_vs_1dev=max(errs), shardings_kept=kept,
                       collectives=_collectives(hlo), ok=bool(ok)))
      log(f"  {rows[-1]}")
  return rows


def fwd_bwd_out(f):
  """jit(q, k, v, do -> (out, dq, dk, dv))."""
  def g(q, k, v, do):
    out, vjp = jax.vjp(f, q, k, v)
    return (out,) + tuple(vjp(do))
  return jax.jit(g)


def check_ring(devices, size) -> list[dict]:
  """Ring attention against the f32 reference, beside the 1-device kernel.

  The ring runs on arrays already in its layout's order (as real inputs
  are made); the reference's results are put in that order to compare."""
  p = len(devices)
  mesh = jax.sharding.Mesh(np.array(devices), ("seq",))
  t = 8192 if size == "gpu" else 16 * p
  h, n = (HEAD_DIM, HEADS) if size == "gpu" else (32, 4)
  rows = []
  # Packed: two documents and 3% padding tokens (-1), keys cut at 90%.
  seg = jnp.where(jnp.arange(t) < t // 3, 0, 1).at[t - t // 32:].set(-1)
  packed = dict(query_segment_ids=seg[None], key_value_seq_lengths=jnp.array(
      [t - t // 10], jnp.int32))
  br = "bottom_right"
  window = dict(local_window_size=(t // (4 * p), 0))  # a quarter share
  for layout, causal, k_heads, b, align, kw in [
      ("zigzag", True, n // 4, 1, "top_left", {}),
      ("contiguous", False, n, 1, "top_left", {}),
      ("zigzag", True, n // 4, 1, "top_left", packed),
      ("zigzag", True, n // 4, 2, br, _ragged(t)),
      ("zigzag", True, n // 4, 1, "top_left", window)]:
    q, k, v, do = _qkv_do(b, t, n, k_heads, h, seed=2)
    f32 = lambda x: x.astype(jnp.float32)
    with jax.default_matmul_precision("highest"):
      ref = fwd_bwd_out(functools.partial(_attn(causal, "xla", align), **kw))(
          f32(q), f32(k), f32(v), f32(do))
    one = fwd_bwd_out(functools.partial(
        _attn(causal, None if size == "gpu" else "triton", align), **kw))(
            q, k, v, do)
    order = (functools.partial(pf.zigzag, num_devices=p)
             if layout == "zigzag" else lambda x: x)
    put = lambda x: jax.device_put(order(x),
                                   NamedSharding(mesh, P(None, "seq")))
    args = tuple(put(x) for x in (q, k, v, do))
    ring_kw = {name: x if x.ndim == 1 else order(x)
               for name, x in kw.items() if name != "local_window_size"}
    compiled = fwd_bwd_out(_ring(
        mesh, causal, layout, None if size == "gpu" else "triton",
        ring_kw, align, kw.get("local_window_size"))).lower(*args).compile()
    got = compiled(*args)
    hlo = compiled.as_text()
    err_ring = [rel_l2(g, order(r)) for g, r in zip(got, ref)]
    err_one = [rel_l2(g, r) for g, r in zip(one, ref)]
    # bf16 ring: rounding of the per-block outputs adds a little error.
    ok = (all(er <= 2 * eo + 2e-3 for er, eo in zip(err_ring, err_one))
          and "collective-permute" in hlo and not _NOT_PERMUTE.search(hlo))
    what = ("" if not kw else " bottom_right ragged" if align == br
            else " window" if kw is window else " segments+kv_len")
    rows.append(dict(check=f"ring {layout} {'causal' if causal else 'full'}"
                     f" K={k_heads}{what}", shape=[b, t, n, k_heads, h],
                     err_ring_vs_f32=err_ring, err_1dev_vs_f32=err_one,
                     collectives=_collectives(hlo), ok=bool(ok)))
    log(f"  {rows[-1]}")
  return rows


def check_auto_ring(devices, size) -> list[dict]:
  """``jax.jit(flash_attention(context_parallel="ring"))`` on q / k / v
  sharded over the sequence: the ring runs by itself (sharding.py), equal
  to the one-device call, with collective-permutes only."""
  mesh = jax.sharding.Mesh(np.array(devices), ("seq",))
  t = 8192 if size == "gpu" else 16 * len(devices)
  h, n = (HEAD_DIM, HEADS) if size == "gpu" else (32, 4)
  impl = None if size == "gpu" else "triton"
  rows = []
  window = dict(local_window_size=(t // (4 * len(devices)), 0))
  for causal, align, kw in ((True, "top_left", {}), (False, "top_left", {}),
                            (True, "bottom_right", _ragged(t)),
                            (True, "top_left", window)):
    b = 2 if align == "bottom_right" else 1
    q, k, v, do = _qkv_do(b, t, n, n // 4, h, seed=3)
    fb = fwd_bwd_out(functools.partial(_attn(causal, impl, align),
                                       context_parallel="ring", **kw))
    want = fb(q, k, v, do)
    args = tuple(jax.device_put(x, NamedSharding(mesh, P(None, "seq")))
                 for x in (q, k, v, do))
    compiled = fb.lower(*args).compile()
    got = compiled(*args)
    hlo = compiled.as_text()
    errs = [rel_l2(g, w) for g, w in zip(got, want)]
    kept = got[0].sharding.is_equivalent_to(args[0].sharding, 4)
    ok = (max(errs) < 1e-2 and kept and "collective-permute" in hlo
          and not _NOT_PERMUTE.search(hlo))
    what = (" bottom_right ragged" if align == "bottom_right"
            else " window" if kw else "")
    rows.append(dict(check=f"jit auto ring {'causal' if causal else 'full'}"
                     f" K={n // 4}{what}",
                     shape=[b, t, n, n // 4, h],
                     err_vs_1dev=max(errs), shardings_kept=kept,
                     collectives=_collectives(hlo), ok=bool(ok)))
    log(f"  {rows[-1]}")
  return rows


def check_ulysses(devices, size) -> list[dict]:
  """Ulysses through both entry points against the one-device call, with
  all-to-alls only (GQA: K = 2 kv heads, repeated where P > 2)."""
  mesh = jax.sharding.Mesh(np.array(devices), ("seq",))
  p = len(devices)
  t = 8192 if size == "gpu" else 16 * p
  h, n = (HEAD_DIM, HEADS) if size == "gpu" else (32, p)
  impl = None if size == "gpu" else "triton"
  rows = []
  for entry in ("shard_map", "jit"):
    q, k, v, do = _qkv_do(1, t, n, 2, h, seed=4)
    fb_one = fwd_bwd_out(_attn(True, impl))
    want = fb_one(q, k, v, do)
    if entry == "shard_map":
      attn = _ulysses(mesh, True, implementation=impl)
    else:
      attn = functools.partial(_attn(True, impl), context_parallel="ulysses")
    args = tuple(jax.device_put(x, NamedSharding(mesh, P(None, "seq")))
                 for x in (q, k, v, do))
    compiled = fwd_bwd_out(attn).lower(*args).compile()
    got = compiled(*args)
    hlo = compiled.as_text()
    errs = [rel_l2(g, w) for g, w in zip(got, want)]
    found = _collectives(hlo)
    ok = max(errs) < 1e-2 and set(found) == {"all-to-all"}
    rows.append(dict(check=f"ulysses {entry} causal K=2",
                     shape=[1, t, n, 2, h], err_vs_1dev=max(errs),
                     collectives=found, ok=bool(ok)))
    log(f"  {rows[-1]}")
  return rows


# --- timing -------------------------------------------------------------------

def _flops(b, t, causal):
  """fwd+bwd FLOPs: 3.5 x forward (4 B N T S H, halved when causal)."""
  return 3.5 * 4 * b * HEADS * t * t * HEAD_DIM * (0.5 if causal else 1.0)


def bench_cell(devices, t, causal, reps, sample_s, hlo_out=None,
               window=None) -> dict:
  """One timed cell: one sequence on one GPU against ``ring_attention`` in
  ``shard_map`` (zigzag where causal work is unbalanced) and the automatic
  ring (``jax.jit(flash_attention(context_parallel="ring"))`` on
  ``P(None, "seq")`` arrays), fwd+bwd and fwd; without a window also batch
  sharding (B = P)."""
  p = len(devices)
  seq_mesh = jax.sharding.Mesh(np.array(devices), ("seq",))
  batch_mesh = jax.sharding.Mesh(np.array(devices), ("x",))
  # As the automatic ring chooses (ring._balanced): a causal window within
  # a share is balanced in contiguous shares, in two steps.
  layout = ("zigzag" if causal and (window is None or window > t // p)
            else "contiguous")
  q, k, v, do = _qkv_do(p, t, HEADS, HEADS, HEAD_DIM, seed=t)
  one = lambda x: x[:1]
  seq = lambda x: jax.device_put(one(x), NamedSharding(seq_mesh, P(None, "seq")))
  bat = lambda x: jax.device_put(x, NamedSharding(batch_mesh, P("x")))
  attn = _attn(causal, window=window)
  ring = _ring(seq_mesh, causal, layout, window=window)
  ulysses = _ulysses(seq_mesh, causal, window)
  auto_ring = functools.partial(attn, context_parallel="ring")
  auto_ulysses = functools.partial(attn, context_parallel="ulysses")
  fb_attn, fb_ring = fwd_bwd(attn), fwd_bwd(ring)
  b1, b1_fwd = (tuple(one(x) for x in (q, k, v, do)),
                tuple(one(x) for x in (q, k, v)))
  sq, sq_fwd = tuple(seq(x) for x in (q, k, v, do)), tuple(
      seq(x) for x in (q, k, v))
  calls = {
      "1gpu_b1": (fb_attn, b1),
      "ring": (fb_ring, sq),
      "auto_ring": (fwd_bwd(auto_ring), sq),
      "ulysses": (fwd_bwd(ulysses), sq),
      "auto_ulysses": (fwd_bwd(auto_ulysses), sq),
      "1gpu_bP": (fb_attn, (q, k, v, do)),
      "batch": (fb_attn, tuple(bat(x) for x in (q, k, v, do))),
      "1gpu_b1_fwd": (jax.jit(attn), b1_fwd),
      "ring_fwd": (jax.jit(ring), sq_fwd),
      "auto_ring_fwd": (jax.jit(auto_ring), sq_fwd),
      "ulysses_fwd": (jax.jit(ulysses), sq_fwd),
      "auto_ulysses_fwd": (jax.jit(auto_ulysses), sq_fwd),
  }
  if HEADS % p:  # Ulysses splits the heads over the GPUs
    for name in ("ulysses", "auto_ulysses", "ulysses_fwd", "auto_ulysses_fwd"):
      del calls[name]
  if window is not None:  # batch sharding does not depend on the mask
    del calls["1gpu_bP"], calls["batch"]
  del q, k, v, do
  compile_s, hlo = {}, {}
  for name, (f, args) in calls.items():
    t0 = time.perf_counter()
    compiled = f.lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    compile_s[name] = time.perf_counter() - t0
    log(f"    {name}: compiled and ran once in {compile_s[name]:.1f} s")
    hlo[name] = compiled.as_text()
    calls[name] = (compiled, args)
  if hlo_out:
    with open(hlo_out, "w") as f:
      f.write(hlo["ring"])
  times = time_interleaved(calls, reps, sample_s)
  ms = {name: times[name][0] * 1e3 for name in calls}
  eff = lambda one, many: ms[one] / (p * ms[many])
  name = f"S{t // 1024}k" if t >= 1024 else f"S{t}"
  row = dict(
      cell=f"{name}-{'C' if causal else 'N'}"
      + (f"-w{window}" if window is not None else ""),
      seqlen=t, causal=causal, window=window,
      devices=p, layout=layout, ms=ms,
      spread={name: times[name][1] for name in calls},
      compile_and_first_call_s=compile_s)
  for kind in ("ring", "auto_ring", "ulysses", "auto_ulysses"):
    if kind in ms:  # efficiencies against one GPU, and the collectives
      row.update({f"{kind}_efficiency": eff("1gpu_b1", kind),
                  f"{kind}_fwd_efficiency": eff("1gpu_b1_fwd", f"{kind}_fwd"),
                  f"{kind}_collectives": _collectives(hlo[kind])})
  if window is None:
    row.update(
        batch_efficiency=eff("1gpu_bP", "batch"),
        tflops_per_gpu={
            "1gpu_b1": _flops(1, t, causal) / ms["1gpu_b1"] / 1e9,
            "ring": _flops(1, t, causal) / p / ms["ring"] / 1e9,
            "auto_ring": _flops(1, t, causal) / p / ms["auto_ring"] / 1e9,
            **{name: _flops(1, t, causal) / p / ms[name] / 1e9
               for name in ("ulysses", "auto_ulysses") if name in ms},
            "1gpu_bP": _flops(p, t, causal) / ms["1gpu_bP"] / 1e9,
            "batch": _flops(p, t, causal) / p / ms["batch"] / 1e9},
        batch_collectives=_collectives(hlo["batch"]))
  log(f"  {row['cell']}: " + "  ".join(f"{n} {x:.1f} ms" for n, x in ms.items())
      + f"  | ring eff {row['ring_efficiency']:.3f} (fwd "
      f"{row['ring_fwd_efficiency']:.3f})  auto ring eff "
      f"{row['auto_ring_efficiency']:.3f} (fwd "
      f"{row['auto_ring_fwd_efficiency']:.3f})  ulysses eff "
      f"{row.get('ulysses_efficiency', float('nan')):.3f} (fwd "
      f"{row.get('ulysses_fwd_efficiency', float('nan')):.3f})  auto "
      f"ulysses eff {row.get('auto_ulysses_efficiency', float('nan')):.3f}"
      f"  batch eff "
      f"{row.get('batch_efficiency', float('nan')):.3f}")
  return row


def table(rows, p) -> str:
  lines = [f"| cell (bf16 d128 N16) | 1 GPU B1 | ring x{p} | ring eff | "
           f"ring fwd eff | auto ring x{p} | auto ring eff | auto ring fwd "
           f"eff | ulysses x{p} | ulysses eff | ulysses fwd eff | auto "
           f"ulysses eff | 1 GPU B{p} | batch x{p} | batch eff |",
           "|---" * 15 + "|"]
  for r in rows:
    ms = r["ms"]
    batch = (f"{ms['1gpu_bP']:.1f} | {ms['batch']:.1f} | "
             f"**{r['batch_efficiency']:.3f}**" if "batch" in ms
             else "- | - | -")
    ulysses = (f"{ms['ulysses']:.1f} | **{r['ulysses_efficiency']:.3f}** | "
               f"{r['ulysses_fwd_efficiency']:.3f} | "
               f"**{r['auto_ulysses_efficiency']:.3f}**" if "ulysses" in ms
               else "- | - | - | -")
    lines.append(
        f"| {r['cell']} ({r['layout']}) | {ms['1gpu_b1']:.1f} | "
        f"{ms['ring']:.1f} | **{r['ring_efficiency']:.3f}** | "
        f"{r['ring_fwd_efficiency']:.3f} | {ms['auto_ring']:.1f} | "
        f"**{r['auto_ring_efficiency']:.3f}** | "
        f"{r['auto_ring_fwd_efficiency']:.3f} | {ulysses} | {batch} |")
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seqlens", type=int, nargs="*",
                  default=[131072, 32768, 65536],
                  help="timed cells' S; none given: the checks only")
  ap.add_argument("--causal", choices=("both", "causal", "full"),
                  default="both")
  ap.add_argument("--windows", type=int, nargs="*", default=[],
                  help="also time causal cells with local_window_size="
                  "(w, 0) at each S, e.g. 4096")
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--sample-ms", type=float, default=50.0)
  ap.add_argument("--budget", type=float, default=1e9,
                  help="seconds after which no new cell starts")
  ap.add_argument("--checks", choices=("all", "ring", "ulysses", "none"),
                  default="all",
                  help="which GPU checks run (after the first cell)")
  ap.add_argument("--out", default="")
  args = ap.parse_args(argv)
  start = time.perf_counter()
  devices = jax.devices()
  size = "gpu" if jax.default_backend() == "gpu" else "cpu"
  env = environment()
  env["xla_flags"] = os.environ.get("XLA_FLAGS", "")
  log(f"{env['date']}  {env['device']} x{len(devices)}  jax {env['jax']}  "
      f"flags {env['xla_flags']!r}")
  if len(devices) < 2:
    log("needs at least 2 devices")
    return 1
  out = dict(env=env, command=argv, checks=[], cells=[])
  if args.out:  # the first cell writes its HLO there before any save()
    os.makedirs(args.out, exist_ok=True)

  def save():
    if not args.out:
      return
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
      json.dump(out, f, indent=1, default=str)

  def checks():
    log("checks")
    if args.checks == "all":
      out["checks"] += check_partitioned(devices, size)
    if args.checks in ("all", "ring"):
      out["checks"] += check_ring(devices, size) + check_auto_ring(devices,
                                                                   size)
    if args.checks in ("all", "ulysses"):
      out["checks"] += check_ulysses(devices, size)
    save()

  cells = [(t, c, None) for c in {"both": (True, False), "causal": (True,),
                                  "full": (False,)}[args.causal]
           for t in args.seqlens]
  cells += [(t, True, w) for w in args.windows for t in args.seqlens]
  for i, (t, causal, window) in enumerate(cells):
    if i == 1:  # the first cell (the headline) before the checks
      checks()
    if time.perf_counter() - start > args.budget:
      log(f"budget of {args.budget:.0f} s spent: skipped {cells[i:]}")
      out["skipped"] = cells[i:]
      break
    hlo = (os.path.join(args.out, "ring_fwdbwd_hlo.txt")
           if args.out and i == 0 else None)
    out["cells"].append(bench_cell(devices, t, causal, args.reps,
                                   args.sample_ms / 1e3, hlo, window))
    save()
  if len(cells) < 2:
    checks()
  text = table(out["cells"], len(devices))
  checks = [f"{c['check']}: {'ok' if c['ok'] else 'FAILED'}"
            for c in out["checks"]]
  log("\n".join(checks) + "\n" + text)
  if args.out:
    with open(os.path.join(args.out, "table.md"), "w") as f:
      f.write(text + "\n")
  return 0 if all(c["ok"] for c in out["checks"]) else 2


if __name__ == "__main__":
  raise SystemExit(main())
