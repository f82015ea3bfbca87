"""Named attention workloads, shared by the benchmarks and the tests.

One description, ``Workload``: shapes, dtype and every mask option of a
``flash_attention`` call.  The benchmarks build their cells with the
functions below and their arrays with ``make_inputs``; the tests
(``tests/cases.py``: small interpret-mode sizes, float32 by default) build
theirs with ``Workload.inputs``, which also turns the mask options into
keyword arguments.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads, H head dim.  Layout [B, T, N, H] everywhere.

The FlashAttention papers' convention: B * T = 16384 tokens, hidden
N * H = 2048 (so N = 2048 / H), T = S from 512 to 16384, H in {64, 128, 256},
causal and not, bf16 and fp16.  FLOPs of the forward are 4 * B * N * T * S * H
(halved when causal); the backward does 2.5 times the forward's FLOPs.

Besides those, a few shapes from real models:

* ``gqa``: Llama-3-8B-like attention, 32 query heads over 8 kv heads, H=128,
  causal, T=4096.
* ``packed``: documents of random length packed into each row, told apart by
  segment ids, causal (LM pre-training with packing), 16 heads, H=128.
* ``padded``: padded batch with per-row query/kv lengths, non-causal
  (encoder-style), 16 heads, H=128.

For the masked shapes (``packed``, ``padded``) the FLOPs count only the
(query, key) pairs that are visible, computed exactly from the generated
segment ids / lengths, so TFLOP/s there is useful work per second, not a
dense-equivalent.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

Kind = Literal["dense", "packed", "padded"]

TOKENS = 16384
HIDDEN = 2048
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bfloat16", "float16")
# Labels; "fp8" cells (float8_e4m3fn q, k, v, unit descales) are forward only.
_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
  """One attention workload: shapes, dtype and masking (hashable, no
  arrays).  A benchmark cell, or a test case (``tests/cases.Case``)."""

  name: str  # "convention", "gqa", "packed", "padded", "smoke", a test's
  batch: int
  seqlen: int  # T (and S unless kv_seqlen is given)
  heads: int  # N
  kv_heads: int  # K
  head_dim: int  # H
  causal: bool
  dtype: str  # "bfloat16" | "float16" (tests also "float32")
  kind: Kind = "dense"  # the benchmarks' generated masking (make_inputs)
  seed: int = 0
  # -- options of one call (``inputs``); the benchmark cells leave them
  kv_seqlen: int | None = None  # S, when it differs from T
  bottom_right: bool = False  # causal_alignment="bottom_right"
  window: tuple[int, int] | None = None  # local_window_size
  q_lengths: tuple[int, ...] | None = None  # query_seq_lengths
  kv_lengths: tuple[int, ...] | None = None  # key_value_seq_lengths
  segments: bool = False  # packed documents (test_segment_ids)
  soft_cap: float | None = None  # logits_soft_cap
  # "full" [B,N,T,S], "keys" [B,1,1,S], "heads" [1,N,T,S]; "full_empty_row":
  # "full" with query row 3 of every head masked out entirely.
  dense_mask: str | None = None
  alibi: bool = False  # ALiBi with Press et al.'s slopes 2^(-8 i / N)
  dropout: float = 0.0  # dropout_rate (dropout_rng: a key of the seed)
  # a [1, N, T, S] additive bias, normal x 0.5, in dtype: the benchmark
  # cells' (``make_inputs``); tests pass a bias as an argument of their own
  bias: bool = False
  deterministic: bool = True  # flash_attention's deterministic (backward)
  config: Any = None  # backend tuning (TritonConfig / MosaicConfig / ...)

  def __str__(self):  # (pytest ids)
    return self.name

  @property
  def kv_len(self) -> int:
    """S."""
    return self.seqlen if self.kv_seqlen is None else self.kv_seqlen

  def inputs(self, seed: int = 0):
    """(q, k, v, keyword options) of one ``flash_attention`` call: random
    normal [B, T, N, H] / [B, S, K, H] arrays of ``dtype``, the mask
    options as keyword arguments (dense masks Bernoulli(0.75))."""
    keys = jax.random.split(jax.random.key(seed), 5)
    dt = jnp.dtype(self.dtype)
    b, t, s, n = self.batch, self.seqlen, self.kv_len, self.heads
    normal = lambda key, shape: jax.random.normal(key, shape,
                                                  jnp.float32).astype(dt)
    q = normal(keys[0], (b, t, n, self.head_dim))
    k = normal(keys[1], (b, s, self.kv_heads, self.head_dim))
    v = normal(keys[2], (b, s, self.kv_heads, self.head_dim))
    kw = dict(is_causal=self.causal,
              causal_alignment="bottom_right" if self.bottom_right
              else "top_left")
    if self.window is not None:
      kw["local_window_size"] = self.window
    if self.q_lengths is not None:
      kw["query_seq_lengths"] = jnp.array(self.q_lengths, jnp.int32)
    if self.kv_lengths is not None:
      kw["key_value_seq_lengths"] = jnp.array(self.kv_lengths, jnp.int32)
    if self.segments:
      kw["query_segment_ids"] = jnp.asarray(test_segment_ids(b, t, 0))
      kw["key_value_segment_ids"] = jnp.asarray(test_segment_ids(b, s, 1))
    if self.soft_cap is not None:
      kw["logits_soft_cap"] = self.soft_cap
    if self.alibi:
      kw["alibi_slopes"] = alibi_slopes(n)
    if self.dropout > 0.0:
      kw["dropout_rate"] = self.dropout
      kw["dropout_rng"] = jax.random.fold_in(keys[4], 1)
    if not self.deterministic:
      kw["deterministic"] = False
    if self.dense_mask is not None:
      full = (b, n, t, s)
      shape = {"full": full, "full_empty_row": full, "keys": (b, 1, 1, s),
               "heads": (1, n, t, s)}[self.dense_mask]
      mask = jax.random.bernoulli(keys[3], 0.75, shape)
      if self.dense_mask == "full_empty_row":
        mask = mask.at[:, :, min(3, t - 1), :].set(False)
      kw["mask"] = mask
    return q, k, v, kw

  @property
  def feature_names(self) -> tuple[str, ...]:
    """The score features (``FEATURES``' names) the cell has: those whose
    fields differ from the dataclass defaults."""
    return tuple(name for name, fields in FEATURES.items()
                 if any(getattr(self, f) != _DEFAULTS[f] for f in fields))

  @property
  def features(self) -> str:
    """The score features of a benchmark cell (``with_feature``), as its
    label's suffix: "" for none, else e.g. " +alibi", " +dropout0.1"."""
    return "".join(f" +{name}" + (f"{self.dropout:g}" if name == "dropout"
                                  else "") for name in self.feature_names)

  @property
  def label(self) -> str:
    c = "C" if self.causal else "N"
    gqa = f" N{self.heads}/K{self.kv_heads}" if self.kv_heads != self.heads else ""
    dt = _SHORT.get(self.dtype, self.dtype)
    return (f"{self.name} {dt} d{self.head_dim} S{_k(self.seqlen)} {c}"
            f" B{self.batch}{gqa}{self.features}")

  @property
  def config_key(self) -> tuple:
    """What a TFLOP/s-vs-seqlen curve holds fixed."""
    return (self.name, self.dtype, self.head_dim, self.causal, self.kind,
            self.heads, self.kv_heads, self.features)

  @property
  def config_label(self) -> str:
    dt = _SHORT.get(self.dtype, self.dtype)
    c = "causal" if self.causal else "non-causal"
    return f"{self.name} {dt} d{self.head_dim} {c}{self.features}"


def _k(n: int) -> str:
  return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def convention(*, seqlens=SEQLENS, head_dims=HEAD_DIMS, causals=(False, True),
               dtypes=DTYPES, tokens=TOKENS, hidden=HIDDEN,
               name="convention") -> list[Workload]:
  """The FlashAttention papers' sweep: B*T = tokens, N*H = hidden."""
  out = []
  for dtype in dtypes:
    for h in head_dims:
      for causal in causals:
        for t in seqlens:
          b = max(1, tokens // t)
          n = max(1, hidden // h)
          out.append(Workload(name=name, batch=b, seqlen=t, heads=n,
                              kv_heads=n, head_dim=h, causal=causal,
                              dtype=dtype))
  return out


def real_models(*, dtypes=("bfloat16",), scale: int = 1) -> list[Workload]:
  """GQA, packed documents and padded batches; ``scale`` divides the sizes
  (1 on the GPU; larger on CPU for a smoke run)."""
  out = []
  for dtype in dtypes:
    t = 4096 // scale
    out.append(Workload(name="gqa", batch=max(1, 4 // scale), seqlen=t,
                        heads=max(4, 32 // scale), kv_heads=max(1, 8 // scale),
                        head_dim=128 // min(scale, 4), causal=True, dtype=dtype))
    out.append(Workload(name="packed", batch=max(1, 4 // scale), seqlen=t,
                        heads=max(2, 16 // scale), kv_heads=max(2, 16 // scale),
                        head_dim=128 // min(scale, 4), causal=True, dtype=dtype,
                        kind="packed"))
    t = 2048 // scale
    out.append(Workload(name="padded", batch=max(2, 8 // scale), seqlen=t,
                        heads=max(2, 16 // scale), kv_heads=max(2, 16 // scale),
                        head_dim=128 // min(scale, 4), causal=False,
                        dtype=dtype, kind="padded"))
  return out


def long_context(*, seqlen: int = 131072, heads: int = 16,
                 head_dim: int = 128, causal: bool = True,
                 dtypes=("bfloat16",)) -> list[Workload]:
  """Issue 12's long-context cell: one sequence of ``seqlen`` tokens, 16
  heads, d128, causal (fwd+bwd must be O(N) in memory)."""
  return [Workload(name="long", batch=1, seqlen=seqlen, heads=heads,
                   kv_heads=heads, head_dim=head_dim, causal=causal,
                   dtype=dtype) for dtype in dtypes]


# The score features of ``python -m benchmarks.run --features`` (issue 50:
# each against the same cell without it, in the same run).
FEATURES = {"alibi": dict(alibi=True), "dropout": dict(dropout=0.1),
            "bias": dict(bias=True)}


def with_feature(w: Workload, feature: str) -> Workload:
  """Cell ``w`` with one score feature of ``FEATURES`` (its label gains the
  feature's suffix, ``Workload.features``)."""
  return dataclasses.replace(w, **FEATURES[feature])


# Workload's field defaults (``feature_names``, ``without_features``).
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Workload)}


def without_features(w: Workload) -> Workload:
  """Cell ``w`` without ALiBi, dropout or a bias: the cell a feature's cost
  is measured against."""
  return dataclasses.replace(w, **{f: _DEFAULTS[f] for fields in
                                   FEATURES.values() for f in fields})


def memory_sweep(*, seqlens=(1024, 4096, 16384, 32768, 65536, 131072),
                 head_dim=128, heads=16, dtype="bfloat16",
                 causal=False) -> list[Workload]:
  """Batch 1, fixed heads, growing T: peak memory of fwd+bwd vs seqlen."""
  return [Workload(name="memory", batch=1, seqlen=t, heads=heads,
                   kv_heads=heads, head_dim=head_dim, causal=causal,
                   dtype=dtype) for t in seqlens]


# --------------------------------------------------------------------------
# Inputs


@dataclasses.dataclass(frozen=True)
class Inputs:
  """Arrays of one workload (on the default device)."""

  q: jax.Array  # [B, T, N, H]
  k: jax.Array  # [B, S, K, H]
  v: jax.Array  # [B, S, K, H]
  do: jax.Array  # [B, T, N, H] cotangent (zero on padded query rows)
  segment_ids: jax.Array | None = None  # [B, T] int32 (packed)
  q_lengths: jax.Array | None = None  # [B] int32 (padded)
  kv_lengths: jax.Array | None = None  # [B] int32 (padded)
  visible_pairs: float = 0.0  # visible (query, key) pairs summed over B
  alibi_slopes: jax.Array | None = None  # [N] float32 (``alibi``)
  dropout_rng: jax.Array | None = None  # a PRNG key (``dropout``)
  bias: jax.Array | None = None  # [1, N, T, S] in the dtype (``bias``)


def alibi_slopes(n: int) -> jax.Array:
  """ALiBi's slopes for n heads, 2^(-8 i / n), i = 1 .. n (Press et al.)."""
  return 2.0 ** (-8.0 * jnp.arange(1, n + 1, dtype=jnp.float32) / n)


def head_bias(key, n: int, t: int, s: int, dtype) -> jax.Array:
  """A [1, N, T, S] additive bias (normal x 0.5), the ``bias`` cells'."""
  return (0.5 * jax.random.normal(key, (1, n, t, s), jnp.float32)).astype(dtype)


def packed_segment_ids(batch: int, seqlen: int, seed: int) -> np.ndarray:
  """Documents of random length (64 .. seqlen/2 tokens), packed per row."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((batch, seqlen), np.int32)
  lo, hi = min(64, seqlen), max(min(64, seqlen) + 1, seqlen // 2)
  for b in range(batch):
    pos, doc = 0, 0
    while pos < seqlen:
      n = int(rng.integers(lo, hi))
      ids[b, pos:pos + n] = doc
      pos += n
      doc += 1
  return ids


def test_segment_ids(b: int, n: int, salt: int) -> np.ndarray:
  """[b, n] packed documents for ``Workload.inputs``: sorted ids with up to
  3 random boundaries, the last 2 tokens padding (-1) when n > 4; ``salt``
  0 for the queries, 1 for the keys (their boundaries differ)."""
  rng = np.random.default_rng(1234 + salt)
  ids = np.zeros((b, n), np.int32)
  for i in range(b):
    cuts = np.sort(rng.choice(np.arange(1, max(n, 2)),
                              size=min(3, max(n - 1, 0)), replace=False))
    ids[i] = np.searchsorted(cuts, np.arange(n), side="right")
    if n > 4:
      ids[i, -2:] = -1
  return ids


def padded_lengths(batch: int, seqlen: int, seed: int) -> np.ndarray:
  """Per-row lengths drawn uniformly from [seqlen/4, seqlen]."""
  rng = np.random.default_rng(seed + 1)
  return rng.integers(max(1, seqlen // 4), seqlen + 1, size=batch).astype(np.int32)


def visible_pairs(w: Workload, segment_ids=None, q_lengths=None,
                  kv_lengths=None) -> float:
  """(query, key) pairs that attend, summed over the batch (per head).

  For dense workloads this is the convention's T*S (times 0.5 when causal),
  not the exact T*(T+1)/2, so that TFLOP/s match the published numbers.
  """
  t = s = w.seqlen
  if w.kind == "dense":
    return w.batch * t * s * (0.5 if w.causal else 1.0)
  if w.kind == "packed":
    total = 0.0
    for row in np.asarray(segment_ids):
      _, counts = np.unique(row, return_counts=True)
      if w.causal:
        total += float(np.sum(counts * (counts + 1) / 2))
      else:
        total += float(np.sum(counts.astype(np.float64) ** 2))
    return total
  if w.kind == "padded":
    ql = np.asarray(q_lengths, np.float64)
    kl = np.asarray(kv_lengths, np.float64)
    if w.causal:
      return float(np.sum([min(a, b) * (min(a, b) + 1) / 2 for a, b in zip(ql, kl)]))
    return float(np.sum(ql * kl))
  raise ValueError(f"unknown workload kind {w.kind!r}")


def flops(w: Workload, pairs: float, mode: str) -> float:
  """FLOPs by the convention: forward 4 * N * H * pairs, backward 2.5x that,
  fwd+bwd 3.5x."""
  fwd = 4.0 * w.heads * w.head_dim * pairs
  return {"fwd": fwd, "bwd": 2.5 * fwd, "fwdbwd": 3.5 * fwd}[mode]


def make_inputs(w: Workload) -> Inputs:
  """Fresh random normal q, k, v, do (never zeros), plus masks."""
  dtype = jnp.dtype(w.dtype)
  key = jax.random.key(w.seed)
  kq, kk, kv, kd = jax.random.split(key, 4)
  b, t, n, kh, h = w.batch, w.seqlen, w.heads, w.kv_heads, w.head_dim
  # fp8: drawn in float32 and rounded (unit descales)
  draw = dtype if dtype.itemsize > 1 else jnp.float32
  normal = lambda key, shape: jax.random.normal(key, shape, draw).astype(dtype)
  q = normal(kq, (b, t, n, h))
  k = normal(kk, (b, t, kh, h))
  v = normal(kv, (b, t, kh, h))
  do = normal(kd, (b, t, n, h))
  seg = ql = kl = None
  if w.kind == "packed":
    seg_np = packed_segment_ids(b, t, w.seed)
    seg = jnp.asarray(seg_np)
    pairs = visible_pairs(w, segment_ids=seg_np)
  elif w.kind == "padded":
    ql_np = padded_lengths(b, t, w.seed)
    kl_np = ql_np.copy()  # self-attention over a padded batch
    ql, kl = jnp.asarray(ql_np), jnp.asarray(kl_np)
    pairs = visible_pairs(w, q_lengths=ql_np, kv_lengths=kl_np)
    row_valid = jnp.arange(t)[None, :] < ql[:, None]  # [B, T]
    do = jnp.where(row_valid[:, :, None, None], do, jnp.zeros_like(do))
  else:
    pairs = visible_pairs(w)
  kf = jax.random.fold_in(key, 5)  # the features' arrays
  slopes = alibi_slopes(n) if w.alibi else None
  drop = jax.random.fold_in(kf, 1) if w.dropout else None
  bias = head_bias(jax.random.fold_in(kf, 2), n, t, t, dtype) if w.bias else None
  return Inputs(q=q, k=k, v=v, do=do, segment_ids=seg, q_lengths=ql,
                kv_lengths=kl, visible_pairs=pairs, alibi_slopes=slopes,
                dropout_rng=drop, bias=bias)


def dense_mask(inputs: Inputs, causal: bool) -> jax.Array | None:
  """[B, 1, T, S] boolean mask equivalent to the segment ids (and causal),
  for peers that take only a dense mask.  None for unsegmented inputs."""
  if inputs.segment_ids is None:
    return None
  seg = inputs.segment_ids
  m = seg[:, None, :, None] == seg[:, None, None, :]
  if causal:
    t = seg.shape[1]
    m = m & (jnp.arange(t)[:, None] >= jnp.arange(t)[None, :])
  return m


def bytes_of(w: Workload) -> int:
  """Bytes of q, k, v, o (one pass each): the memory floor of the forward."""
  itemsize = jnp.dtype(w.dtype).itemsize
  return itemsize * w.batch * w.seqlen * w.head_dim * (2 * w.heads + 2 * w.kv_heads)


def describe_convention() -> str:
  return (f"B*T = {TOKENS} tokens, hidden {HIDDEN} (N = {HIDDEN} / H), "
          f"T = S in {SEQLENS}, H in {HEAD_DIMS}")


__all__ = ["Workload", "Inputs", "convention", "real_models", "memory_sweep",
           "make_inputs", "flops", "visible_pairs", "dense_mask", "FEATURES",
           "with_feature", "without_features"]
