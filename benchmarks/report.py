"""The report of ``python -m benchmarks.run``: the environment a run had,
Markdown tables (ratios to the best peer), the headline of our kernels
against it, why an implementation did not run, compile times, the memory
table, plots, and ``write_report`` (results.json, table.md, RESULTS.md,
tflops.png, memory.png).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess

import jax

from benchmarks import peers as peers_lib
from benchmarks import workloads as wl

MODES = ("fwd", "bwd", "fwdbwd")
MODE_TITLE = {"fwd": "forward", "bwd": "backward (fwd+bwd minus fwd)",
              "fwdbwd": "forward + backward"}


def reason(e: BaseException) -> str:
  msg = str(e).strip().splitlines()
  msg = msg[0] if msg else ""
  if len(msg) > 220:
    msg = msg[:217] + "..."
  return f"{type(e).__name__}: {msg}" if msg else type(e).__name__




def _num(v: float) -> str:
  """TFLOP/s for a table: integers on a GPU, significant digits on a CPU."""
  return f"{v:.0f}" if v >= 100 else (f"{v:.1f}" if v >= 1 else f"{v:.2g}")


def _cell_text(r, mode, best_peer):
  status = r["status_fwd"] if mode == "fwd" else r["status_bwd"]
  key = f"tflops_{mode}"
  if key in r and (mode != "bwd" or str(status).startswith("ok")):
    v = r[key]
    if best_peer:
      return f"{_num(v)} ({v / best_peer:.2f})"
    return _num(v)
  if str(status).startswith("wrong"):
    return "wrong"
  if str(status).startswith("skipped"):
    return "skip"
  return "-"


def _timed(r, mode) -> float | None:
  """TFLOP/s of ``r`` in ``mode`` if it was timed and is valid, else None."""
  v = r.get(f"tflops_{mode}")
  if mode == "bwd" and not str(r["status_bwd"]).startswith("ok"):
    return None
  return v or None


def _best_peer(rs, mode):
  vals = [(_timed(r, mode), r["impl"]) for r in rs if not r["ours"]]
  vals = [v for v in vals if v[0]]
  return max(vals) if vals else (None, None)


def tables(results, impl_names, modes) -> str:
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  cols = [n for n in impl_names if any((l, n) in by for l in labels)]
  out = []
  for mode in modes:
    out.append(f"### TFLOP/s, {MODE_TITLE[mode]} (ratio to the best peer in the row)\n")
    out.append("| workload | " + " | ".join(cols) + " | best peer |")
    out.append("|---|" + "---|" * (len(cols) + 1))
    for l in labels:
      rs = [by[(l, n)] for n in cols if (l, n) in by]
      best, best_name = _best_peer(rs, mode)
      cells = [_cell_text(by[(l, n)], mode, best) if (l, n) in by else ""
               for n in cols]
      out.append(f"| {l} | " + " | ".join(cells) + f" | {best_name or '-'} |")
    out.append("")
  return "\n".join(out)


def headline(results, impl_names) -> str:
  ours = [n for n in impl_names if peers_lib.IMPLS[n].ours]
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  out = ["| workload | impl | fwd TFLOP/s | best peer fwd | ratio | bwd TFLOP/s | "
         "best peer bwd | ratio |", "|---|---|---|---|---|---|---|---|"]
  for l in labels:
    rs = [r for r in results if r["label"] == l]
    bf, bfn = _best_peer(rs, "fwd")
    bb, bbn = _best_peer(rs, "bwd")
    for n in ours:
      r = by.get((l, n))
      if r is None:
        continue
      f = r.get("tflops_fwd")
      b = r.get("tflops_bwd") if str(r["status_bwd"]).startswith("ok") else None
      fs = _num(f) if f else _short(r["status_fwd"])
      bs = _num(b) if b else _short(r["status_bwd"])
      out.append(
          f"| {l} | {n} | {fs} | {f'{_num(bf)} {bfn}' if bf else '-'} | "
          f"{f'**{f / bf:.2f}**' if f and bf else '-'} | {bs} | "
          f"{f'{_num(bb)} {bbn}' if bb else '-'} | "
          f"{f'**{b / bb:.2f}**' if b and bb else '-'} |")
  return "\n".join(out)


def paired_table(results, impl_names) -> str:
  """Our implementations against the best peer of each mode (by median, as
  in ``headline``): the median and quartiles of the per-rep time ratios
  peer / ours (> 1: ours faster), each rep's bursts taken in one pass over
  the cell (``run._time_cells``)."""
  ours = [n for n in impl_names if peers_lib.IMPLS[n].ours]
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  out = ["| workload | impl | " + " | ".join(MODE_TITLE[m].split(" (")[0]
                                             for m in MODES) + " |",
         "|---|---|" + "---|" * len(MODES)]
  for l in labels:
    rs = [r for r in results if r["label"] == l]
    for n in ours:
      r = by.get((l, n))
      if r is None or not r.get("paired"):
        continue
      cells = []
      for mode in MODES:
        _, peer = _best_peer(rs, mode)
        q = r["paired"].get(peer, {}).get(mode)
        left_out = r.get("paired_dropped", {}).get(peer, {}).get(mode)
        cells.append((f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}] {peer}" if q else "-")
                     + (f" ({left_out} reps <= 0 left out)" if left_out else ""))
      out.append(f"| {l} | {n} | " + " | ".join(cells) + " |")
  return "\n".join(out)


def features_table(results, impl_names) -> str:
  """``--features``: each of our implementations on a cell with a score
  feature against itself on the same cell without it (the two cells are
  timed together: the median and quartiles of the per-rep time ratios
  without / with, ``paired_plain``), forward and forward + backward, and
  against the best peer that takes the feature (fwd+bwd, paired).  Issue
  50's goals: ALiBi >= 0.98, dropout >= 0.95, a bias >= 0.8 of no-feature
  fwd+bwd and >= 1.5x cuDNN's with the same bias."""
  ours = [n for n in impl_names if peers_lib.IMPLS[n].ours]
  q = lambda t: f"{t[1]:.3f} [{t[0]:.3f}, {t[2]:.3f}]"
  out = ["| workload | impl | fwd / no feature | fwd+bwd / no feature | "
         "fwd+bwd / best peer with it |", "|---|---|---|---|---|"]
  for r in results:
    if r["impl"] not in ours or not r.get("plain_label"):
      continue
    plain = r.get("paired_plain", {})
    cells = [q(plain[m]) if m in plain else "-" for m in ("fwd", "fwdbwd")]
    rs = [p for p in results if p["label"] == r["label"]]
    _, best_name = _best_peer(rs, "fwdbwd")
    vs = r.get("paired", {}).get(best_name, {}).get("fwdbwd")
    cells.append(f"{q(vs)} {best_name}" if vs else "-")
    out.append(f"| {r['label']} | {r['impl']} | " + " | ".join(cells) + " |")
  return "\n".join(out) if len(out) > 2 else ""


def _short(status: str) -> str:
  s = str(status)
  return "wrong" if s.startswith("wrong") else ("skip" if "skipped" in s else "did not run")


def reasons(results, mem_rows) -> str:
  """Which implementations ran, and why the others did not, per impl."""
  impl_names = list(dict.fromkeys([r["impl"] for r in results] +
                                  [r["impl"] for r in mem_rows]))
  lines = []
  for n in impl_names:
    rs = [r for r in results if r["impl"] == n]
    ok = sum(1 for r in rs if r["status_fwd"] == "ok")
    okb = sum(1 for r in rs if str(r["status_bwd"]).startswith("ok"))
    why = {}
    for r in rs:
      f, b = str(r["status_fwd"]), str(r["status_bwd"])
      bad = lambda s: not s.startswith(("ok", "not timed", "skipped"))
      items = ([f] if bad(f) else []) if f == b else (
          [f"fwd: {f}"] * bad(f) + [f"bwd: {b}"] * bad(b))
      for s in items:
        why.setdefault(s, []).append(r["label"])
    ran = "ran" if ok or okb else "did not run"
    lines.append(f"- **{n}** ({peers_lib.IMPLS[n].note}): {ran}; forward timed "
                 f"in {ok}/{len(rs)} cells, backward in {okb}/{len(rs)}.")
    for s, labels in why.items():
      where = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
      lines.append(f"  - {s} ({where})")
  return "\n".join(lines)


def compile_table(results, impl_names) -> str:
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  cols = [n for n in impl_names if any((l, n) in by for l in labels)]
  out = ["| workload | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
  for l in labels:
    cells = []
    for n in cols:
      r = by.get((l, n), {})
      a, b = r.get("compile_fwd_s"), r.get("compile_fwdbwd_s")
      cells.append(f"{a:.1f} / {b:.1f}" if a and b else (f"{a:.1f} / -" if a else "-"))
    out.append(f"| {l} | " + " | ".join(cells) + " |")
  return "\n".join(out)


def memory_table(mem_rows, device_bytes) -> str:
  if not mem_rows:
    return "(no memory sweep)"
  seqlens = sorted({r["seqlen"] for r in mem_rows})
  cols = list(dict.fromkeys(r["impl"] for r in mem_rows))
  by = {(r["seqlen"], r["impl"]): r for r in mem_rows}
  out = ["| T | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
  for t in seqlens:
    cells = []
    for n in cols:
      r = by.get((t, n), {})
      if r.get("bytes"):
        gib = r["bytes"] / 2**30
        over = " (does not fit)" if device_bytes and r["bytes"] > device_bytes else ""
        cells.append(f"{gib:.2f}{over}")
      else:
        cells.append("-")
    out.append(f"| {t} | " + " | ".join(cells) + " |")
  return "\n".join(out)


def plots(results, mem_rows, out_dir, modes, device_bytes, smoke) -> list[str]:
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except Exception as e:
    return [f"no plots: matplotlib not importable ({reason(e)})"]
  written = []
  palette = plt.get_cmap("tab10").colors
  color = lambda n: palette[list(peers_lib.IMPLS).index(n) % len(palette)]
  suffix = " (CPU SMOKE RUN: not performance)" if smoke else ""
  configs = {}
  for r in results:
    w = wl.Workload(**r["workload"])
    configs.setdefault(w.config_key, (w.config_label, []))[1].append(r)
  # Curves for configs swept over seqlen; one bar panel per mode for the rest.
  curves = [v for v in configs.values()
            if len({r["workload"]["seqlen"] for r in v[1]}) > 1]
  singles = [r for v in configs.values() if v not in curves for r in v[1]]
  nrows = len(curves) + (1 if singles else 0)
  if nrows:
    fig, axes = plt.subplots(nrows, len(modes), squeeze=False,
                             figsize=(4.4 * len(modes), 3.1 * nrows))
    for i, (title, rs) in enumerate(curves):
      impls = list(dict.fromkeys(r["impl"] for r in rs))
      for j, mode in enumerate(modes):
        ax = axes[i][j]
        for n in impls:
          pts = sorted((r["workload"]["seqlen"], _timed(r, mode)) for r in rs
                       if r["impl"] == n and _timed(r, mode))
          if not pts:
            continue
          ours = peers_lib.IMPLS[n].ours
          ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                  lw=2.5 if ours else 1.2, ls="-" if ours else "--", label=n,
                  color=color(n))
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{title}: {mode}", fontsize=9)
        ax.set_xlabel("seqlen")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", framealpha=0.6)
    if singles:
      labels = list(dict.fromkeys(r["label"] for r in singles))
      impls = list(dict.fromkeys(r["impl"] for r in singles
                                 if any(_timed(r, m) for m in modes)))
      width = 0.8 / max(1, len(impls))
      for j, mode in enumerate(modes):
        ax = axes[-1][j]
        for k, n in enumerate(impls):
          vals = [next((_timed(r, mode) or 0.0 for r in singles
                        if r["label"] == l and r["impl"] == n), 0.0)
                  for l in labels]
          ax.bar([i + k * width for i in range(len(labels))], vals, width,
                 label=n, color=color(n),
                 hatch=None if peers_lib.IMPLS[n].ours else "//")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
        ax.set_xticklabels([l.replace(" ", "\n", 2) for l in labels], fontsize=6)
        ax.set_title(f"real-model shapes: {mode}", fontsize=9)
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=6)
    fig.suptitle("TFLOP/s vs seqlen" + suffix, fontsize=11)
    fig.tight_layout()
    path = os.path.join(out_dir, "tflops.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)
  if mem_rows:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for n in dict.fromkeys(r["impl"] for r in mem_rows):
      pts = sorted((r["seqlen"], r["bytes"] / 2**30) for r in mem_rows
                   if r["impl"] == n and r.get("bytes"))
      if pts:
        ours = peers_lib.IMPLS[n].ours
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                lw=2.5 if ours else 1.2, ls="-" if ours else "--", label=n,
                color=color(n))
    if device_bytes:
      ax.axhline(device_bytes / 2**30, color="k", lw=0.8, ls=":",
                 label="memory XLA may use on the device")
    w = mem_rows[0]["workload"]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("seqlen T (batch 1)")
    ax.set_ylabel("GiB (compiled memory_analysis)")
    ax.set_title(f"fwd+bwd memory, B=1 N={w['heads']} H={w['head_dim']} "
                 f"{w['dtype']}" + suffix, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, "memory.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)
  return written


def environment() -> dict:
  d = jax.devices()[0]
  env = dict(
      date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
      backend=jax.default_backend(), device=getattr(d, "device_kind", str(d)),
      device_count=jax.device_count(), jax=jax.__version__,
      jaxlib=getattr(jax.lib, "__version__", None) or _jaxlib_version(),
      python=platform.python_version(), tokamax=peers_lib.tokamax_version(),
      host=platform.node())
  try:
    env["device_memory_bytes"] = int(d.memory_stats()["bytes_limit"])
  except Exception:
    env["device_memory_bytes"] = None
  try:
    env["nvidia_smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
         "--format=csv,noheader"], capture_output=True, text=True,
        timeout=20).stdout.strip() or None
  except Exception:
    env["nvidia_smi"] = None
  try:
    import pallas_flash
    env["pallas_flash"] = pallas_flash.__version__
    env["git"] = os.environ.get("BENCH_GIT") or _git_commit()
  except Exception:
    pass
  return env


def _git_commit() -> str | None:
  """HEAD's short hash, with "-dirty" where tracked files differ from it
  (a copied checkout with later edits: the commit is not the tree that
  ran; BENCH_GIT names the right one where it is known)."""
  git = lambda *a: subprocess.run(["git", *a], capture_output=True,
                                  text=True, timeout=10)
  head = git("rev-parse", "--short", "HEAD").stdout.strip()
  if not head:
    return None
  dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
  return head + ("-dirty" if dirty else "")


def run_name(env) -> str:
  """Folder name of a GPU run: device and date, e.g. nvidia_h200_2026-11-21."""
  dev = "".join(c if c.isalnum() else "_" for c in env["device"].lower()).strip("_")
  return f"{dev}_{env['date'][:10]}"


def _jaxlib_version():
  try:
    import jaxlib
    return jaxlib.__version__
  except Exception:
    return None


def write_report(out_dir, env, command, results, mem_rows, impl_names, modes,
                 smoke, settings, notes) -> dict:
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "results.json"), "w") as f:
    json.dump(dict(env=env, command=command, settings=settings, smoke=smoke,
                   results=results, memory=mem_rows, notes=notes), f, indent=1,
              default=str)
  table = tables(results, impl_names, modes)
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(table)
  pngs = [] if settings.get("no_plots") else plots(
      results, mem_rows, out_dir, modes, env.get("device_memory_bytes"), smoke)
  banner = ("> **CPU SMOKE RUN** (no GPU found): tiny shapes, Pallas interpret "
            "mode. These numbers say that the harness works, nothing about "
            "performance.\n\n" if smoke else "")
  md = ["# Benchmark results\n", banner,
        f"- Date: {env['date']}",
        f"- Device: {env['device']} x{env['device_count']} ({env['backend']})"
        + (f"; nvidia-smi: {env['nvidia_smi']}" if env.get("nvidia_smi") else ""),
        f"- JAX {env['jax']}, jaxlib {env['jaxlib']}, Python {env['python']}, "
        f"tokamax {env['tokamax'] or 'not installed'}, pallas_flash "
        f"{env.get('pallas_flash')} (git {env.get('git')})",
        f"- Command: `{command}`",
        f"- Timing: median of {settings['reps']} reps after warm-up; each rep "
        f"one burst of back-to-back calls of >= {settings['sample_s'] * 1e3:.0f} ms "
        "ending in `jax.block_until_ready` for every implementation's forward "
        "and fwd+bwd of the cell, in a fresh random order. Backward = fwd+bwd "
        "minus fwd.",
        "- FLOPs: forward 4·B·N·T·S·H (×0.5 causal); backward 2.5×, fwd+bwd "
        "3.5× the forward. Packed/padded rows count only visible (query, key) pairs.",
        "- Correctness: every output and dq/dk/dv checked against the float32 "
        "reference (batch 0, kv head 0 and its query heads, full T) before "
        f"timing; rel. error limits fwd {settings['tolerances']['fwd']}, bwd "
        f"{settings['tolerances']['bwd']}. Wrong results "
        "are reported, not timed.",
        "- Memory: `compiled.memory_analysis()` of the jitted fwd+bwd "
        "(argument + output + temp − alias bytes), compiled but not run.",
        ""]
  md += notes and (["## Notes", ""] + [f"- {n}" for n in notes] + [""]) or []
  md += ["## Our kernels against the best peer", "", headline(results, impl_names), "",
         "Per-rep paired time ratios, best peer / ours, median [q25, q75] (drift "
         "slower than one pass over the cell cancels in them):", "",
         paired_table(results, impl_names), ""]
  feats = features_table(results, impl_names)
  if feats:
    md += ["## Score features", "", "Ours with ALiBi, dropout or a bias against "
           "ours on the same cell without it, and against the best peer that "
           "takes the feature: per-rep time ratios (the cell and its feature "
           "cells are timed together), median [q25, q75]; < 1: slower.", "",
           feats, ""]
  md += ["## Which implementations ran", "", reasons(results, mem_rows), "",
         "## Tables", "", table, "",
         "## Compile time of the first call (s, forward / forward+backward; trace + lower + compile)",
         "", compile_table(results, impl_names), "",
         "## Peak memory of forward+backward vs seqlen (GiB, compiled memory_analysis)",
         "", memory_table(mem_rows, env.get("device_memory_bytes")), ""]
  md += [f"![{os.path.basename(p)}]({os.path.basename(p)})" if p.endswith(".png")
         else p for p in pngs]
  with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  return dict(table=table, pngs=pngs)
