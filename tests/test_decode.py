"""Split-KV decoding and the KV-cache API against the float32 reference.

Off-GPU the kernels run in Pallas interpret mode (small sizes); on a GPU the
same tests run compiled, and the ``slow`` ones add serving-size shapes.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_flash as pf
from pallas_flash import _dispatch
from pallas_flash.decode import DecodeConfig, kernel
from pallas_flash.decode import cache as kv_cache
from cases import TOL, Case, check_forward, check_gradients, rel_err, upcast

ON_GPU = jax.default_backend() == "gpu"
# Several splits and tiles even at interpret-mode sizes.
SMALL = DecodeConfig(block_k=32, num_splits=3)
# The same with the splits (not the kv heads) on the first grid axis.
SMALL_SPLITS_FIRST = DecodeConfig(block_k=32, num_splits=3, heads_first=False)

# flash_attention(implementation="triton", config=DecodeConfig) forces the
# split-KV kernel.
DECODE = [
    Case("d_gqa_t1_bf16", b=2, t=1, s=97, n=4, k=2, causal=True,
         bottom_right=True, dtype="bfloat16", config=SMALL),
    Case("d_mqa_t3_h80_ragged_fp16", b=2, t=3, s=130, n=4, k=1, h=80,
         causal=True, bottom_right=True, kv_lengths=(130, 7), dtype="float16",
         config=SMALL),
    Case("d_window_ragged", b=2, t=4, s=97, n=2, k=2, causal=True,
         bottom_right=True, window=(20, 0), kv_lengths=(50, 97),
         config=SMALL_SPLITS_FIRST),
    # One split: the program writes the final output (no partials, no ticket).
    Case("d_soft_cap_empty_seq_one_split", b=2, t=2, s=61, n=4, k=2,
         soft_cap=5.0, kv_lengths=(0, 61), dtype="bfloat16",
         config=DecodeConfig(block_k=32, num_splits=1)),
    # 9 tokens x 4 heads = 36 rows in three 16-row tiles; head dim 40.
    Case("d_row_tiles_h40", b=1, t=9, s=70, n=4, k=1, h=40, causal=True,
         bottom_right=True, q_lengths=(8,),
         config=DecodeConfig(block_k=16, block_rows=16, num_splits=2)),
    # 9 splits merged 4 at a time (16 rows x 128 columns per split): chunks
    # of 4, 4 and 1 split, loaded together; short sequences leave trailing
    # splits empty.
    Case("d_merge_chunks", b=2, t=4, s=150, n=4, k=1, h=128,
         kv_lengths=(150, 40), config=DecodeConfig(block_k=16, num_splits=9)),
    # 64 rows x 128 columns per split: one split per load, three loads issued
    # together (kernel.MERGE_INFLIGHT), three such groups.
    Case("d_merge_groups", b=1, t=16, s=150, n=4, k=1, h=128,
         kv_lengths=(140,), config=DecodeConfig(block_k=16, num_splits=9)),
]


@pytest.mark.parametrize("case", DECODE, ids=str)
def test_decode_forward(case):
  check_forward(case, "triton")


def test_decode_gradients_use_the_triton_backward():
  # The decode forward's (out, lse) feed the Pallas-Triton backward.
  check_gradients(Case("dg_gqa", b=1, t=2, s=40, n=4, k=2, causal=True,
                       bottom_right=True, config=SMALL), "triton")


def test_dispatch_takes_decode_for_few_queries(monkeypatch):
  monkeypatch.setattr(_dispatch, "on_gpu", lambda: True)
  q = jnp.zeros((2, 1, 4, 64), jnp.bfloat16)
  k = jnp.zeros((2, 256, 2, 64), jnp.bfloat16)
  text = str(jax.make_jaxpr(lambda q, k: pf.flash_attention(q, k, k))(q, k))
  assert "pallas_flash_decode" in text
  long_q = jnp.zeros((2, 256, 4, 64), jnp.bfloat16)
  text = str(jax.make_jaxpr(lambda q, k: pf.flash_attention(q, k, k))(long_q, k))
  assert "pallas_flash_decode" not in text
  assert kernel.suits(64, 512, pf.masks.MaskSpec(), score_terms=False)
  assert not kernel.suits(1, 64, pf.masks.MaskSpec(has_segments=True),
                          score_terms=False)
  assert not kernel.suits(1, 64, pf.masks.MaskSpec(), score_terms=True)
  # A bias, ALiBi or dropout keeps the forward kernels.
  slopes = jnp.ones((4,), jnp.float32)
  text = str(jax.make_jaxpr(lambda q, k: pf.flash_attention(
      q, k, k, alibi_slopes=slopes))(q, k))
  assert "pallas_flash_decode" not in text


def test_launch_rule(monkeypatch):
  """``kernel.launch`` on a 132-SM GPU: the tuned rule (H200 sweep, see
  ``kernel.num_splits``) from static shapes, and explicit fields kept."""
  monkeypatch.setattr(kernel, "sm_count", lambda: 132)
  launch = lambda cfg=DecodeConfig(), **kw: kernel.launch(
      cfg, **{"head_dim_padded": 128, "itemsize": 2, **kw})
  got = lambda c: (c.block_k, c.num_stages, c.num_splits)
  # B = 1, K = 8: 8 programs; splits fill 2 x 132 SMs, >= 256 keys each
  assert got(launch(programs=8, s=131072)) == (64, 3, 33)
  assert got(launch(programs=8, s=4096)) == (64, 3, 16)
  assert got(launch(programs=8, s=256)) == (64, 3, 1)
  # B = 32, K = 8: 256 programs cover the SMs; splits need >= 8192 keys
  assert got(launch(programs=256, s=4096)) == (128, 2, 1)
  assert got(launch(programs=256, s=32768)) == (128, 3, 2)
  assert got(launch(programs=256, s=131072)) == (128, 3, 2)
  assert got(launch(programs=256, s=40)) == (64, 2, 1)  # block_k <= pow2(S)
  # explicit fields win; num_splits at most one per tile and MAX_SPLITS
  cfg = DecodeConfig(block_k=128, num_stages=3, num_splits=7)
  assert got(launch(cfg, programs=8, s=64)) == (64, 3, 1)
  assert got(launch(DecodeConfig(num_splits=999, block_k=16), programs=1,
                    s=4096))[2] == kernel.MAX_SPLITS
  # f32 d256: block_k halves until the K/V stages fit SMEM_BUDGET
  c = launch(programs=8, s=4096, head_dim_padded=256, itemsize=4)
  assert 4 * c.block_k * 256 * 4 <= kernel.SMEM_BUDGET and c.block_k == 32


def _paged_inputs(b, t, n, kh, h, page_size, max_pages, num_pages, dtype, seed=0):
  keys = jax.random.split(jax.random.key(seed), 6)
  q = jax.random.normal(keys[0], (b, t, n, h), jnp.float32).astype(dtype)
  k_pages = jax.random.normal(keys[1], (num_pages, page_size, kh, h)).astype(dtype)
  v_pages = jax.random.normal(keys[2], (num_pages, page_size, kh, h)).astype(dtype)
  table = jax.random.permutation(keys[3], num_pages)[:b * max_pages]
  k_new = jax.random.normal(keys[4], (b, t, kh, h)).astype(dtype)
  v_new = jax.random.normal(keys[5], (b, t, kh, h)).astype(dtype)
  return q, k_new, v_new, k_pages, v_pages, table.reshape(b, max_pages).astype(jnp.int32)


@pytest.mark.parametrize("page_size,cfg,dtype,kw", [
    # 2 pages per 32-key tile; GQA; bottom-right causal over ragged lengths
    (16, SMALL_SPLITS_FIRST, "bfloat16", dict(is_causal=True)),
    # a 16-key tile inside 48-key pages; MQA; window and soft-cap
    (48, DecodeConfig(block_k=16, num_splits=2), "float32",
     dict(is_causal=True, local_window_size=(30, 0), logits_soft_cap=4.0)),
], ids=["pages16_causal", "pages48_window_cap"])
def test_paged_attention(page_size, cfg, dtype, kw):
  kh = 2 if page_size == 16 else 1
  q, _, _, k_pages, v_pages, table = _paged_inputs(
      2, 3, 4, kh, 64, page_size, 6, 13, jnp.dtype(dtype))
  lengths = jnp.array([77, 5], jnp.int32)
  # A padding entry past a sequence's length is never read.
  table = table.at[1, 3:].set(-1)
  out, vjp = jax.vjp(lambda q: kv_cache.paged_attention(
      q, k_pages, v_pages, table, lengths, implementation="pallas", config=cfg,
      **kw), q)
  with pytest.raises(NotImplementedError, match="forward only"):
    vjp(out)  # no silent wrong gradient
  k, v = (kv_cache._gather_pages(x, table) for x in (k_pages, v_pages))
  ref = pf.flash_attention(*upcast(q, k, v), implementation="xla",
                           key_value_seq_lengths=lengths,
                           causal_alignment="bottom_right", **kw)
  chex.assert_tree_all_finite(out)
  assert out.dtype == q.dtype
  assert rel_err(out, ref) <= TOL[dtype]["out"], rel_err(out, ref)


def test_attend_with_cache_appends_and_attends():
  b, t, n, kh, h, s = 2, 2, 4, 2, 64, 96
  keys = jax.random.split(jax.random.key(1), 5)
  q = jax.random.normal(keys[0], (b, t, n, h))
  k_new, v_new = (jax.random.normal(x, (b, t, kh, h)) for x in keys[1:3])
  k_cache, v_cache = (jax.random.normal(x, (b, s, kh, h)) for x in keys[3:5])
  lengths = jnp.array([40, 0], jnp.int32)
  step = jax.jit(lambda *a: kv_cache.attend_with_cache(
      *a, implementation="pallas", config=SMALL), donate_argnums=(3, 4))
  out, k2, v2 = step(q, k_new, v_new, jnp.copy(k_cache), jnp.copy(v_cache),
                     lengths)
  for new, old, upd in ((k_new, k_cache, k2), (v_new, v_cache, v2)):
    want = old.at[0, 40:42].set(new[0]).at[1, 0:2].set(new[1])
    np.testing.assert_array_equal(upd, want)
  ref = pf.flash_attention(q, k2, v2, implementation="xla", is_causal=True,
                           causal_alignment="bottom_right",
                           key_value_seq_lengths=lengths + t)
  assert rel_err(out, ref) <= TOL["float32"]["out"]


def test_attend_with_paged_cache_matches_contiguous():
  b, t, n, kh, h, page_size, max_pages = 2, 3, 4, 2, 64, 16, 4
  q, k_new, v_new, k_pages, v_pages, table = _paged_inputs(
      b, t, n, kh, h, page_size, max_pages, 9, jnp.float32, seed=2)
  lengths = jnp.array([30, 61], jnp.int32)  # sequence 1 fills its last page
  out, k2, v2 = kv_cache.attend_with_paged_cache(
      q, k_new, v_new, k_pages, v_pages, table, lengths,
      implementation="pallas", config=SMALL)
  # The same cache laid out contiguously, through the contiguous API.
  k_c, v_c = (kv_cache._gather_pages(x, table) for x in (k_pages, v_pages))
  ref, k_c2, _ = kv_cache.attend_with_cache(q, k_new, v_new, k_c, v_c, lengths,
                                            implementation="xla")
  np.testing.assert_array_equal(kv_cache._gather_pages(k2, table), k_c2)
  untouched = np.setdiff1d(np.arange(9), np.asarray(table))
  np.testing.assert_array_equal(k2[untouched], k_pages[untouched])
  assert rel_err(out, ref) <= TOL["float32"]["out"]


def test_bad_inputs():
  q = jnp.zeros((2, 1, 4, 16))
  new = jnp.zeros((2, 1, 2, 16))
  cache = jnp.zeros((2, 8, 2, 16))
  pages = jnp.zeros((5, 4, 2, 16))
  table = jnp.zeros((2, 2), jnp.int32)
  attend = kv_cache.attend_with_cache
  with pytest.raises(ValueError, match=r"lengths=\[8, 0\] plus 1 new tokens"):
    attend(q, new, new, cache, cache, jnp.array([8, 0]))
  with pytest.raises(ValueError, match="lengths must be an int array"):
    attend(q, new, new, cache, cache, jnp.array([1.0, 2.0]))
  with pytest.raises(ValueError, match="k_new"):
    attend(q, new[:, :, :1], new, cache, cache, jnp.array([1, 2]))
  with pytest.raises(ValueError, match="one dtype"):
    attend(q, new.astype(jnp.bfloat16), new.astype(jnp.bfloat16), cache, cache,
           jnp.array([1, 2]))
  with pytest.raises(ValueError, match="implementation"):
    attend(q, new, new, cache, cache, jnp.array([1, 2]), implementation="cuda")
  with pytest.raises(ValueError, match="local_window_size"):
    attend(q, new, new, cache, cache, jnp.array([1, 2]), local_window_size=-1)
  paged = kv_cache.attend_with_paged_cache
  with pytest.raises(ValueError, match="max_pages \\* page_size=8"):
    paged(q, new, new, pages, pages, table, jnp.array([7, 8]))
  with pytest.raises(ValueError, match=r"block_table\[1, 1\]=5"):
    paged(q, new, new, pages, pages, table.at[1, 1].set(5), jnp.array([1, 4]))
  with pytest.raises(ValueError, match="block_table must be"):
    paged(q, new, new, pages, pages, table[None], jnp.array([1, 2]))
  with pytest.raises(ValueError, match="logits_soft_cap"):
    kv_cache.paged_attention(q, pages, pages, table, jnp.array([1, 2]),
                             logits_soft_cap=-1.0)
  with pytest.raises(ValueError, match="block_k=24"):
    DecodeConfig(block_k=24)
  with pytest.raises(ValueError, match="num_splits=0"):
    DecodeConfig(num_splits=0)
  with pytest.raises(ValueError, match="heads_first=1"):
    DecodeConfig(heads_first=1)


def test_lowers_for_cuda(monkeypatch):
  """The Pallas -> Triton lowering, which interpret mode skips, runs on any
  machine: lower for CUDA (sm_90) without a GPU, through the public path
  (dispatch, custom_vjp, the Triton backward under grad), one split (no
  combine), and the paged gather at a 4 GiB+ pool (64-bit offsets)."""
  import types
  from jax._src.pallas.triton import pallas_call_registration as registration
  monkeypatch.setattr(registration, "gpu_info_lib", types.SimpleNamespace(
      get_gpu_info=lambda: types.SimpleNamespace(compute_capability="9.0")))
  monkeypatch.setattr(_dispatch, "on_gpu", lambda: True)
  monkeypatch.setattr(_dispatch, "is_hopper", lambda: False)
  monkeypatch.setattr(kernel, "sm_count", lambda: 132)
  lower = lambda f, *a: jax.jit(f).trace(*a).lower(
      lowering_platforms=("cuda",)).as_text()
  q = jax.ShapeDtypeStruct((2, 3, 32, 80), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((2, 4096, 8, 80), jnp.bfloat16)
  loss = lambda q, k, v: pf.flash_attention(
      q, k, v, is_causal=True, causal_alignment="bottom_right").astype(
          jnp.float32).sum()
  text = lower(jax.grad(loss, (0, 1, 2)), q, kv, kv)
  for name in ("pallas_flash_decode", "pallas_flash_bwd_dkdv",
               "pallas_flash_bwd_dq"):
    assert name in text, name
  assert "combine" not in text  # the splits merge inside the one launch
  q1 = jax.ShapeDtypeStruct((32, 1, 32, 128), jnp.bfloat16)
  kv1 = jax.ShapeDtypeStruct((32, 4096, 8, 128), jnp.bfloat16)
  text = lower(lambda q, k: pf.flash_attention(
      q, k, k, implementation="triton", config=DecodeConfig(num_splits=1)),
      q1, kv1)
  assert "pallas_flash_decode" in text
  text = lower(lambda q, k: pf.flash_attention(
      q, k, k, implementation="triton", config=DecodeConfig(heads_first=False)),
      q1, kv1)
  assert "pallas_flash_decode" in text
  # f32 d256: block_k shrinks to fit kernel.SMEM_BUDGET
  q2 = jax.ShapeDtypeStruct((1, 1, 4, 256), jnp.float32)
  kv2 = jax.ShapeDtypeStruct((1, 4096, 1, 256), jnp.float32)
  assert "pallas_flash_decode" in lower(pf.flash_attention, q2, kv2, kv2)
  pages = jax.ShapeDtypeStruct((2100, 1024, 8, 128), jnp.bfloat16)  # 4.1 GiB
  table = jax.ShapeDtypeStruct((32, 64), jnp.int32)
  lens = jax.ShapeDtypeStruct((32,), jnp.int32)
  text = lower(lambda q, p, t, n: kv_cache.paged_attention(
      q, p, p, t, n, implementation="pallas"), q1, pages, table, lens)
  assert "pallas_flash_paged_decode" in text


@pytest.mark.slow
@pytest.mark.skipif(not ON_GPU, reason="serving sizes need a GPU")
@pytest.mark.parametrize("b,t,s", [(1, 1, 32768), (4, 16, 8192)])
def test_decode_gpu_sizes(b, t, s):
  kv = tuple(int(x) for x in np.linspace(s // 3, s, b))
  check_forward(Case(f"gpu_b{b}_t{t}_s{s}", b=b, t=t, s=s, n=32, k=8, h=128,
                     causal=True, bottom_right=True, kv_lengths=kv,
                     dtype="bfloat16", config=DecodeConfig()), "triton")


@pytest.mark.slow
@pytest.mark.skipif(not ON_GPU, reason="serving sizes need a GPU")
@pytest.mark.parametrize("b,t,s", [(1, 1, 32768), (2, 1, 4096)])
def test_decode_merge_is_deterministic(b, t, s):
  # The last program to finish merges the splits (33 and 16 of them here,
  # finishing in any order); it reads them in split order, so repeated calls
  # agree bit for bit.
  q, k, v = (jax.random.normal(key, (b, x, hh, 128), jnp.bfloat16)
             for key, x, hh in zip(jax.random.split(jax.random.key(3), 3),
                                   (t, s, s), (32, 8, 8)))
  f = jax.jit(lambda q, k, v: pf.flash_attention(
      q, k, v, implementation="triton", config=DecodeConfig()))
  first = np.asarray(f(q, k, v))
  for _ in range(20):
    np.testing.assert_array_equal(np.asarray(f(q, k, v)), first)
  ref = pf.flash_attention(*upcast(q, k, v), implementation="xla")
  assert rel_err(first, ref) <= TOL["bfloat16"]["out"]


@pytest.mark.slow
@pytest.mark.skipif(not ON_GPU, reason="serving sizes need a GPU")
def test_paged_gpu_size():
  q, _, _, k_pages, v_pages, table = _paged_inputs(
      4, 1, 32, 8, 128, 64, 128, 600, jnp.bfloat16)
  lengths = jnp.array([8192, 100, 5000, 1], jnp.int32)
  out = kv_cache.paged_attention(q, k_pages, v_pages, table, lengths)
  k, v = (kv_cache._gather_pages(x, table) for x in (k_pages, v_pages))
  ref = pf.flash_attention(*upcast(q, k, v), implementation="xla",
                           is_causal=True, causal_alignment="bottom_right",
                           key_value_seq_lengths=lengths)
  assert rel_err(out, ref) <= TOL["bfloat16"]["out"]
