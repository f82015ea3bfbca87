"""The tests' workloads and checks.

A ``Case`` is a ``benchmarks.workloads.Workload`` (the one workload
description of the tests and the benchmarks) at sizes small enough for
Pallas interpret mode on a 2-core CPU; ``Workload.inputs`` builds its random
arrays and keyword options for ``flash_attention``.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np

import pallas_flash as pf
from jax.sharding import NamedSharding, PartitionSpec as P

from benchmarks.workloads import Workload, test_segment_ids


def Case(name: str, b: int = 2, t: int = 17, s: int = 17, n: int = 2,
         k: int = 2, h: int = 64, dtype: str = "float32", causal: bool = False,
         **options) -> Workload:
  """A test's ``Workload``: interpret-mode sizes, float32 by default, the
  letters B T S N K H; ``options`` are Workload's mask fields (window,
  q_lengths, segments, dense_mask, alibi, config, ...)."""
  return Workload(name=name, batch=b, seqlen=t, kv_seqlen=s, heads=n,
                  kv_heads=k, head_dim=h, dtype=dtype, causal=causal,
                  **options)


# Tolerances on max|x - ref| / max|ref| (outputs, gradients) and max|lse - ref|.
TOL = {"float32": dict(out=2e-5, grad=1e-4, lse=1e-5),
       "bfloat16": dict(out=2e-2, grad=4e-2, lse=2e-3),
       "float16": dict(out=4e-3, grad=1e-2, lse=2e-3)}

FORWARD = [
    Case("plain"),
    Case("t1_s1", t=1, s=1),
    Case("t1_s97_causal_br", t=1, s=97, causal=True, bottom_right=True),
    Case("t97_s130", t=97, s=130, h=40),
    Case("t130_s97_causal", t=130, s=97, causal=True, h=80),
    Case("t97_s130_causal_br", t=97, s=130, causal=True, bottom_right=True, h=96),
    Case("causal_h128", t=97, s=97, causal=True, h=128),
    Case("h256", t=33, s=33, h=256, n=1, k=1, b=1),
    Case("gqa", n=4, k=2, t=97, s=97, causal=True),
    Case("mqa", n=4, k=1, t=17, s=33, h=40),
    Case("window", t=97, s=97, window=(5, 3)),
    Case("window_causal", t=97, s=130, window=(20, 0), causal=True, bottom_right=True),
    Case("lengths", t=97, s=97, q_lengths=(50, 97), kv_lengths=(97, 30)),
    Case("lengths_causal_br", t=97, s=130, q_lengths=(40, 97), kv_lengths=(100, 7),
         causal=True, bottom_right=True),
    Case("segments", t=130, s=130, segments=True),
    Case("segments_causal_gqa", t=97, s=97, segments=True, causal=True, n=4, k=2),
    Case("soft_cap", t=97, s=97, soft_cap=5.0, causal=True),
    Case("mask_full", t=97, s=97, dense_mask="full"),
    Case("mask_keys", t=33, s=97, dense_mask="keys"),
    Case("mask_heads_causal", t=33, s=33, dense_mask="heads", causal=True, n=4, k=1),
    Case("bf16", t=97, s=130, dtype="bfloat16", causal=True),
    Case("bf16_h80_gqa", t=97, s=97, h=80, n=4, k=2, dtype="bfloat16"),
    Case("fp16", t=97, s=97, dtype="float16", window=(7, 7)),
    Case("fp16_h40_segments", t=33, s=33, h=40, dtype="float16", segments=True),
    Case("bf16_mask_full_gqa", t=97, s=130, n=4, k=2, dtype="bfloat16", dense_mask="full",
         causal=True, bottom_right=True),
]

GRADIENT = [
    Case("g_plain", t=33, s=33),
    Case("g_t97_s130_causal_br", t=97, s=130, causal=True, bottom_right=True, h=40),
    Case("g_t130_s97", t=130, s=97, h=80),
    Case("g_gqa_causal", n=4, k=2, t=97, s=97, causal=True),
    Case("g_mqa_window", n=4, k=1, t=33, s=33, window=(4, 2)),
    Case("g_lengths", t=97, s=97, q_lengths=(50, 97), kv_lengths=(97, 30), causal=True),
    Case("g_segments", t=97, s=97, segments=True, n=4, k=2),
    Case("g_soft_cap", t=33, s=33, soft_cap=3.0),
    Case("g_mask_full", t=33, s=97, dense_mask="full", n=4, k=2),
    Case("g_mask_heads_gqa", t=33, s=33, dense_mask="heads", n=4, k=2),
    Case("g_h128_bf16", t=97, s=97, h=128, causal=True, dtype="bfloat16"),
    Case("g_h96_fp16", t=33, s=33, h=96, dtype="float16"),
    Case("g_h256", t=17, s=17, h=256, n=1, k=1, b=1),
    Case("g_bf16_mask_keys", t=33, s=97, dense_mask="keys", dtype="bfloat16"),
]


ROOT = pathlib.Path(__file__).resolve().parents[1]


def repo_env() -> dict:
  """The environment of a child process of the tests: this one's, with the
  repository on PYTHONPATH."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      filter(None, [str(ROOT), env.get("PYTHONPATH")]))
  return env


def cpu_env(devices: int) -> dict:
  """``repo_env`` with JAX on the CPU with ``devices`` host devices (in
  place of any device count in XLA_FLAGS)."""
  env = repo_env()
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_force_host_platform_device_count")]
  env["XLA_FLAGS"] = " ".join(
      flags + [f"--xla_force_host_platform_device_count={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  return env


def rel_err(x, ref, least: float = 0.0):
  """max|x - ref| / max(max|ref|, least, 1e-6), in float32."""
  x, ref = np.asarray(x, np.float32), np.asarray(ref, np.float32)
  return float(np.max(np.abs(x - ref)) / max(np.max(np.abs(ref)), least,
                                              1e-6))


def upcast(*xs):
  return [x.astype(jnp.float32) for x in xs]


# The jitted sides of the current test, by what they close over: a test that
# checks the same call twice (determinism) runs one executable twice instead
# of compiling it again.  conftest.py empties it before every test.
JITTED: dict = {}


def _jitted(fn, kw, key):
  """``fn(*args, **kw)`` as one ``jax.jit`` with kw's arrays as arguments
  and its other entries (flags, floats, tuples) closed over; ``key`` names
  what else ``fn`` closes over.  Eager calls would compile every op of the
  wrapper and of the reference separately: most of a GPU-sized case's time
  on a GPU."""
  arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
  static = {n: x for n, x in kw.items() if n not in arrays}
  name = repr((key, sorted(static.items())))
  if name not in JITTED:
    JITTED[name] = jax.jit(lambda arrays, *args: fn(*args, **static, **arrays))
  run = JITTED[name]
  return lambda *args: run(arrays, *args)


def bias_of(case: Workload, pattern: str, seed: int = 11,
            scale: float = 1.0):
  """A normal x ``scale`` additive bias in the case's dtype, broadcast as
  ``pattern`` names: "heads" [1, N, T, S], "plane" [1, 1, T, S], "full"
  [B, N, T, S], "batch_plane" [B, 1, T, S], "keys" [B, 1, 1, S], "queries"
  [B, N, T, 1], "3d" [N, T, S]."""
  b, n, t, s = case.batch, case.heads, case.seqlen, case.kv_len
  shape = {"heads": (1, n, t, s), "plane": (1, 1, t, s), "keys": (b, 1, 1, s),
           "full": (b, n, t, s), "3d": (n, t, s), "queries": (b, n, t, 1),
           "batch_plane": (b, 1, t, s)}[pattern]
  return (scale * jax.random.normal(jax.random.key(seed), shape,
                                    jnp.float32)).astype(case.dtype)


def check_forward(case: Workload, impl: str, seed: int = 0):
  """``flash_attention(implementation=impl)`` against the float32 XLA path:
  shapes, dtypes, finiteness, output and LSE within ``TOL``."""
  q, k, v, kw = case.inputs(seed)
  attend = lambda impl, config: _jitted(functools.partial(
      pf.flash_attention, implementation=impl, config=config,
      return_residual=True), kw, ("forward", impl, config))
  out, lse = attend(impl, case.config)(q, k, v)
  ref, ref_lse = attend("xla", None)(*upcast(q, k, v))
  chex.assert_shape(out, q.shape)
  chex.assert_shape(lse, q.shape[:-1])
  assert out.dtype == q.dtype and lse.dtype == jnp.float32
  chex.assert_tree_all_finite((out, lse))
  tol = TOL[case.dtype]
  assert rel_err(out, ref) <= tol["out"], (case.name, rel_err(out, ref))
  np.testing.assert_allclose(lse, ref_lse, atol=tol["lse"], rtol=tol["lse"])
  return out, lse


def check_gradients(case: Workload, impl: str, seed: int = 0, extra=None,
                    bias=None, floor: float = 0.0):
  """out and (dq, dk, dv[, dbias]) of ``flash_attention(implementation=
  impl)`` against the float32 XLA path's VJP with the same random
  cotangent: dtypes, shapes, finiteness and ``TOL``.  ``extra``: more
  keyword arguments; ``bias``: an additive bias, differentiated too.
  ``floor``: each gradient's error is taken relative to at least ``floor``
  times the largest reference gradient (a row that sees one key has dS = 0
  exactly, so its dQ / dK / dbias are the rounding of delta - dP: noise
  against a reference of zeros).  Returns (out, gradients)."""
  q, k, v, kw = case.inputs(seed)
  kw = {**kw, **(extra or {})}
  args = (q, k, v) if bias is None else (q, k, v, bias)
  d_out = jax.random.normal(jax.random.key(seed + 7), q.shape,
                            jnp.float32).astype(q.dtype)

  def fwd_bwd(impl, config):
    def f(d_out, *args, **kw):
      out, vjp = jax.vjp(lambda q, k, v, bias=None: pf.flash_attention(
          q, k, v, bias=bias, implementation=impl, config=config, **kw),
          *args)
      return out, vjp(d_out)
    return _jitted(f, kw, ("fwd_bwd", impl, config))

  out, grads = fwd_bwd(impl, case.config)(d_out, *args)
  ref, ref_grads = fwd_bwd("xla", None)(d_out.astype(jnp.float32),
                                        *upcast(*args))
  tol = TOL[case.dtype]
  assert out.dtype == q.dtype and rel_err(out, ref) <= tol["out"], (
      case.name, rel_err(out, ref))
  least = floor * max(np.max(np.abs(np.asarray(r, np.float32)))
                      for r in ref_grads) if floor else 0.0
  for name, g, r, x in zip(("dq", "dk", "dv", "dbias"), grads, ref_grads,
                           args):
    assert g.dtype == x.dtype and g.shape == x.shape, name
    chex.assert_tree_all_finite(g)
    err = rel_err(g, r, least)
    assert err <= tol["grad"], (case.name, name, err)
  return out, grads


def bias_grad_calls(monkeypatch, module, case: Workload, impl: str, bias):
  """How a backend's backward (``module.backward``, spied on) is called by
  three gradients of ``flash_attention(implementation=impl)`` with
  ``bias``: w.r.t. the bias, w.r.t. q with the bias closed over, w.r.t.
  both with the bias under ``stop_gradient``, each from a clean trace cache
  (the kernel call is traced once per (params, argument types)).  Returns
  ([(params.bias_grad, number of gradients returned)] per call, the last
  gradient's dbias)."""
  calls = []
  real = module.backward

  def spy(*args):
    grads = real(*args)
    calls.append((args[-1].bias_grad, len(grads)))
    return grads

  monkeypatch.setattr(module, "backward", spy)
  q, k, v, _ = case.inputs()
  f = lambda q, bias: pf.flash_attention(
      q, k, v, bias=bias, implementation=impl).astype(jnp.float32).sum()
  stopped = lambda q, bias: f(q, jax.lax.stop_gradient(bias))
  jax.grad(f, argnums=1)(q, bias)
  jax.clear_caches()
  jax.grad(f)(q, bias)  # closed-over bias (not differentiated)
  jax.clear_caches()
  dbias = jax.grad(stopped, argnums=(0, 1))(q, bias)[1]
  return calls, dbias


# --- the default dispatch under batch / head sharding ------------------------
@dataclasses.dataclass(frozen=True)
class Sharded:
  """A ``flash_attention`` call of the default dispatch with q / k / v
  sharded over the batch ("x"), the heads ("x"), or both ("x", "y"), and
  every array argument sharded with them.  tests/test_sharding.py lowers
  it for CUDA on 4 CPU devices; tests/test_multi_gpu.py compiles and runs
  it on 2 and 4 GPUs."""
  name: str
  h: int
  spec: P = P("x")  # q's sharding
  n: int = 4
  k: int = 4
  dtype: str = "bfloat16"
  kw: tuple = ()  # flash_attention keywords, plus the flags "segments",
  # "lengths", "alibi" for those arrays
  bias: bool = False  # a [1, N, T, S] bias, differentiated
  t: int = 300  # T = S

  def __str__(self):
    return self.name

  def mesh_shape(self, devices: int) -> tuple[int, ...]:
    return (devices,) if len(set(self.spec) - {None}) == 1 else (
        2, devices // 2)

  @property
  def batch_sharded_bias(self) -> bool:
    """dbias sums a [1, N, T, S] bias's gradient over sharded batch rows:
    the one collective the backward may have (an all-reduce)."""
    return self.bias and self.spec[0] is not None

  def inputs(self, mesh, b: int = 4, concrete: bool = True):
    """(q, k, v, arrays, static): arrays a dict of the array keywords (and
    "bias"), sharded like q; static the other keywords.  ``concrete=False``
    gives ShapeDtypeStructs (for lowering)."""
    t = self.t
    spec = tuple(self.spec) + (None,) * (4 - len(self.spec))
    rng = np.random.default_rng(0)

    def put(x, *dims):
      sharding = NamedSharding(mesh, P(*dims))
      if not concrete:
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
      return jax.device_put(x, sharding)

    normal = lambda *shape: jnp.asarray(
        rng.standard_normal(shape, np.float32)).astype(self.dtype)
    q = put(normal(b, t, self.n, self.h), *spec)
    k, v = (put(normal(b, t, self.k, self.h), *spec) for _ in range(2))
    static = dict(self.kw)
    arrays = {}
    if static.pop("segments", False):
      arrays["query_segment_ids"] = put(
          jnp.asarray(test_segment_ids(b, t, 0)), *spec[:2])
    if static.pop("lengths", False):
      lengths = np.array([t, t - 37, t // 2, 1] * b, np.int32)[:b]
      arrays["query_seq_lengths"] = put(jnp.asarray(lengths), spec[0])
      arrays["key_value_seq_lengths"] = put(jnp.asarray(lengths[::-1]),
                                            spec[0])
    if static.pop("alibi", False):
      slopes = 2.0 ** -jnp.arange(1, self.n + 1, dtype=jnp.float32)
      arrays["alibi_slopes"] = put(jnp.tile(slopes, (b, 1)), spec[0], spec[2])
    if static.get("dropout_rate"):
      static["dropout_rng"] = jax.random.key(0)
    if self.bias:
      arrays["bias"] = put(normal(1, self.n, t, t), None, spec[2])
    return q, k, v, arrays, static


SHARDED = [
    Sharded("d64 causal batch", 64, kw=(("is_causal", True),)),
    Sharded("d64 nondeterministic heads fp16", 64, P(None, None, "x"),
            dtype="float16", kw=(("deterministic", False),)),
    Sharded("d64 dropout batch", 64, kw=(("dropout_rate", 0.1),)),
    Sharded("d64 bias dbias batch", 64, bias=True),
    Sharded("d64 lengths segments batch x heads gqa", 64, P("x", None, "y"),
            n=4, k=2, kw=(("is_causal", True), ("segments", True),
                          ("lengths", True))),
    # T = 4096: the d64 default's three-consumer CTAs (idle consumers past
    # T and past their diagonal, MosaicConfig.default), per shard
    Sharded("d64 causal lengths batch S4k", 64, t=4096,
            kw=(("is_causal", True), ("lengths", True))),
    Sharded("d128 causal dropout heads", 128, P(None, None, "x"),
            kw=(("is_causal", True), ("dropout_rate", 0.1))),
    Sharded("d128 alibi gqa batch", 128, n=8, k=4,
            kw=(("alibi", True), ("causal_alignment", "bottom_right"),
                ("is_causal", True))),
    Sharded("d128 softcap window bias heads fp16", 128, P(None, None, "x"),
            dtype="float16", bias=True,
            kw=(("logits_soft_cap", 30.0), ("local_window_size", (64, 0)))),
    Sharded("d256 causal batch", 256, kw=(("is_causal", True),)),
    Sharded("d256 nondeterministic heads", 256, P(None, None, "x"),
            kw=(("deterministic", False),)),
]


def sharded_fns(static):
  """(fwd, fwd_bwd) of a ``Sharded`` call: ``fwd(q, k, v, arrays) -> out``
  and ``fwd_bwd(q, k, v, arrays, d_out) -> (out, (dq, dk, dv[, dbias]))``
  (dbias when arrays holds a bias)."""
  def fwd(q, k, v, arrays):
    arrays = dict(arrays)
    return pf.flash_attention(q, k, v, arrays.pop("bias", None), **static,
                              **arrays)

  def fwd_bwd(q, k, v, arrays, d_out):
    diff = {"bias": arrays["bias"]} if "bias" in arrays else {}
    rest = {n: x for n, x in arrays.items() if n != "bias"}
    out, vjp = jax.vjp(lambda q, k, v, diff: fwd(q, k, v, {**rest, **diff}),
                       q, k, v, diff)
    dq, dk, dv, ddiff = vjp(d_out)
    return out, (dq, dk, dv, *ddiff.values())

  return fwd, fwd_bwd


def check_backward_takes_delta(backward, backend: str, dtype, rate: float):
  """A backend's ``backward`` given ``delta=`` rowsum(dO * O) (and out=None)
  returns the bits of the default call (which computes delta from out);
  dropout's (1 - rate) scaling applies to the given delta too.  Tiny: B 1,
  T 128, N 2, H 64, causal, in interpret mode off a GPU."""
  from pallas_flash import dropout, masks
  from pallas_flash.params import KernelParams, row_delta
  from pallas_flash.triton import forward as triton_forward
  b, t, n, h = 1, 128, 2, 64
  rng = np.random.default_rng(0)
  q, k, v, d_out = (jnp.asarray(rng.standard_normal((b, t, n, h)), dtype)
                    for _ in range(4))
  lens = jnp.full((b,), t, jnp.int32)
  seeds = dropout.seeds(jax.random.key(1), b, n) if rate else None
  arrays = masks.MaskArrays(lens, lens, dropout_seeds=seeds)
  params = KernelParams(spec=masks.MaskSpec(is_causal=True), scale=h ** -0.5,
                        backward=backend, dropout_rate=rate,
                        interpret=jax.default_backend() != "gpu")
  out, lse = jax.jit(triton_forward.forward, static_argnums=4)(
      q, k, v, arrays, params)
  delta = row_delta(out, d_out)
  want = jax.jit(backward, static_argnums=7)(q, k, v, arrays, out, lse,
                                             d_out, params)
  got = jax.jit(lambda q, k, v, arrays, lse, d_out, delta: backward(
      q, k, v, arrays, None, lse, d_out, params, delta=delta))(
          q, k, v, arrays, lse, d_out, delta)
  for name, g, w in zip(("dq", "dk", "dv"), got, want):
    assert bool(jnp.all(jnp.isfinite(w.astype(jnp.float32)))), name
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
