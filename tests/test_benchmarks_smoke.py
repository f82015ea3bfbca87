"""The benchmark harness's CPU smoke path: it runs, checks against the
reference, and reports which implementations ran and which did not."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import bwd_bench, run, workloads
import pallas_flash as pf


def test_smoke_table(tmp_path):
  on_gpu = jax.default_backend() == "gpu"
  out = tmp_path / "bench"
  rc = run.main(["--smoke", "--impls", "xla", "cudnn", "jax-mgpu", "--workloads",
                 "convention", "padded", "memory", "--seqlens", "128",
                 "--causal", "no", "--memory-seqlens", "128", "256",
                 "--reps", "2", "--no-plots", "--out", str(out),
                 # no 60 s smoke budget: a loaded CI core must not skip the
                 # memory sweep this test reads
                 "--time-budget", "1e9"])
  assert rc == 0
  data = json.loads((out / "results.json").read_text())
  assert data["smoke"] is True
  ran = {r["impl"] for r in data["results"] if r["status_fwd"] == "ok"}
  assert "xla" in ran
  if not on_gpu:
    assert not ran & {"cudnn", "jax-mgpu"}  # no GPU: reported, not run
  table = (out / "table.md").read_text()
  for name in ran:
    assert name in table
  for r in data["results"]:
    if r["impl"] == "xla":
      assert r["err_fwd"] < run.FWD_TOL[r["workload"]["dtype"]]
      assert r["tflops_fwd"] > 0 and r["tflops_fwdbwd"] > 0
      for mode in ("fwd", "fwdbwd"):  # trace + lower, a part of the whole
        assert 0 < r[f"lower_{mode}_s"] <= r[f"compile_{mode}_s"]
  report = (out / "RESULTS.md").read_text()
  assert "CPU SMOKE RUN" in report
  assert "cudnn" in report
  if not on_gpu:
    assert "did not run" in report
  assert "python -m benchmarks.run --smoke --impls xla" in report
  # The O(T^2) path's memory grows about 4x per doubling of T.
  mem = {r["seqlen"]: r["bytes"] for r in data["memory"] if r["impl"] == "xla"}
  assert mem[256] > 2.5 * mem[128]


def test_wrong_result_is_reported_not_timed(tmp_path, monkeypatch):
  """An implementation that returns a wrong output is reported as wrong."""
  from benchmarks import peers

  def build(w, x):
    fn, aux = peers._jax_nn("xla")(w, x)
    return (lambda q, k, v, aux: fn(q, k, v, aux) * 1.5), aux

  bad = dataclasses.replace(peers.IMPLS["xla"], name="xla", build=build)
  monkeypatch.setitem(peers.IMPLS, "xla", bad)
  out = tmp_path / "bench"
  run.main(["--smoke", "--impls", "xla", "--workloads", "convention", "--seqlens", "128",
            "--causal", "no", "--reps", "2", "--no-plots", "--out", str(out)])
  data = json.loads((out / "results.json").read_text())
  (r,) = data["results"]
  assert r["status_fwd"].startswith("wrong")
  assert "t_fwd_s" not in r and "tflops_fwd" not in r


def test_compile_options_reach_the_compiler(tmp_path, monkeypatch):
  """An implementation's ``compile_options`` (``cudnn-det``'s
  xla_gpu_deterministic_ops) are passed to its forward's and its
  forward + backward's compiles."""
  from benchmarks import peers, timing

  assert peers.IMPLS["cudnn-det"].compile_options == {
      "xla_gpu_deterministic_ops": True}
  seen = []
  compile_timed = timing.compile_timed

  def spy(f, *args, options=None):
    seen.append(options)
    return compile_timed(f, *args, options=options)

  monkeypatch.setattr(timing, "compile_timed", spy)
  opts = {"xla_gpu_deterministic_ops": True}  # accepted by the CPU compiler too
  det = dataclasses.replace(peers.IMPLS["xla"], compile_options=opts)
  monkeypatch.setitem(peers.IMPLS, "xla", det)
  out = tmp_path / "bench"
  run.main(["--smoke", "--impls", "xla", "--workloads", "convention",
            "--seqlens", "128", "--causal", "no", "--reps", "2", "--no-plots",
            "--no-check", "--out", str(out)])
  data = json.loads((out / "results.json").read_text())
  assert [r["status_fwd"] for r in data["results"]] == ["ok"]
  assert seen == [opts, opts]  # forward, forward + backward


def test_cell_times_impls_together_with_paired_ratios(tmp_path):
  """Every implementation of a cell is timed in one interleaved run: each
  has one sample per rep, and ours carries the per-rep paired time ratios
  to each peer (quartiles; the backward's over the reps where it reads
  > 0) that RESULTS.md tabulates."""
  out = tmp_path / "bench"
  reps = 3
  rc = run.main(["--smoke", "--impls", "ours-triton", "xla", "--workloads",
                 "convention", "--seqlens", "128", "--causal", "no",
                 "--reps", str(reps), "--no-plots", "--out", str(out),
                 "--time-budget", "1e9"])
  assert rc == 0
  data = json.loads((out / "results.json").read_text())
  by = {r["impl"]: r for r in data["results"]}
  for r in by.values():  # (on a loaded CPU, fwd+bwd can time below fwd)
    assert r["status_fwd"] == "ok" and r["status_bwd"].startswith("ok")
    assert len(r["samples_fwd_s"]) == len(r["samples_fwdbwd_s"]) == reps
  paired = by["ours-triton"]["paired"]
  assert set(paired) == {"xla"} and {"fwd", "fwdbwd"} <= set(paired["xla"])
  # A rep whose backward (fwd+bwd - fwd) reads <= 0 (CPU noise) is left
  # out of the backward's ratio and counted.
  bwd = lambda r: [b - f for f, b in zip(r["samples_fwd_s"], r["samples_fwdbwd_s"])]
  bad = sum(a <= 0 or b <= 0 for a, b in zip(bwd(by["xla"]), bwd(by["ours-triton"])))
  dropped = by["ours-triton"].get("paired_dropped", {}).get("xla", {})
  assert dropped.get("bwd", 0) == bad and ("bwd" in paired["xla"]) == (bad < reps)
  # The fwd+bwd median ratio is xla's median rep over ours (odd reps).
  ratios = sorted(a / b for a, b in zip(by["xla"]["samples_fwdbwd_s"],
                                        by["ours-triton"]["samples_fwdbwd_s"]))
  q25, q50, q75 = paired["xla"]["fwdbwd"]
  assert q25 <= q50 <= q75 and q50 == pytest.approx(ratios[reps // 2])
  assert "paired" not in by["xla"]  # (peers carry none)
  report = (out / "RESULTS.md").read_text()
  assert "Per-rep paired time ratios" in report
  assert f"{q50:.3f} [{q25:.3f}, {q75:.3f}] xla" in report


def test_flops_convention():
  w = workloads.Workload(name="convention", batch=4, seqlen=4096, heads=16,
                         kv_heads=16, head_dim=128, causal=True,
                         dtype="bfloat16")
  pairs = workloads.visible_pairs(w)
  assert workloads.flops(w, pairs, "fwd") == 4 * 4 * 16 * 4096 * 4096 * 128 * 0.5
  assert workloads.flops(w, pairs, "bwd") == 2.5 * workloads.flops(w, pairs, "fwd")
  seg = workloads.packed_segment_ids(2, 512, seed=0)
  wp = dataclasses.replace(w, kind="packed", batch=2, seqlen=512)
  assert 0 < workloads.visible_pairs(wp, segment_ids=seg) < 2 * 512 * 513 / 2



def test_long_cell_checks_tail_rows(tmp_path):
  """Beyond --xla-max-seqlen (issue 12's 128k cell on the GPU) the reference
  is the last query rows against every key: out and dQ are checked there,
  dK / dV are not (they sum over every row)."""
  out = tmp_path / "bench"
  rc = run.main(["--smoke", "--impls", "ours-triton", "xla", "--workloads",
                 "long", "--xla-max-seqlen", "256", "--reps", "2",
                 "--no-plots", "--out", str(out), "--time-budget", "1e9"])
  assert rc == 0
  data = json.loads((out / "results.json").read_text())
  by = {r["impl"]: r for r in data["results"]}
  assert by["xla"]["status_fwd"].startswith("did not run")  # O(T^2): skipped
  r = by["ours-triton"]
  assert r["workload"]["name"] == "long" and r["workload"]["seqlen"] > 256
  assert r["status_fwd"] == "ok" and r["status_bwd"].startswith("ok")
  tol = run.FWD_TOL[r["workload"]["dtype"]]
  assert 0 < r["err_fwd"] < tol
  assert set(r["err_bwd_parts"]) == {"dq"}
  assert 0 < r["err_bwd_parts"]["dq"] < run.BWD_TOL[r["workload"]["dtype"]]


def test_bwd_bench_variant_fields_go_to_their_config():
  fwd, bwd = bwd_bench.split_variant(bwd_bench.parse_variant(
      "overlap_softmax=False,fwd.consumers=3,consumers=2,block_q_dkv=128"))
  assert fwd == {"overlap_softmax": False, "consumers": 3}
  assert bwd == {"consumers": 2, "block_q_dkv": 128}


def test_bwd_bench_only_keeps_variant_names_whole():
  assert bwd_bench.parse_only("ours,cudnn det,ours[a=1,b=2],ours[c=3]") == (
      "ours", "cudnn det", "ours[a=1,b=2]", "ours[c=3]")
  assert bwd_bench.parse_only("") == ()


def test_bwd_bench_bias_rows_differentiate_the_bias():
  """--bias: ours, triton, cuDNN and the variants are called with the bias
  as an argument and return its gradient (the reference's, on the CPU's
  fallback path); the table reports the bias's cost."""
  impls = bwd_bench.cell_impls(64, 64, True, [{"block_q_dkv": 64}], 2,
                               alibi=False, bias=True)
  with_bias = {name for name in impls if bwd_bench.takes_bias(name, True)}
  assert with_bias == {"ours bias", "triton bias", "cudnn bias",
                       "ours[block_q_dkv=64]"}
  ks = jax.random.split(jax.random.key(0), 5)
  q, k, v, do = (jax.random.normal(kk, (1, 64, 2, 64), jnp.bfloat16)
                 for kk in ks[:4])
  bias = jax.random.normal(ks[4], (1, 2, 64, 64), jnp.bfloat16)
  f32 = lambda xs: [x.astype(jnp.float32) for x in xs]
  want = bwd_bench.fwd_bwd(lambda q, k, v, b: pf.flash_attention(
      q, k, v, b, is_causal=True, implementation="xla"))(
          *f32((q, k, v, bias, do)))
  for name in ("ours bias", "ours[block_q_dkv=64]"):  # the Mosaic kernels,
    got = bwd_bench.fwd_bwd(impls[name])(q, k, v, bias, do)  # interpreted
    assert len(got) == 4
    for g, w in zip(f32(got), want):
      assert bwd_bench.rel_l2(g, w) < 2e-2
  # a variant with the bias: its field over the configs picked for a bias
  from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
  cfg = bwd_bench.variant_config(128, False, 16384, {"fwd.block_kv": 64},
                                 bias=True)
  picked = MosaicConfig.default(128, False, kv_seqlen=16384).with_bias(128)
  assert cfg == dataclasses.replace(
      picked, block_kv=64,
      backward=MosaicBackwardConfig.default(128, False).with_bias(128))
  assert cfg.consumers == 2 and cfg.backward.block_kv_dq == 64
  # under --alibi a variant starts from ALiBi's configs, checked against
  # triton's ALiBi; with two features it has no reference row
  cfg = bwd_bench.variant_config(128, True, 16384, {"row_ring": True},
                                 alibi=True)
  assert cfg.backward == dataclasses.replace(
      MosaicBackwardConfig.default(128, True, alibi=True), row_ring=True)
  assert bwd_bench.reference("ours[row_ring=True]", alibi=True) == (
      "triton alibi")
  assert bwd_bench.reference("ours[row_ring=True]", 0.1, alibi=True) is None
  assert bwd_bench.reference("ours[row_ring=True]") == "cudnn"
  assert bwd_bench.reference("ours bias", 0.1, bias=True) == "cudnn bias"
  row = lambda impl, ms: dict(cell="d64-0k-C", impl=impl, fwdbwd_ms=ms,
                              bwd_tflops=1.0, fwdbwd_tflops=1.0)
  text = bwd_bench.table([row("ours", 8.0), row("ours bias", 10.0),
                          row("cudnn bias", 20.0), row("cudnn", 9.0)])
  assert "| d64-0k-C | 0.80 | 2.00 | - |" in text


def test_bwd_split_times_both_kernels_on_cpu():
  """benchmarks/bwd_split.py in interpret mode on a tiny cell: the whole
  backward and the dK/dV kernel alone are timed, and the launch it patches
  is restored."""
  from tools import bwd_split
  from pallas_flash.mosaic import backward as mb

  launch = mb._launch
  rows = bwd_split.split(["0.0625k-C"], heads=1, tokens=64, interpret=True,
                         reps=1, sample_s=0.0)
  assert mb._launch is launch
  assert [r[:2] for r in rows] == [("0.0625k-C", 0), ("0.0625k-C", 1)]
  for _, _, whole, kv, _, *rates in rows:
    assert whole > 0 and kv > 0 and rates[0] > 0 and rates[1] > 0


def test_mosaic_modules_lists_each_kernel_without_locations():
  """benchmarks.mosaic_modules (a refactor's kernel check) finds the d64
  default's forward and fused backward kernels, and their texts carry no
  source locations, so only kernel changes change them."""
  from tools import mosaic_modules
  mods = mosaic_modules.kernel_modules(
      mosaic_modules.lower_cell(64, True, 0.0, b=1, t=256))
  names = [name for name, _ in mods]
  assert names == ["pallas_flash_mosaic_fwd_mosaic_gpu",
                   "pallas_flash_mosaic_dkdv_mosaic_gpu"], names
  for _, text in mods:
    assert "loc(" not in text and "mosaic_gpu" in text


def test_mosaic_modules_issue12_cells_are_the_issue_table():
  """``mosaic_modules --issue12`` lowers exactly issue 12's table: bf16,
  B*T = 16384, N*H = 2048, d64 / d128 at 4k and 16k, d256 at 1k and 4k, both
  causal flags, and the B1 T = 131072 causal d128 cell."""
  from tools import mosaic_modules
  cells = mosaic_modules.issue12_cells()
  got = sorted((w.head_dim, w.seqlen, w.causal, w.batch, w.heads)
               for w in cells)
  want = sorted([(h, t, c, 16384 // t, 2048 // h)
                 for h, ts in ((64, (4096, 16384)), (128, (4096, 16384)),
                               (256, (1024, 4096)))
                 for t in ts for c in (False, True)]
                + [(128, 131072, True, 1, 16)])
  assert got == want
  assert {w.dtype for w in cells} == {"bfloat16"}


def test_ptxas_report_reads_spills_and_serialized_wgmmas(monkeypatch):
  """benchmarks.ptxas_report attributes ptxas's lines to their cell and
  kernel (its warnings come before the kernel's 'Compiling entry' line, its
  register count after), flags C7512 and C7513 (wgmmas serialized) and refuses
  to run without a GPU."""
  from tools import ptxas_report
  fn = "pallas_flash_mosaic_{}_mosaic_gpu_kernel"
  text = "\n".join([
      "==== cell d128 S16k N alibi",
      "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async "
      "instructions are serialized due to insufficient register resources "
      f"for the function '{fn.format('fwd')}'",
      "ptxas warning : Registers are spilled to local memory in function "
      f"'{fn.format('fwd')}', 520 bytes spill stores, 628 bytes spill loads",
      f"ptxas info    : Compiling entry function '{fn.format('fwd')}' for "
      "'sm_90a'",
      "    336 bytes stack frame, 520 bytes spill stores, 628 bytes spill loads",
      "ptxas info    : Used 128 registers, used 16 barriers",
      f"ptxas info    : Compiling entry function '{fn.format('dkdv')}' for "
      "'sm_90a'",
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
      "ptxas info    : Used 168 registers, used 16 barriers",
      "==== cell d64 S4k C plain",
      f"ptxas info    : Compiling entry function '{fn.format('fwd')}' for "
      "'sm_90a'",
      "ptxas info    : Used 168 registers, used 16 barriers",
      "==== cell d128 S4k N fp8 [fwd.overlap_softmax=True]",
      "ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async "
      "instructions are serialized due to non wgmma instructions defining "
      "input registers of a wgmma between start and end of the pipeline "
      f"stage in the function '{fn.format('fwd')}'",
      f"ptxas info    : Compiling entry function '{fn.format('fwd')}' for "
      "'sm_90a'",
      "ptxas info    : Used 168 registers, used 16 barriers"])
  rows = ptxas_report.parse(text)
  assert [(r["cell"], r["kernel"], r["registers"], r["spill_stores"],
           r["spill_loads"], r["serialized"]) for r in rows] == [
      ("d128 S16k N alibi", "pallas_flash_mosaic_fwd", 128, 520, 628, True),
      ("d128 S16k N alibi", "pallas_flash_mosaic_dkdv", 168, 0, 0, False),
      ("d64 S4k C plain", "pallas_flash_mosaic_fwd", 168, 0, 0, False),
      ("d128 S4k N fp8 [fwd.overlap_softmax=True]", "pallas_flash_mosaic_fwd",
       168, 0, 0, True)]
  assert "**yes**" in ptxas_report.table(rows)
  monkeypatch.setattr(ptxas_report.jax, "default_backend", lambda: "cpu")
  with pytest.raises(SystemExit, match="needs a GPU"):
    ptxas_report.main([])


def test_kernel_profile_summarises_phases_and_gaps(monkeypatch):
  """tools.kernel_profile.summarise: per phase the cycles of each entry /
  exit pair (ts in thousands of cycles, nested phases too), per warpgroup
  track the gaps between consecutive top-level phases and the span; the
  table puts the longest phase first; no GPU, no run."""
  from tools import kernel_profile
  events = []
  for tid in (1, 2):  # two warpgroups, the same steps
    for name, ts, ph in [("S", 0.0, "B"), ("S", 0.5, "E"),
                         ("softmax", 0.5, "B"), ("softmax", 2.5, "E"),
                         ("turn", 2.6, "B"), ("turn", 2.61, "E"),
                         ("GEMMs", 3.0, "B"), ("S wait", 3.1, "B"),
                         ("S wait", 3.2, "E"), ("GEMMs", 4.0, "E")]:
      events.append(dict(name=name, ph=ph, ts=ts, pid=1, tid=tid))
  s = kernel_profile.summarise(events)
  assert s["tracks"] == 2 and s["span"] == pytest.approx(4000)
  assert s["phases"]["softmax"] == pytest.approx([2000, 2000])
  assert s["phases"]["S wait"] == pytest.approx([100, 100])  # nested
  assert s["gaps"]["softmax -> turn"] == pytest.approx([100, 100])
  assert "S wait -> " not in " ".join(s["gaps"])  # top level only
  assert kernel_profile.table(s).splitlines()[2].startswith("| softmax | 2 |")
  with pytest.raises(ValueError, match="fp8 forward takes no"):
    kernel_profile.profile(128, 256, False, True, "", dict(alibi=True),
                           batch=1, space=10, out_dir="unused")
  monkeypatch.setattr("jax.default_backend", lambda: "cpu")
  with pytest.raises(SystemExit, match="needs a GPU"):
    kernel_profile.main(["--cell", "d128-4k-N"])


def test_kernel_profile_overlaps_of_softmaxes():
  """tools.kernel_profile.overlaps: the share of each softmax during which
  another track on the same SM was in its softmax or a GEMM phase; a track
  on another SM does not count."""
  from tools import kernel_profile
  ev = lambda name, t0, t1, pid, tid: [
      dict(name=name, ph="B", ts=t0, pid=pid, tid=tid),
      dict(name=name, ph="E", ts=t1, pid=pid, tid=tid)]
  events = (ev("softmax", 0.0, 2.0, 1, 1)  # 2000 cycles
            + ev("S", 0.0, 0.5, 1, 2) + ev("softmax", 1.5, 3.0, 1, 2)
            + ev("PV", 0.5, 1.0, 1, 2)
            + ev("softmax", 0.0, 2.0, 2, 3))  # another SM: alone
  shares = kernel_profile.overlaps(events)
  # track 1: the other's softmax 1.5-2.0 (25%), its S and PV 0-1.0 (50%);
  # track 2: track 1's softmax over 1.5-2.0 of 1.5-3.0 (1/3); track 3: 0
  assert sorted(shares["softmax"]) == pytest.approx([0.0, 0.25, 1 / 3])
  assert sorted(shares["GEMMs"]) == pytest.approx([0.0, 0.0, 0.5])


def test_kernel_profile_halves_heads_until_the_trace_fits(monkeypatch,
                                                          tmp_path):
  """kernel_profile.profile: the profiler's "Insufficient space" (a
  persistent CTA's items overflow the event buffer) retries with half the
  heads, a kernel past the shared memory with half the space; the trace of
  the run that fitted is returned with its heads."""
  import pallas_flash
  from tools import kernel_profile
  seen = []

  def fake(q, k, v, **kw):
    import jax.experimental.pallas.mosaic_gpu as plgpu
    space = plgpu.CompilerParams().profile_space
    seen.append((q.shape[2], space))
    if space > 300:
      raise ValueError("Mosaic GPU kernel exceeds available shared memory")
    if q.shape[2] > 4:
      raise RuntimeError("Insufficient space to capture a full trace")
    (tmp_path / "k-trace.json").write_text("{}")
    return q

  monkeypatch.setattr(pallas_flash, "flash_attention", fake)
  trace, heads = kernel_profile.profile(128, 256, False, False, "", {},
                                        batch=1, space=1000,
                                        out_dir=str(tmp_path))
  assert (trace, heads) == (str(tmp_path / "k-trace.json"), 4)
  assert seen == [(16, 1000), (16, 500), (16, 250), (8, 250), (4, 250)]


def test_kernel_profile_says_when_no_space_fits(monkeypatch, tmp_path):
  """kernel_profile.profile: a kernel past the shared memory at every event
  space down to the smallest (d128 with a bias ring on an H200) ends with a
  message naming the cause, after halving the space."""
  import pallas_flash
  from tools import kernel_profile
  seen = []

  def fake(q, k, v, **kw):
    import jax.experimental.pallas.mosaic_gpu as plgpu
    seen.append(plgpu.CompilerParams().profile_space)
    raise ValueError("Mosaic GPU kernel exceeds available shared memory: "
                     "smem_bytes=233440 > max_smem_bytes=232448")

  monkeypatch.setattr(pallas_flash, "flash_attention", fake)
  with pytest.raises(SystemExit, match="no shared memory for the profiler"):
    kernel_profile.profile(128, 256, False, False, "", {}, batch=1,
                           space=1000, out_dir=str(tmp_path))
  assert seen == [1000, 500, 250, 125, 62]


def test_ptxas_report_variant_changes_only_its_fields(monkeypatch):
  """``ptxas_report.with_variant``: the default configs come back with the
  variant's fields (forward ones written ``fwd.``), every other field as
  the table chose it."""
  from tools import ptxas_report
  from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
  for cls in (MosaicConfig, MosaicBackwardConfig):  # restored afterwards
    monkeypatch.setattr(cls, "default", cls.__dict__["default"])
  before = (MosaicConfig.default(128, False, kv_seqlen=4096),
            MosaicBackwardConfig.default(128, False))
  ptxas_report.with_variant("dkdv_registers=232,fwd.num_stages=3")
  after = (MosaicConfig.default(128, False, kv_seqlen=4096),
           MosaicBackwardConfig.default(128, False))
  assert before[1].dkdv_registers == 240 and after[1].dkdv_registers == 232
  assert before[0].num_stages == 2 and after[0].num_stages == 3
  assert after == (dataclasses.replace(before[0], num_stages=3),
                   dataclasses.replace(before[1], dkdv_registers=232))


def test_interleaved_samples_pair_each_rep():
  """Two calls timed by ``interleaved_samples``: one sample per rep each,
  and ``paired_ratio``'s quartiles of their per-rep ratios (issue 14's
  table in ``bias_bench`` reads them)."""
  import jax.numpy as jnp
  import numpy as np
  from benchmarks import bias_bench, timing

  x = jnp.ones((64, 64))
  calls = {"a": (jax.jit(lambda x: x @ x), (x,)),
           "b": (jax.jit(lambda x: x + 1), (x,))}
  samples, bursts = timing.interleaved_samples(calls, reps=3, sample_s=1e-3)
  assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
  assert all(t > 0 for v in samples.values() for t in v)
  assert min(bursts.values()) >= 1
  q25, q50, q75 = timing.paired_ratio([2.0, 4.0, 9.0, 3.0], [1.0, 1.0, 3.0, 3.0])
  assert (q25, q50, q75) == (1.75, 2.5, 3.25)  # ratios 2, 4, 3, 1
  rows = [dict(cell="4k-N", name=name, fwd_s=1.0, fb_s=float(np.median(xs)),
               fwd_tflops=1.0, fwdbwd_tflops=1.0, fb_samples=xs)
          for name, xs in (("mosaic", [1.0, 2.0, 3.0]),
                           ("mosaic dropout", [1.25, 2.5, 3.0]))]
  table = bias_bench.table(rows)
  line = next(l for l in table.splitlines()[-9:]
              if l.startswith("dropout: mosaic no-drop / dropout"))
  assert line.split()[-3:] == ["0.800", "[0.800,", "0.900]"]


def test_nondeterministic_impl_passes_the_flag(monkeypatch):
  """``ours-mosaic-nondet`` is ours with ``deterministic=False``; the
  builder (``_ours``, checked here through the xla path, which a CPU runs)
  keeps the default otherwise."""
  import pallas_flash
  from benchmarks import peers

  seen = []
  real = pallas_flash.flash_attention

  def spy(*args, **kwargs):
    seen.append(kwargs["deterministic"])
    return real(*args, **kwargs)
  monkeypatch.setattr(pallas_flash, "flash_attention", spy)
  assert peers.IMPLS["ours-mosaic-nondet"].ours
  w = workloads.Workload(name="convention", batch=1, seqlen=128, heads=2,
                         kv_heads=2, head_dim=64, causal=False,
                         dtype="float32")
  x = workloads.make_inputs(w)
  for deterministic in (True, False):
    fn, aux = peers._ours("xla", deterministic)(w, x)
    fn(x.q, x.k, x.v, aux)
  assert seen == [True, False]


def test_mosaic_bench_fp8_arguments_and_cells():
  """``mosaic_bench --dtype fp8``'s arguments: cells, variants, head-dim
  filter, what fp8 refuses; and of the 2026-11-28 d128 fp8 sweep over
  today's three-consumer default, the variants pass ``check_supported``
  (shared memory <= 227 KiB) in its cells but block_kv=256 (three
  consumers take <= 192), and stacking 3 stages on two consumers' block_kv
  256 does not fit."""
  from benchmarks import mosaic_bench as mb

  args = mb.parse_args(["--bench", "--dtype", "fp8", "--cells",
                        "d128-4k-N,d128-4k-C,d128-16k-C", "--variant",
                        "block_kv=256", "--variant",
                        "consumers=3,persistent=False,overlap_softmax=False"])
  assert args.dtype == "fp8"
  assert args.cells == [(128, 4096, False), (128, 4096, True),
                        (128, 16384, True)]
  assert args.variant == [{"block_kv": 256}, {
      "consumers": 3, "persistent": False, "overlap_softmax": False}]
  assert mb.select_cells(args.cells, [64]) == []
  assert mb.select_cells([], [128]) == [c for c in mb.CELLS if c[0] == 128]
  for bad in (["--dtype", "fp8", "--tokamax"], ["--cells", "128-4k-N"],
              ["--cells", "d128-4k-X"]):
    with pytest.raises(SystemExit):
      mb.parse_args(bad)
  sweep = [mb.parse_variant(v) for v in (
      "block_kv=256", "consumers=3,persistent=False,overlap_softmax=False",
      "block_kv=128,num_stages=3", "block_kv=256,overlap_softmax=False")]
  for h, t, causal in args.cells:
    # (the d128 fp8 default has three consumers, which take no block_kv 256)
    kept, skipped = mb.fitting_configs(h, causal, t, sweep, fp8=True)
    assert [text for text, _ in skipped] == [
        "block_kv=256", "block_kv=256,overlap_softmax=False"], skipped
    assert all("block_kv <= 192" in reason for _, reason in skipped)
    assert len(kept) == 1 + len(sweep) - 2
    for _, _, cfg in kept[1:]:
      assert cfg.smem_bytes(h, fp8=True) <= 227 * 1024
    (_, reason), = mb.fitting_configs(
        h, causal, t, [{"num_stages": 3, "block_kv": 256, "consumers": 2}],
        fp8=True)[1]
    assert "needs 247296 bytes of shared memory" in reason
  # variants that differ only in a field the config's short name does not
  # spell (reduce_ilp) keep one name each, so each is timed
  kept, _ = mb.fitting_configs(256, False, 1024,
                               [{"reduce_ilp": 8}, {"reduce_ilp": 32}])
  assert len({name for name, _, _ in kept}) == 3


def test_mosaic_bench_fp8_checks_times_and_skips(monkeypatch):
  """``mosaic_bench.bench_fp8`` on a tiny cell without a GPU (the Mosaic
  call swapped for the xla path on the same e4m3 inputs and descales):
  each fitting config reaches ``flash_attention``, is checked against the
  f32 reference on the dequantized inputs (a wrong one is reported, not
  timed), the refused variants are listed with the reason, and the table
  shows them."""
  import dataclasses as dc
  import pallas_flash as pf
  from benchmarks import mosaic_bench as mb
  from pallas_flash.mosaic.config import MosaicConfig

  real, seen = pf.flash_attention, []

  def spy(q, k, v, **kw):
    if kw.get("implementation") != "mosaic":  # (the reference)
      return real(q, k, v, **kw)
    assert q.dtype == k.dtype == v.dtype == pf.fp8.E4M3
    assert kw["q_descale"] is not None and kw["v_descale"] is not None
    cfg = kw["config"]
    seen.append(cfg)
    out = real(q, k, v, **{**kw, "implementation": "xla"})
    return out * 1.5 if cfg is not None and cfg.overlap_softmax else out
  monkeypatch.setattr(pf, "flash_attention", spy)

  two = "consumers=2,block_kv=256"  # (the default has three consumers)
  variants = [mb.parse_variant(v) for v in (
      two, two + ",overlap_softmax=True", two + ",num_stages=3",
      "block_kv=64", "consumers=4", "block_kv=256")]
  (r,) = mb.bench_fp8(variants, cells=[(128, 256, True)], reps=2,
                      min_ms=0.0, tokens=512, hidden=256)
  base = MosaicConfig.default(128, True, kv_seqlen=256, fp8=True)
  wide = dc.replace(base, consumers=2, block_kv=256)
  assert seen == [None, wide, dc.replace(wide, overlap_softmax=True)]
  assert (r["dtype"], r["peer"], r["batch"], r["heads"]) == (
      "fp8", "cudnn-fp8", 2, 2)
  names = list(r["variants"])
  assert list(r["variants"].values()) == [
      "default", two, two + ",overlap_softmax=True"]
  for name in names[:2]:  # checked, then timed
    assert r[mb._err_key(name)] < mb.FWD_TOL["float8_e4m3fn"]
    assert r[name] > 0
  assert r["failed"][names[2]].startswith("wrong: rel err vs f32")
  assert names[2] not in r
  reasons = dict(r["skipped"])
  assert list(reasons) == [two + ",num_stages=3", "block_kv=64",
                           "consumers=4", "block_kv=256"]
  assert "247296 bytes of shared memory" in reasons[two + ",num_stages=3"]
  assert "multiple of 128" in reasons["block_kv=64"]
  assert "must be 2 or 3" in reasons["consumers=4"]
  assert "block_kv <= 192" in reasons["block_kv=256"]
  if "cudnn-fp8" in r:  # a Hopper GPU: paired ratios to cuDNN fp8
    assert set(r["paired"]) == set(names[:2])
  else:
    assert "cudnn-fp8" in r["failed"] and r["paired"] == {}
  table = mb.table([r])
  assert "| d128 S256 C fp8 | 2x2 |" in table
  assert "| d128 S256 C fp8 | block_kv=64 | - |" in table
  assert "skipped: bk256s3hM needs 247296 bytes" in table
  assert "wrong: rel err vs f32" in table


def test_score_features_against_the_same_cell(tmp_path):
  """``--features``: each convention cell again with ALiBi, dropout and a
  [1, N, T, S] bias, checked against the reference (dbias too), peers
  without the argument reported as not run, timed together with the cell,
  and ours with each feature against ours without it (paired) in the
  report's "Score features" table."""
  out = tmp_path / "bench"
  rc = run.main(["--smoke", "--impls", "ours-triton", "xla", "--workloads",
                 "convention", "--seqlens", "128", "--causal", "no",
                 "--features", "alibi", "dropout", "bias", "--reps", "2",
                 "--no-plots", "--time-budget", "1e9", "--out", str(out)])
  assert rc == 0
  data = json.loads((out / "results.json").read_text())
  by = {(r["label"], r["impl"]): r for r in data["results"]}
  plain = "convention bf16 d32 S128 N B2"
  for suffix in (" +alibi", " +dropout0.1", " +bias"):
    ours = by[(plain + suffix, "ours-triton")]
    assert ours["status_fwd"] == "ok", ours["status_fwd"]
    assert str(ours["status_bwd"]).startswith("ok"), ours["status_bwd"]
    assert ours["plain_label"] == plain
    # timed with the cell itself: per-rep ratios without / with the feature
    assert set(ours["paired_plain"]) >= {"fwd", "fwdbwd"}
    assert ours["err_fwd"] < run.FWD_TOL["bfloat16"]
  assert "dbias" in by[(plain + " +bias", "ours-triton")]["err_bwd_parts"]
  assert by[(plain + " +bias", "xla")]["status_fwd"] == "ok"  # takes a bias
  for suffix, name in ((" +alibi", "alibi"), (" +dropout0.1", "dropout")):
    assert by[(plain + suffix, "xla")]["status_fwd"] == (
        f"did not run: NotImplementedError: no {name} argument")
  report = (out / "RESULTS.md").read_text()
  section = report[report.index("## Score features"):]
  for suffix in (" +alibi", " +dropout0.1", " +bias"):
    assert f"| {plain}{suffix} | ours-triton | " in section


def test_bwd_bench_pairs_each_ours_row_with_ours_rep_by_rep():
  # per rep: ours 2 ms fwd, 6 ms fwd+bwd; the variant's forward 10% faster
  # every rep but its fwd+bwd equal -- rep by rep, whatever the drift
  drift = [1.0, 1.3, 0.8, 1.1]
  samples = {
      "ours": [2.0 * d for d in drift], "ours fb": [6.0 * d for d in drift],
      "ours[x=1]": [2.0 / 1.1 * d for d in drift],
      "ours[x=1] fb": [6.0 * d for d in drift],
      "cudnn": [1.0] * 4, "cudnn fb": [3.0] * 4}
  paired = bwd_bench.paired_vs_ours(samples)
  assert set(paired) == {"ours[x=1]"}
  np.testing.assert_allclose(paired["ours[x=1]"]["fwd"], [1.1] * 3)
  np.testing.assert_allclose(paired["ours[x=1]"]["fwdbwd"], [1.0] * 3)
  # the backward (fwd+bwd minus forward within the rep) reads slower
  bwd = 4.0 / (6.0 - 2.0 / 1.1)
  np.testing.assert_allclose(paired["ours[x=1]"]["bwd"], [bwd] * 3)
  assert bwd_bench.paired_vs_ours({"cudnn": [1.0], "cudnn fb": [2.0]}) == {}
  # under --alibi the variants take ALiBi: their base is ours alibi, whose
  # own base is ours
  samples["ours alibi"] = [2.2 * d for d in drift]
  samples["ours alibi fb"] = [6.6 * d for d in drift]
  paired = bwd_bench.paired_vs_ours(samples, "ours alibi")
  np.testing.assert_allclose(paired["ours alibi"]["fwdbwd"], [6 / 6.6] * 3)
  np.testing.assert_allclose(paired["ours[x=1]"]["fwd"], [1.21] * 3)
  np.testing.assert_allclose(paired["ours[x=1]"]["fwdbwd"], [1.1] * 3)
  del samples["ours alibi"], samples["ours alibi fb"]
  assert "ours[x=1]" not in bwd_bench.paired_vs_ours(samples, "ours alibi")


def test_kernel_times_reads_each_rows_trace():
  """tools.kernel_times on the CPU: each row traced in each round, its trace
  file found and read (XLA's host ops here, a GPU's stream kernels on a GPU;
  which host thread runs an op varies, so no sums are asserted), wall times
  kept, and the table printed."""
  from tools import kernel_times
  x = jnp.ones((256, 256), jnp.float32)
  one = jax.jit(lambda x: jnp.sin(x) @ x)
  two = jax.jit(lambda x: jnp.sin(jnp.sin(x) @ x) @ x)
  rows = {"one": (one, (x,)), "two": (two, (x,))}
  for f, a in rows.values():
    f(*a).block_until_ready()
  traced, wall = kernel_times.trace_rows(rows, rounds=2, calls=3)
  assert all(len(traced[n]) == 2 and len(wall[n]) == 2 for n in rows)
  assert all(isinstance(r, dict) for n in rows for r in traced[n])
  assert all(w > 0 for n in rows for w in wall[n])
  text = kernel_times.table(traced, wall)
  assert "kernels total" in text and "\n  two " in text


def test_kernel_times_table_sums_spans_per_call():
  """per_call / table on known spans: launches and microseconds per call
  per kernel (names shortened), totals, and each row against the first."""
  from tools import kernel_times
  assert kernel_times.short_name(
      "void flash_fwd<Traits<64>, true>(Params)") == "flash_fwd"
  a = [("void fwd<1>(P)", 100.0), ("fusion", 5.0)] * 2  # two calls
  b = [("void fwd<2>(P)", 80.0), ("fusion", 5.0), ("fusion", 5.0)] * 2
  assert kernel_times.per_call(a, 2) == {"fwd": (1.0, 100.0),
                                         "fusion": (1.0, 5.0)}
  traced = {"a": [kernel_times.per_call(a, 2)] * 3,
            "b": [kernel_times.per_call(b, 2)] * 3,
            "empty": [{}] * 3}
  wall = {n: [200.0] * 3 for n in traced}
  text = kernel_times.table(traced, wall)
  assert "x2" in text and "10.0 us" in text  # b's fusion: 2 a call, 10 us
  assert "105.0 us" in text and "90.0 us" in text  # the totals
  line = [l for l in text.splitlines() if l.startswith("  b ")][0]
  assert line.split()[1] == f"{105 / 90:.3f}"
  assert "nan" in [l for l in text.splitlines() if l.startswith("  empty")][0]
