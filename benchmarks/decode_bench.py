"""Decoding benchmark (issue 15): one attention step of T new tokens per
sequence against a KV cache, bf16, 32 query heads over 8 kv heads, d128.

    python -m benchmarks.decode_bench --out benchmarks/results/decode_<date>_<dev>

Figure: HBM bytes the step must read and write (the K/V rows attended, summed
over the batch's cache lengths, plus Q and O) divided by the median time, in
TB/s, beside the card's peak.  Every implementation runs in the same process
on the same inputs, timed in interleaved bursts where their inputs fit in
memory side by side; small caches are rotated through enough copies that the
50 MB L2 cannot hold them between calls (each call reads from HBM).

Two timings per implementation, both reported:

* **per call**: back-to-back calls of the jitted step from the host, each one
  dispatched by itself.  At batch 1 this measures host dispatch, not the
  kernel: at 1:1:4k every implementation took 42-60 us (run 2) and 58-106 us
  (run 3) per call against ~5 us of HBM time.
* **in-jit** (``--device-time``, on by default): R calls inside ONE jitted
  program (``in_jit``: a ``lax.fori_loop`` whose carry is the query; each call
  takes the previous call's output as its query, so no call can be hoisted
  out of the loop or merged with another, and they run one after the other
  on the device), time / R.  In serving the decode step (the whole model) is
  one jitted program, so dispatch is paid once per token, not per attention
  call: the in-jit time is the one the TB/s of the summary table use.

Implementations (each optional; a failure is reported as "did not run"):

* ``ours``: ``pallas_flash.flash_attention(implementation=None)`` (the
  split-KV kernel, chosen automatically for T <= 64, S >= 8 T);
* ``ours-paged``: ``pallas_flash.decode.paged_attention`` over 64-token
  pages in a shuffled page pool;
* ``cudnn`` / ``xla``: ``jax.nn.dot_product_attention(implementation=...)``;
* ``jax-gqa``: ``jax.experimental.pallas.ops.gpu.decode_attention.gqa``
  (T = 1 only; its defaults: block_k 128, 16 splits);
* ``jax-paged``: ``jax.experimental.pallas.ops.gpu.paged_attention`` (T = 1;
  its layout [K, P, page_size, H], 64-token pages, 2 pages per block; it
  applies no softmax scale, so it gets q pre-scaled by 1/sqrt(H)).

All cells are non-causal (each new token attends the whole cache), as the
peers without a bottom-right diagonal compute.  ``tools/decode_sweep.py`` times
``DecodeConfig`` variants of ours against the peers with the same machinery.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import time
import warnings

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

import pallas_flash as pf
from pallas_flash.decode import paged_attention

N, K, H = 32, 8, 128
PAGE = 64
L2_BYTES = 64 << 20  # rotate inputs smaller than this (H100 L2 50 MB, H200 60 MB)
# (label, B, T, S, ragged)
CELLS = [("1:1:4k", 1, 1, 4096, False), ("1:1:32k", 1, 1, 32768, False),
         ("1:1:128k", 1, 1, 131072, False), ("32:1:4k", 32, 1, 4096, False),
         ("32:1:32k", 32, 1, 32768, False), ("32:16:32k", 32, 16, 32768, False),
         ("32:1:32k ragged", 32, 1, 32768, True),
         ("32:1:128k", 32, 1, 131072, False)]
PEAK_TBS = {"H100": 3.35, "H200": 4.8}  # HBM3 / HBM3e datasheet peaks


def log(*a):
  print(*a, flush=True)


def cell_inputs(b, t, s, ragged, seed=0):
  keys = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(keys[0], (b, t, N, H), jnp.bfloat16)
  k = jax.random.normal(keys[1], (b, s, K, H), jnp.bfloat16)
  v = jax.random.normal(keys[2], (b, s, K, H), jnp.bfloat16)
  if ragged:  # cache fills uniform in [1, S]
    lens = jax.random.randint(keys[3], (b,), 1, s + 1, jnp.int32)
  else:
    lens = jnp.full((b,), s, jnp.int32)
  return q, k, v, lens


def step_bytes(b, t, s, lens) -> float:
  """K/V rows attended + Q + O, bf16."""
  kv = float(np.sum(np.asarray(lens))) * K * H * 2 * 2
  return kv + 2 * b * t * N * H * 2


def paged_layout(k, v, seed=1):
  """[B, S, K, H] -> shuffled [P, PAGE, K, H] pools and a [B, S/PAGE] table."""
  b, s = k.shape[:2]
  m = s // PAGE
  perm = jax.random.permutation(jax.random.key(seed), b * m)
  table = perm.reshape(b, m).astype(jnp.int32)
  inv = jnp.argsort(perm)
  pages = lambda x: x.reshape(b * m, PAGE, K, H)[inv]
  return pages(k), pages(v), table


def builders(t):
  """{name: build(q, k, v, lens) -> (fn, args)} for a cell with T = t."""
  def ours(q, k, v, lens):
    return (lambda q, k, v, lens: pf.flash_attention(
        q, k, v, key_value_seq_lengths=lens)), (q, k, v, lens)

  def ours_paged(q, k, v, lens):
    kp, vp, table = paged_layout(k, v)
    return (lambda q, kp, vp, table, lens: paged_attention(
        q, kp, vp, table, lens, is_causal=False)), (q, kp, vp, table, lens)

  def jax_nn(impl):
    def build(q, k, v, lens):
      return (lambda q, k, v, lens: jax.nn.dot_product_attention(
          q, k, v, key_value_seq_lengths=lens, implementation=impl)), (q, k, v, lens)
    return build

  def jax_gqa(q, k, v, lens):
    if t != 1:
      raise NotImplementedError("decode_attention.gqa takes one query token")
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      from jax.experimental.pallas.ops.gpu import decode_attention
    return (lambda q, k, v, lens: decode_attention.gqa(
        q[:, 0], k, v, kv_seq_len=lens)[:, None]), (q, k, v, lens)

  def jax_paged(q, k, v, lens):
    if t != 1:
      raise NotImplementedError("paged_attention takes one query token")
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      from jax.experimental.pallas.ops.gpu import paged_attention as jpa
    kp, vp, table = paged_layout(k, v)
    kp, vp = (x.transpose(2, 0, 1, 3) for x in (kp, vp))  # [K, P, page, H]
    q = q * jnp.bfloat16(1 / math.sqrt(H))  # it takes no scale: pre-scaled q
    return (lambda q, kp, vp, table, lens: jpa.paged_attention(
        q[:, 0], kp, vp, table, lens, pages_per_compute_block=2)[:, None]), (
            q, kp, vp, table, lens)

  return {"ours": ours, "ours-paged": ours_paged, "cudnn": jax_nn("cudnn"),
          "xla": jax_nn("xla"), "jax-gqa": jax_gqa, "jax-paged": jax_paged}


def time_bursts(entries, reps: int, sample_s: float):
  """[(median s per call, spread)] for ``entries`` = [(f, arg_sets)]: ``reps``
  rounds, each one burst per entry in turn (interleaved, so drift of clocks
  or host load hits every entry alike), each burst cycling ``arg_sets``."""
  sizes = []
  for f, arg_sets in entries:
    for a in arg_sets:
      jax.block_until_ready(f(*a))
    t0 = time.perf_counter()
    jax.block_until_ready(f(*arg_sets[0]))
    single = time.perf_counter() - t0
    sizes.append(int(max(len(arg_sets),
                         min(2000, math.ceil(sample_s / max(single, 1e-6))))))
  xs = [[] for _ in entries]
  for _ in range(reps):
    for (f, arg_sets), n, x in zip(entries, sizes, xs):
      t0 = time.perf_counter()
      for i in range(n):
        out = f(*arg_sets[i % len(arg_sets)])
      jax.block_until_ready(out)
      x.append((time.perf_counter() - t0) / n)
  return [(float(np.median(x)), float((max(x) - min(x)) / np.median(x)))
          for x in xs]


def in_jit(fn, arg_sets, steps: int, unroll: int = 2):
  """(jitted g, g's arguments, calls R): R >= ``steps`` sequential calls of
  ``fn`` in one program, for the device-time mode.

  ``g`` is a ``lax.fori_loop`` of R / per_iter iterations; each iteration
  makes per_iter calls (``unroll`` rounded up to a multiple of
  ``len(arg_sets)``), call j on arg set j % len(arg_sets), so a rotated cache
  still reads HBM.  The loop carry is the query: each call's query is the
  previous call's output (same shape [B, T, N, H] and dtype), so every call
  depends on the one before (no hoisting, no CSE, no overlap) while computing
  exactly what a single call computes, with no extra op between calls.  With
  per_iter >= 2 the last call of an iteration reads a temporary, not the loop
  parameter, so XLA can write its output into the carry without a copy.
  Work that depends only on loop invariants (XLA's mask from the lengths) may
  be hoisted, as it would be across the layers of one decode step."""
  c = len(arg_sets)
  per_iter = c * math.ceil(max(unroll, 1) / c)
  iters = max(1, math.ceil(steps / per_iter))

  def g(sets):
    def body(_, q):
      for j in range(per_iter):
        o = fn(q, *sets[j % c][1:])
        if o.shape != q.shape:
          raise ValueError(f"in_jit needs an output shaped like q: {o.shape} vs {q.shape}")
        q = o.astype(q.dtype)
      return q
    return lax.fori_loop(0, iters, body, sets[0][0])

  return jax.jit(g), (tuple(arg_sets),), iters * per_iter


def loop_steps(nbytes, peak, sample_s: float, max_steps: int) -> int:
  """Calls per in-jit sample: enough that R x (HBM time of one call at the
  card's peak) >= ``sample_s`` (so the one dispatch per sample is noise),
  at most ``max_steps``."""
  t_hbm = nbytes / ((peak or 3.35) * 1e12)
  return int(min(max_steps, max(1, math.ceil(sample_s / t_hbm))))


def hlo_while_loops(hlo: str):
  """[(known trip count or None, {op: count})] for each ``while`` of an HLO
  module's text: the ops of its body counted through the computations the
  body calls (fusions, custom calls), so a loop that holds the attention
  shows its dots / custom calls."""
  comps, name, lines = {}, None, []
  for line in hlo.splitlines():
    m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(", line)
    if m and not line.startswith(" "):
      name, lines = m.group(1), []
    elif line == "}" and name:
      comps[name] = "\n".join(lines)
      name = None
    elif name:
      lines.append(line)

  def ops(comp, seen):
    if comp in seen or comp not in comps:
      return {}
    seen.add(comp)
    text = comps[comp]
    counts = {}
    for op in ("custom-call", "dot", "fusion", "while"):
      counts[op] = len(re.findall(rf"\s{op}\(", text))
    for callee in re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", text):
      for op, n in ops(callee, seen).items():
        counts[op] += n
    return counts

  loops = []
  for line in hlo.splitlines():
    if " while(" not in line:
      continue
    body = re.search(r"body=%?([\w.\-]+)", line).group(1)
    trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
    loops.append((int(trip.group(1)) if trip else None, ops(body, set())))
  return loops


def rel_err(x, ref):
  x, ref = np.asarray(x, np.float32), np.asarray(ref, np.float32)
  return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-6))


def copies_for(nbytes):
  return max(1, math.ceil(L2_BYTES / max(nbytes, 1)))


def rotated_inputs(b, t, s, ragged):
  """A cell's inputs ``[(q, k, v, lens)]``, the cache copied ``copies_for``
  times (so that calls cycling the copies read HBM, not L2; one copy where
  the copies would take > 40% of free memory), and the step's bytes."""
  q, k, v, lens = cell_inputs(b, t, s, ragged)
  nbytes = step_bytes(b, t, s, lens)
  free = _free_bytes()
  copies = copies_for(nbytes)
  if free is not None and copies * 2 * k.nbytes > 0.4 * free:
    copies = 1
  return [(q, k, v, lens)] + [
      (q, k.copy(), v.copy(), lens) for _ in range(copies - 1)], nbytes


def bench_cell(label, b, t, s, ragged, names, args, deadline, peak):
  if time.time() > deadline:  # skip before making the cell's inputs
    return [dict(cell=label, b=b, t=t, s=s, ragged=ragged, impl=name,
                 status="not run: time budget") for name in names]
  sets, nbytes = rotated_inputs(b, t, s, ragged)
  q, k, v, lens = sets[0]
  copies = len(sets)
  free = _free_bytes()
  steps = loop_steps(nbytes, peak, args.jit_sample_s, args.jit_max_steps)
  rows = []
  ref = pf.flash_attention(q[:1].astype(jnp.float32), k[:1].astype(jnp.float32),
                           v[:1].astype(jnp.float32), implementation="xla",
                           key_value_seq_lengths=lens[:1])
  # Implementations are timed interleaved (one burst each in turn, so a
  # transient slowdown hits all of them) where their inputs fit side by side
  # (each may hold a paged copy of K/V): run 3 timed the cells >= 64 MB one
  # implementation at a time and one disturbed stretch made cuDNN 2.3x slower
  # at 1:1:128k.  Cells under L2_BYTES (dispatch bound) get more bursts.  The
  # per-call and in-jit programs of one implementation are entries of the
  # same interleaved timing.
  interleave = copies > 1 or (
      free is not None and len(names) * 2 * k.nbytes < 0.5 * free)
  reps = args.small_reps if copies > 1 else args.reps
  timed = []  # (row, [(f, arg_sets)] per call and in-jit) awaiting timing
  for name in names:
    row = dict(cell=label, b=b, t=t, s=s, ragged=ragged, impl=name,
               bytes=nbytes, copies=copies)
    rows.append(row)
    if time.time() > deadline:
      row["status"] = "not run: time budget"
      continue
    try:
      if name == "xla" and b * N * t * s * 4 > 8 << 30:
        raise NotImplementedError("XLA path would materialise > 8 GiB of scores")
      build = builders(t)[name]
      fn, fargs = build(*sets[0])
      arg_sets = [fargs] + [build(*x)[1] for x in sets[1:]]
      f = jax.jit(fn)
      t0 = time.perf_counter()
      out = jax.block_until_ready(f(*fargs))
      row["first_call_s"] = time.perf_counter() - t0
      row["rel_err"] = rel_err(out[:1], ref)  # vs the f32 reference, batch 0
      del out
      entries = [(f, arg_sets)]
      if args.device_time:
        try:
          entries.append(_compile_in_jit(row, fn, arg_sets, steps, args.jit_unroll))
        except Exception as e:  # keep the per-call figure
          row["jit_status"] = (f"did not run: {type(e).__name__}: "
                               f"{str(e).splitlines()[0][:160]}")
      if interleave:
        timed.append((row, entries))
        continue
      _record(row, time_bursts(entries, args.reps, args.sample_s), nbytes, peak)
      del arg_sets, f, entries
    except Exception as e:  # report, go on
      row["status"] = f"did not run: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    log(_fmt(row))
  if timed:
    results = time_bursts([e for _, es in timed for e in es], reps, args.sample_s)
    for row, es in timed:
      _record(row, results[:len(es)], nbytes, peak)
      results = results[len(es):]
      row["interleaved"] = True
      log(_fmt(row))
  return rows


def _compile_in_jit(row, fn, arg_sets, steps, unroll):
  """The in-jit program of ``fn`` (``in_jit``), compiled and run once; its
  loop's trip count and body ops (from the optimised HLO) and whether its
  result is finite go into ``row``.  Returns its timing entry."""
  g, gargs, calls = in_jit(fn, arg_sets, steps, unroll)
  t0 = time.perf_counter()
  compiled = g.lower(*gargs).compile()
  out = jax.block_until_ready(compiled(*gargs))
  row["jit_first_call_s"] = time.perf_counter() - t0
  row["jit_calls"] = calls
  row["jit_loops"] = [dict(trip_count=n, body_ops=o)
                      for n, o in hlo_while_loops(compiled.as_text())]
  row["jit_finite"] = bool(jnp.isfinite(out.astype(jnp.float32)).all())
  return compiled, [gargs]


def _record(row, res, nbytes, peak):
  """``res``: [(median s, spread)] per call, then (if timed) in-jit per R calls."""
  med, spread = res[0]
  row.update(status="ok", med_s=med, spread=spread, tbs=nbytes / med / 1e12,
             pct_peak=100 * nbytes / med / 1e12 / peak if peak else None)
  if len(res) > 1:
    med, spread = res[1]
    med /= row["jit_calls"]
    row.update(jit_s=med, jit_spread=spread, jit_tbs=nbytes / med / 1e12,
               jit_pct_peak=100 * nbytes / med / 1e12 / peak if peak else None)


def _fmt(r):
  if r.get("status") != "ok":
    return f"  {r['cell']:16s} {r['impl']:11s} {r.get('status')}"
  line = (f"  {r['cell']:16s} {r['impl']:11s} per call {r['med_s'] * 1e6:9.1f} us "
          f"{r['tbs']:5.2f} TB/s spread {r['spread']:.2f}")
  if "jit_s" in r:
    line += (f" | in-jit {r['jit_s'] * 1e6:9.1f} us {r['jit_tbs']:5.2f} TB/s "
             f"({r['jit_pct_peak'] or 0:4.1f}% peak) spread {r['jit_spread']:.2f} "
             f"R {r['jit_calls']}")
  elif "jit_status" in r:
    line += f" | in-jit {r['jit_status']}"
  return line + f" | copies {r['copies']} err {r['rel_err']:.1e}"


def _free_bytes():
  try:
    st = jax.devices()[0].memory_stats()
    return st["bytes_limit"] - st["bytes_in_use"]
  except Exception:
    return None


IMPLS = ["ours", "ours-paged", "cudnn", "xla", "jax-gqa", "jax-paged"]
PEERS = ["cudnn", "xla", "jax-gqa", "jax-paged"]


def _times(rows, label, key):
  """{impl: seconds per call} of one cell for ``key`` ("med_s": per call,
  "jit_s": in-jit), the implementations that ran."""
  return {r["impl"]: r[key] for r in rows
          if r["cell"] == label and r.get("status") == "ok" and key in r}


def _ratio(ts, name):
  """Best peer's time / ``name``'s time (> 1: faster than every peer)."""
  best = min([ts[p] for p in PEERS if p in ts], default=None)
  return "—" if name not in ts or best is None else f"{best / ts[name]:.2f}"


def table(rows, peak):
  """Markdown: the summary (TB/s from the in-jit time where it was measured,
  else per call) and the per-call / in-jit times with the ratios of both."""
  labels = list(dict.fromkeys(r["cell"] for r in rows))
  nbytes = {r["cell"]: r["bytes"] for r in rows if "bytes" in r}
  jit = any("jit_s" in r for r in rows)
  key = "jit_s" if jit else "med_s"
  out = [f"TB/s from the {'in-jit' if jit else 'per-call'} time:", "",
         "| B : T : cache | ours TB/s (% peak) | ours-paged | cudnn | xla | "
         "jax-gqa | jax-paged | ours / best peer | paged / best peer |",
         "|---|---|---|---|---|---|---|---|---|"]
  for label in labels:
    ts = _times(rows, label, key)
    tb = {n: nbytes[label] / x / 1e12 for n, x in ts.items()}
    cell = lambda n: "—" if n not in tb else f"{tb[n]:.2f}"
    ours = "—" if "ours" not in tb else f"{tb['ours']:.2f} ({100 * tb['ours'] / peak:.0f}%)"
    out.append(f"| {label} | {ours} | " + " | ".join(cell(n) for n in IMPLS[1:])
               + f" | {_ratio(ts, 'ours')} | {_ratio(ts, 'ours-paged')} |")
  out += ["", "Time per attention call, us (per call: dispatched from the host "
          "one by one; in-jit: R calls in one jitted loop, / R):", "",
          "| B : T : cache | timing | " + " | ".join(IMPLS)
          + " | ours / best peer | paged / best peer |",
          "|---|---|" + "---|" * (len(IMPLS) + 2)]
  for label in labels:
    for mode, k in (("per call", "med_s"), ("in-jit", "jit_s")):
      ts = _times(rows, label, k)
      if k == "jit_s" and not ts:
        continue
      out.append(f"| {label} | {mode} | "
                 + " | ".join("—" if n not in ts else f"{ts[n] * 1e6:.1f}" for n in IMPLS)
                 + f" | {_ratio(ts, 'ours')} | {_ratio(ts, 'ours-paged')} |")
  return "\n".join(out)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", default=None)
  p.add_argument("--cells", default=",".join(c[0] for c in CELLS))
  p.add_argument("--impls", default=",".join(IMPLS))
  p.add_argument("--reps", type=int, default=7)
  p.add_argument("--small-reps", type=int, default=21,
                 help="bursts per implementation in cells < 64 MB")
  p.add_argument("--sample-s", type=float, default=0.05)
  p.add_argument("--budget-s", type=float, default=1e9)
  p.add_argument("--device-time", action=argparse.BooleanOptionalAction,
                 default=True, help="also time R calls inside one jitted loop "
                 "(in_jit); the summary's TB/s use that time")
  p.add_argument("--jit-sample-s", type=float, default=2e-3,
                 help="in-jit: R x (HBM time of one call at peak) >= this")
  p.add_argument("--jit-max-steps", type=int, default=256)
  p.add_argument("--jit-unroll", type=int, default=2,
                 help="in-jit: calls per loop iteration (rounded up to a "
                 "multiple of the rotated copies)")
  args = p.parse_args(argv)
  deadline = time.time() + args.budget_s
  dev = jax.devices()[0]
  kind = dev.device_kind
  peak = next((v for k_, v in PEAK_TBS.items() if k_ in kind), None)
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
              device=kind, jax=jax.__version__, peak_tbs=peak,
              sms=getattr(dev, "core_count", None), device_time=args.device_time,
              jit_sample_s=args.jit_sample_s, jit_max_steps=args.jit_max_steps,
              jit_unroll=args.jit_unroll)
  log(f"decode bench on {kind} ({meta['sms']} SMs), jax {jax.__version__}, "
      f"peak {peak} TB/s")
  if jax.default_backend() != "gpu":
    log("no GPU: nothing to time")
    return 1
  results = dict(meta=meta, rows=[])

  def save():
    if args.out:
      os.makedirs(args.out, exist_ok=True)
      with open(os.path.join(args.out, "decode.json"), "w") as fh:
        json.dump(results, fh, indent=1)

  names = args.impls.split(",")
  for label, b, t, s, ragged in CELLS:
    if label not in args.cells.split(","):
      continue
    results["rows"] += bench_cell(label, b, t, s, ragged, names, args,
                                  deadline, peak)
    save()
  md = table(results["rows"], peak or 1.0)
  log(f"\n{kind}, jax {jax.__version__}, bf16 N{N}/K{K} d{H}, TB/s = "
      f"(K/V attended + Q + O bytes) / median time; peak {peak} TB/s\n\n{md}")
  if args.out:
    with open(os.path.join(args.out, "table.md"), "w") as fh:
      fh.write(md + "\n")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
