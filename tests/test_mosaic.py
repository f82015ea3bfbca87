"""Mosaic GPU (Hopper) kernels against the f32 reference: the forward's out
and LSE, the backward's dq, dk, dv (random cotangent).

One parameterised suite, run natively on a Hopper GPU and in Mosaic GPU
interpret mode on CPU (tiny sizes: the simulator runs every warpgroup, TMA and
barrier in Python).  Larger cases are ``@pytest.mark.slow`` (GPU: ``-m slow``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tools import mosaic_modules
from cases import (Case, bias_grad_calls, check_backward_takes_delta,
                   check_forward, check_gradients)
from pallas_flash import masks
from pallas_flash.mosaic import backward as mosaic_backward
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
from pallas_flash.params import KernelParams

ON_GPU = jax.default_backend() == "gpu"
ON_HOPPER = ON_GPU and str(getattr(jax.devices()[0], "compute_capability",
                                   "")).startswith("9")
INTERPRET = not ON_GPU
if ON_GPU and not ON_HOPPER:  # pragma: no cover
  pytest.skip("the mosaic forward needs Hopper (sm_90); this GPU is not one",
              allow_module_level=True)

# Mosaic workloads: cases.Case in bf16, one batch row and head unless said.
M = functools.partial(Case, b=1, t=128, s=128, n=1, k=1, dtype="bfloat16")

# Tiny cases: a few seconds each in interpret mode on 2 CPU cores.
CASES = [
    M("dense"),
    M("row max / sum as a tree to 16 columns, causal bk256", t=256, s=384,
      causal=True, config=MosaicConfig(block_kv=256, row_tree=16)),
    M("row tree, alibi and softmax overlap", t=200, s=300, alibi=True,
      config=MosaicConfig(overlap_softmax=True, row_tree=8)),
    M("row max / sum with 16 accumulators (GPU; interpret: jnp's), causal",
      t=256, s=200, causal=True, config=MosaicConfig(reduce_ilp=16)),
    M("causal", t=256, s=256, causal=True),
    M("alibi causal bottom_right ragged", t=100, s=230, n=2, k=1,
      causal=True, bottom_right=True, alibi=True),
    M("alibi persistent, softmax overlap, lengths", b=2, t=256, s=256,
      alibi=True, q_lengths=(256, 100), kv_lengths=(200, 256),
      config=MosaicConfig(persistent=True, overlap_softmax=True)),
    # Non-causal ALiBi: key tiles left of, across and right of the diagonal
    # in their three loops (mosaic.score_tiles.alibi_split).
    M("alibi non-causal, tiles on both sides", t=400, s=600, alibi=True),
    M("d128 causal", h=128, causal=True),
    M("d256", h=256, t=128, s=192),
    M("ragged T97 S130", t=97, s=130),
    M("causal T200 S130 top_left", t=200, s=130, causal=True),
    M("causal T100 S333 bottom_right", t=100, s=333, causal=True,
      bottom_right=True),
    M("lengths (incl. empty row)", b=2, t=160, s=200, causal=True,
      bottom_right=True, q_lengths=(150, 0), kv_lengths=(200, 77)),
    M("gqa 4/2", n=4, k=2, causal=True),
    M("window (40, 10)", t=256, s=256, causal=True, window=(40, 10)),
    M("segments", t=256, s=256, causal=True, segments=True),
    M("soft-cap", soft_cap=3.0),
    M("fp16", dtype="float16", causal=True),
    M("head dim 40 (padded)", h=40),
    M("bk64 3 stages", t=128, s=320, config=MosaicConfig(
        block_q=64, block_kv=64, num_stages=3)),
    M("causal bk256 ragged", t=300, s=520, causal=True,
      config=MosaicConfig(block_kv=256)),
    M("d128 bk192 ragged", h=128, t=200, s=500,
      config=MosaicConfig(block_kv=192)),
    M("dense mask [B,N,T,S]", b=2, n=2, k=2, t=130, s=200, causal=True,
      dense_mask="full_empty_row"),
    M("dense mask [B,1,1,S]", t=128, s=256, dense_mask="keys"),
    M("softmax overlap, causal, ragged", t=200, s=333, causal=True,
      config=MosaicConfig(overlap_softmax=True)),
    M("softmax overlap, segments, bk64 ascending", t=256, s=256,
      segments=True, config=MosaicConfig(
          block_kv=64, masked_first=False, overlap_softmax=True)),
    M("softmax overlap, lengths with empty rows", b=2, t=256, s=256,
      q_lengths=(256, 0), kv_lengths=(256, 40),
      config=MosaicConfig(overlap_softmax=True)),
    M("ascending order", t=256, s=300, causal=True, window=(100, 20),
      config=MosaicConfig(block_q=64, block_kv=64, num_stages=2,
                          masked_first=False)),
    # Persistent: interpret mode launches 3 CTAs, so CTAs take 1-3 items and
    # the K/V ring, turns and Q prefetch run across items.
    M("persistent, lengths with empty rows", b=2, t=300, s=256, causal=True,
      q_lengths=(300, 0), kv_lengths=(256, 90),
      config=MosaicConfig(persistent=True)),
    M("persistent, softmax overlap, gqa, d128", b=2, n=2, k=1, h=128,
      t=256, s=200, config=MosaicConfig(persistent=True,
                                        overlap_softmax=True)),
    M("persistent, segments, overlap, 3 stages", b=2, t=256, s=256,
      segments=True, config=MosaicConfig(block_kv=64, num_stages=3,
                                         persistent=True,
                                         overlap_softmax=True)),
    M("persistent, d256 (4 O pieces), heads inner", b=2, h=256, t=256,
      s=128, causal=True, config=MosaicConfig(
          block_kv=64, persistent=True, heads_inner=True)),
    M("persistent, causal, two groups of two heads (head_group_mib)", b=2,
      n=4, k=2, t=200, s=130, causal=True, config=MosaicConfig(
          persistent=True, heads_inner=True, head_group_mib=0.13)),
    # Three consumers: 192-row CTAs, the turn goes round three warpgroups.
    M("3 consumers, lengths with empty rows", b=2, t=300, s=333, causal=True,
      bottom_right=True, q_lengths=(300, 0), kv_lengths=(333, 70),
      config=MosaicConfig(consumers=3)),
    M("3 consumers, softmax overlap, gqa", b=1, n=2, k=1, t=200, s=256,
      config=MosaicConfig(consumers=3, overlap_softmax=True)),
    M("3 consumers, segments", t=256, s=256, segments=True,
      config=MosaicConfig(consumers=3)),
    M("3 consumers d128 ragged", t=130, s=200, h=128, kv_lengths=(150,),
      config=MosaicConfig(consumers=3)),
    # A CTA whose consumers 1 and 2 hold only rows past T (T = 192 + 8):
    # they take their turns and release their slots without computing.
    M("3 consumers, two idle in the last tile, causal", t=200, s=256,
      causal=True, bottom_right=True, config=MosaicConfig(consumers=3)),
    # The d64 causal default from T = S = 4096 on (three consumers, heads
    # inner, persistent; 2026-11-30), on fewer rows: idle consumers in the
    # last tile and past each one's diagonal, an empty row block.
    M("d64 S4k causal default 3 consumers ragged", b=2, t=200, s=264, n=2,
      k=1, causal=True, q_lengths=(200, 70), kv_lengths=(264, 100),
      config=MosaicConfig.default(64, True, kv_seqlen=4096, q_seqlen=4096)),
    M("dropout d64 S4k default 3 consumers ragged", b=2, t=200, s=264,
      n=2, k=1, causal=True, q_lengths=(200, 70), kv_lengths=(264, 100),
      dropout=0.2, config=MosaicConfig.default(
          64, True, kv_seqlen=4096, q_seqlen=4096, dropout=True)),
    # The d64 ALiBi defaults from T = S = 4096 on (three consumers,
    # persistent causal; the key vector by FFMAs), on fewer rows: idle
    # consumers, ALiBi's split loops left of, across and right of the
    # diagonal non-causal.
    M("d64 S4k alibi causal default 3 persistent consumers ragged", b=2,
      t=400, s=264, n=2, k=1, causal=True, alibi=True, q_lengths=(400, 70),
      kv_lengths=(264, 100), config=MosaicConfig.default(
          64, True, kv_seqlen=4096, q_seqlen=4096, alibi=True)),
    M("d64 S4k alibi non-causal default 3 consumers bottom_right", t=200,
      s=600, alibi=True, bottom_right=True, config=MosaicConfig.default(
          64, False, kv_seqlen=4096, q_seqlen=4096, alibi=True)),
    # Three consumers in a persistent kernel: at each item's end the last
    # passes the turn once more and consumer 0 takes it (interpret mode's 3
    # CTAs take several items each, some of them empty).
    M("3 persistent consumers, lengths with empty rows", b=2, t=400, s=256,
      causal=True, q_lengths=(400, 0), kv_lengths=(256, 90),
      config=MosaicConfig(consumers=3, persistent=True)),
    M("3 persistent consumers, softmax overlap, gqa d128", b=2, n=2, k=1,
      h=128, t=200, s=300, config=MosaicConfig(
          consumers=3, persistent=True, overlap_softmax=True)),
    M("3 persistent consumers, idle ones, causal dropout d64", b=2, t=400,
      s=400, causal=True, q_lengths=(400, 130), kv_lengths=(400, 250),
      dropout=0.2, config=MosaicConfig(consumers=3, persistent=True,
                                       block_kv=128)),
    # Dropout: exact against the reference's keep bits (the same rng; the
    # plain path's bits: test_dropout_bits_identical_to_helper_and_triton).
    M("dropout d128 persistent softmax overlap alibi lengths", b=2, h=128,
      t=200, s=256, alibi=True, q_lengths=(200, 0), kv_lengths=(256, 90),
      dropout=0.3, config=MosaicConfig(persistent=True,
                                       overlap_softmax=True)),
]

# GPU-sized cases (run with -m slow on the GPU).
SLOW = [
    M("S2k causal d128", b=2, t=2048, s=2048, n=4, k=4, h=128, causal=True),
    M("S1k dense d64", b=2, t=1024, s=1024, n=8, k=8),
    M("S1k d256 causal", t=1024, s=1024, n=4, k=4, h=256, causal=True),
    M("ragged T1000 S1025 d128", t=1000, s=1025, n=2, k=2, h=128),
    M("gqa 32/8 causal", t=512, s=512, n=32, k=8, h=128, causal=True),
    M("segments S2k", b=2, t=2048, s=2048, n=2, k=2, h=128, causal=True,
      segments=True),
    M("window S2k", t=2048, s=2048, n=2, k=2, h=64, causal=True,
      window=(256, 0)),
    M("lengths S1k", b=2, t=1024, s=1024, n=2, k=2, h=128,
      q_lengths=(1000, 3), kv_lengths=(512, 1024)),
    M("fp16 S1k d128", t=1024, s=1024, n=4, k=4, h=128, dtype="float16"),
    M("softcap S1k", t=1024, s=1024, n=2, k=2, h=128, soft_cap=20.0,
      causal=True),
    M("dense mask S1k", b=2, t=1000, s=1024, n=2, k=2, h=128,
      dense_mask="full_empty_row"),
    M("mqa 8/1", t=256, s=256, n=8, k=1, h=128),
    M("alibi causal persistent gqa", b=2, t=1000, s=1000, n=8, k=2, h=128,
      causal=True, alibi=True),
    M("alibi lengths bottom_right d64", b=2, t=300, s=700, n=4, k=4,
      causal=True, bottom_right=True, alibi=True, q_lengths=(300, 123),
      kv_lengths=(700, 400)),
    M("alibi d256 soft-cap", t=512, s=512, n=2, k=2, h=256, alibi=True,
      soft_cap=30.0),
    # d64 non-causal ALiBi: the fused dK/dV kernel's query vector by FFMA
    # (alibi_fma_queries) on tiles left of, across and right of the diagonal
    M("alibi non-causal bottom_right d64", t=600, s=1000, n=4, k=4,
      bottom_right=True, alibi=True),
    # Non-causal ALiBi: tiles left of, across and right of the diagonal
    # (offset 400), the default d128 config (persistent, softmax overlap).
    M("alibi non-causal bottom_right gqa d128", b=2, t=600, s=1000, n=8, k=2,
      h=128, bottom_right=True, alibi=True),
    M("head dim 80 (padded)", t=200, s=200, n=2, k=2, h=80),
    M("head dim 32 (padded) causal", t=256, s=256, n=2, k=2, h=32,
      causal=True),
    M("lengths bottom_right", b=2, t=256, s=384, n=2, k=2, h=128,
      causal=True, bottom_right=True, q_lengths=(219, 85),
      kv_lengths=(384, 197)),
    M("segments non-causal", t=384, s=384, n=2, k=2, h=128, segments=True),
    M("window (100, 30)", t=512, s=512, n=2, k=2, h=128, window=(100, 30)),
    M("d64 bk128 4 stages causal S1k", t=1024, s=1024, n=2, k=2,
      causal=True, config=MosaicConfig(block_kv=128, num_stages=4)),
    # More items than SMs (132): CTAs loop over 2-3 items on the GPU.
    M("persistent 288 items, ragged lengths", b=3, t=1500, s=1100, n=8, k=4,
      causal=True, q_lengths=(1500, 700, 0), kv_lengths=(1100, 1100, 300),
      config=MosaicConfig(persistent=True)),
    M("persistent 256 items d128 overlap", b=2, t=2048, s=2048, n=8, k=8,
      h=128, config=MosaicConfig(persistent=True, overlap_softmax=True)),
    M("persistent 256 items d256 segments", b=2, t=2048, s=2048, n=8, k=2,
      h=256, causal=True, segments=True, config=MosaicConfig(
          block_kv=64, persistent=True)),
    M("3 consumers causal S2k ragged", b=2, t=2000, s=2048, n=4, k=2,
      causal=True, q_lengths=(2000, 1500), kv_lengths=(2048, 1999),
      config=MosaicConfig(consumers=3)),
    M("3 consumers bk192 overlap S1k", t=1024, s=1100, n=4, k=4,
      config=MosaicConfig(block_kv=192, consumers=3, overlap_softmax=True)),
    # More items than SMs: three persistent consumers exchange the turn at
    # 2-4 items' ends per CTA, with 2 and 4 stages (named barriers 11 and 15).
    M("3 persistent consumers 264 items causal ragged", b=3, t=1500,
      s=1500, n=8, k=4, h=128, causal=True, q_lengths=(1500, 1000, 13),
      kv_lengths=(1500, 1500, 700), config=MosaicConfig(
          consumers=3, persistent=True, heads_inner=True)),
    M("3 persistent consumers 4 stages 344 items d64", b=2, t=2048, s=1000,
      n=16, k=16, config=MosaicConfig(consumers=3, persistent=True,
                                      num_stages=4)),
    # 420 items of ragged lengths on 132 CTAs, 7 groups of 2 heads (1.1 MiB
    # of K/V per head).
    M("persistent causal heads inner 420 items, ragged", b=3, t=1200, s=1300,
      n=14, k=7, h=128, causal=True, bottom_right=True,
      q_lengths=(1200, 1111, 640), kv_lengths=(1300, 1300, 640),
      config=MosaicConfig(heads_inner=True, overlap_softmax=True,
                          persistent=True, head_group_mib=2.5)),
    M("dropout S2k causal d128 gqa", b=2, t=2048, s=2048, n=8, k=2, h=128,
      causal=True, dropout=0.1),
    M("dropout S1k d64 ragged", b=2, t=1000, s=1025, n=4, k=4, dropout=0.1),
    M("dropout d256 alibi soft-cap", t=512, s=512, n=2, k=2, h=256,
      alibi=True, soft_cap=30.0, dropout=0.2),
    # The d64 default from T = S = 4096 on takes dropout too (three
    # consumers, idle ones past T and past their diagonal; 2026-11-30).
    M("dropout d64 S4k causal default 3 consumers", b=2, t=4096, s=4096,
      n=2, k=2, causal=True, dropout=0.1),
    M("dropout 3 consumers segments", b=2, t=1024, s=1024, n=2, k=2,
      segments=True, dropout=0.1, config=MosaicConfig(consumers=3)),
    # The dropout default from T = S = 16384 on at d128 non-causal (three
    # consumers since run 75), on fewer query rows.
    M("dropout d128 S16k non-causal default 3 consumers", t=300, s=16411,
      n=2, k=2, h=128, dropout=0.1, config=MosaicConfig.default(
          128, False, kv_seqlen=16411, dropout=True)),
    # The dropout default from T = S = 16384 on at d128 causal (three
    # consumers, not persistent; from 32768 before run 153), on fewer rows.
    M("dropout d128 S16k causal default 3 consumers", b=2, t=300, s=333,
      n=2, k=1, h=128, causal=True, bottom_right=True, dropout=0.1,
      q_lengths=(300, 150), config=MosaicConfig.default(
          128, True, kv_seqlen=16384, q_seqlen=16384, dropout=True)),
    # The default config from T = S = 16384 on at d128 non-causal (three
    # consumers), on fewer query rows.
    M("d128 S16k non-causal default 3 consumers ragged", b=2, t=300,
      s=16411, n=2, k=2, h=128, kv_lengths=(16411, 9000),
      config=MosaicConfig.default(128, False, kv_seqlen=16411)),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward(case):
  check_forward(case, "mosaic")


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=str)
def test_forward_large(case):
  if INTERPRET:
    pytest.skip("GPU-sized case: minutes in interpret mode; run on the GPU "
                "with -m slow")
  check_forward(case, "mosaic")


def test_fully_masked_rows_backend_contract():
  """The backend itself returns LSE = +inf and zeros on rows with no visible
  key (the public function turns the LSE into a finite value)."""
  b, t, h = 2, 130, 64
  q = jax.random.normal(jax.random.key(0), (b, t, 1, h), jnp.bfloat16)
  arrays = masks.MaskArrays(jnp.array([t, 0], jnp.int32),
                            jnp.array([t, t], jnp.int32))
  params = KernelParams(spec=masks.MaskSpec(is_causal=True), scale=h ** -0.5,
                        forward="mosaic", interpret=INTERPRET)
  out, lse = jax.jit(mosaic_forward.forward, static_argnums=4)(
      q, q, q, arrays, params)
  assert bool(jnp.all(jnp.isposinf(lse[1]))) and bool(jnp.all(out[1] == 0))
  assert bool(jnp.all(jnp.isfinite(lse[0]))) and bool(jnp.any(out[0] != 0))


def test_deterministic():
  c = M("determinism", t=128, s=256, causal=True)
  a = check_forward(c, "mosaic", seed=3)
  b = check_forward(c, "mosaic", seed=3)
  np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
  np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))


def _params(config=None, **kw):
  return KernelParams(spec=masks.MaskSpec(**kw), scale=0.1, forward="mosaic",
                      config=config, interpret=INTERPRET)


def test_unsupported_raise_not_implemented():
  q = jnp.zeros((1, 128, 1, 64), jnp.float32)
  with pytest.raises(NotImplementedError, match="float16/bfloat16"):
    mosaic_forward.check_supported(_params(), q, q, q)
  # three consumers with a 256-key tile do not compile (Mosaic GPU's pass
  # pipeline, natively); 192 keys do
  q = jnp.zeros((1, 128, 1, 64), jnp.bfloat16)
  with pytest.raises(NotImplementedError, match="block_kv <= 192"):
    mosaic_forward.check_supported(
        _params(MosaicConfig(consumers=3, block_kv=256)), q, q, q)
  mosaic_forward.check_supported(
      _params(MosaicConfig(consumers=3, block_kv=192)), q, q, q)


def test_bad_config():
  q = jnp.zeros((1, 128, 1, 64), jnp.bfloat16)
  params = dataclasses.replace(_params(), config=object())
  with pytest.raises(ValueError, match="MosaicConfig"):
    mosaic_forward.check_supported(params, q, q, q)
  with pytest.raises(ValueError, match="block_kv"):
    MosaicConfig(block_q=64, block_kv=96, num_stages=2)
  with pytest.raises(ValueError, match="num_stages"):
    MosaicConfig(block_q=64, block_kv=128, num_stages=1)
  with pytest.raises(ValueError, match="num_stages"):  # named barriers
    MosaicConfig(num_stages=5, consumers=3)
  with pytest.raises(ValueError, match="consumers"):
    MosaicConfig(consumers=4)
  with pytest.raises(ValueError, match="head_group_mib"):
    MosaicConfig(head_group_mib=0)
  for bad in (4, 12, -8, 16.0):
    with pytest.raises(ValueError, match="row_tree"):
      MosaicConfig(row_tree=bad)
  for bad in (3, 128, -4, 8.0):
    with pytest.raises(ValueError, match="reduce_ilp"):
      MosaicConfig(reduce_ilp=bad)


def test_config_default_row_tree_only_where_measured():
  """row_tree on d128's overlap entries and d64 non-causal block_kv=256
  (MosaicConfig.default's measurements), on no fp8, dropout or ALiBi."""
  d = MosaicConfig.default
  assert d(128, False, kv_seqlen=4096).row_tree == 8
  assert d(128, True, kv_seqlen=4096).row_tree == 8
  assert d(64, False, kv_seqlen=2048).row_tree == 32
  for cfg in (d(64, True, kv_seqlen=4096), d(64, False, kv_seqlen=4096),
              d(64, False, kv_seqlen=16384),
              d(128, False, kv_seqlen=16384), d(256, False, kv_seqlen=4096),
              d(128, False, kv_seqlen=4096, fp8=True),
              d(128, False, kv_seqlen=4096, dropout=True),
              d(128, False, kv_seqlen=4096, alibi=True),
              d(64, False, kv_seqlen=4096, every_tile_masked=True)):
    assert cfg.row_tree == 0, cfg


def test_config_default_reduce_ilp_only_where_measured():
  """reduce_ilp=16 on d256 (MosaicConfig.default's measurements), on no
  fp8, dropout or ALiBi; d64 and d128 were level, fp8 lost."""
  d = MosaicConfig.default
  for causal in (False, True):
    for t in (1024, 4096):
      assert d(256, causal, kv_seqlen=t).reduce_ilp == 16
  for cfg in (d(64, False, kv_seqlen=4096), d(128, True, kv_seqlen=4096),
              d(128, False, kv_seqlen=16384),
              d(256, False, kv_seqlen=4096, fp8=True),
              d(256, True, kv_seqlen=4096, dropout=True),
              d(256, False, kv_seqlen=4096, alibi=True),
              d(256, True, kv_seqlen=4096, every_tile_masked=True)):
    assert cfg.reduce_ilp == 0, cfg


def test_config_table_fits_smem():
  for h in (64, 128, 256):
    for causal in (False, True):
      for kv_seqlen in (4096, 16384):
        cfg = MosaicConfig.default(h, causal, kv_seqlen=kv_seqlen)
        assert cfg.smem_bytes(h) <= 227 * 1024, (h, causal, cfg)


def test_config_default_every_tile_masked_takes_the_measured_config():
  assert MosaicConfig.default(128, True).overlap_softmax
  assert MosaicConfig.default(128, False).persistent
  masked = MosaicConfig.default(128, False, every_tile_masked=True)
  assert not masked.overlap_softmax and not masked.persistent
  assert not MosaicConfig.default(64, False).overlap_softmax


def test_config_default_d128_dropout_turns_the_softmax_overlap_off():
  for causal in (False, True):
    plain = MosaicConfig.default(128, causal)
    drop = MosaicConfig.default(128, causal, dropout=True)
    assert plain.overlap_softmax and not drop.overlap_softmax
    assert drop.persistent == plain.persistent  # only the overlap changes
  assert MosaicConfig.default(256, False, dropout=True).overlap_softmax


def test_config_default_d128_causal_long_takes_three_consumers():
  for t in (16384, 32768):
    for dropout in (False, True):
      long = MosaicConfig.default(128, True, kv_seqlen=t, q_seqlen=t,
                                  dropout=dropout)
      assert long.consumers == 3 and not long.persistent
      assert not long.overlap_softmax and long.smem_bytes(128) <= 227 * 1024
  for t, s, dropout in ((8192, 8192, True), (4096, 32768, True),
                        (4096, 4096, False)):
    cfg = MosaicConfig.default(128, True, kv_seqlen=s, q_seqlen=t,
                               dropout=dropout)
    assert cfg.consumers == 2 and cfg.persistent, (t, s, dropout)
  for other in (dict(alibi=True), dict(window=True),
                dict(every_tile_masked=True)):
    cfg = MosaicConfig.default(128, True, kv_seqlen=32768, q_seqlen=32768,
                               dropout=True, **other)
    assert cfg.consumers == 2, other
  # a bias keeps the earlier rule: three consumers only with dropout
  assert MosaicConfig.default(128, True, kv_seqlen=16384,
                              bias=True).consumers == 2


def test_config_default_d64_three_consumers_from_4096():
  """d64 from the shorter sequence's 4096 (MosaicConfig.default's
  2026-11-30 measurements): three consumers, block_kv 128, persistent
  (fp8 only causal below 16384); with dropout too; two with a feature the
  rule was not measured with."""
  d = MosaicConfig.default
  for causal in (False, True):
    for t in (4096, 16384):
      for feature in (dict(), dict(fp8=True), dict(dropout=True)):
        cfg = d(64, causal, kv_seqlen=t, q_seqlen=t, **feature)
        persistent = not feature.get("fp8") or (causal and t < 16384)
        assert (cfg.consumers, cfg.block_kv, cfg.persistent) == (
            3, 128, persistent), (causal, t, feature, cfg)
        assert cfg.heads_inner == causal and not cfg.overlap_softmax
        assert cfg.smem_bytes(64) <= 227 * 1024
    # three consumers by kv_seqlen alone (non-causal, with a feature) are
    # not persistent: measured only without ALiBi, a window or masks
    assert not d(64, False, kv_seqlen=16384, window=True).persistent
    assert d(64, causal, kv_seqlen=2048).consumers == 2
    assert d(64, causal, kv_seqlen=4096, q_seqlen=2048).consumers == 2
    for other in (dict(window=True), dict(every_tile_masked=True),
                  dict(bias=True), dict(alibi=True, dropout=True)):
      assert d(64, causal, kv_seqlen=4096, **other).consumers == 2, other
    # ALiBi (bf16, no dropout): three consumers from 4096, persistent only
    # causal (non-causal, the persistent form spilled)
    for t in (4096, 16384):
      cfg = d(64, causal, kv_seqlen=t, q_seqlen=t, alibi=True)
      assert (cfg.consumers, cfg.block_kv, cfg.persistent) == (
          3, 128, causal), (causal, t, cfg)
      assert cfg.alibi_fma_keys and cfg.smem_bytes(64) <= 227 * 1024
    assert d(64, causal, kv_seqlen=4096, q_seqlen=2048,
             alibi=True).consumers == 2
  causal_bias = d(64, True, kv_seqlen=4096, bias=True)
  assert causal_bias.persistent and causal_bias.block_kv == 128


def test_backward_config_default_d128_by_dropout_and_alibi():
  """Without dropout: 128-key dQ steps, Q from shared memory (runs
  184-185), the rows a step ahead through the ring (runs 242, 244), no
  stagger (runs 181-182, 245; with a soft-cap where non-causal, run 246),
  240 registers per dK/dV consumer where
  non-causal (runs 189-190; with dropout or ALiBi too, run 197),
  240 also with a soft-cap (run 195); with ALiBi 64-key steps, Q in
  registers, the stagger only where causal, the row ring not read ahead
  (2026-11-28); with dropout 128-key dQ steps, no stagger."""
  for causal in (False, True):
    plain = MosaicBackwardConfig.default(128, causal)
    drop = MosaicBackwardConfig.default(128, causal, dropout=True)
    assert plain.dq_rows_in_registers == 0 and plain.block_kv_dq == 128
    assert not plain.stagger_consumers and plain.prefetch_rows
    assert plain.dkdv_registers == (None if causal else 240)
    capped = MosaicBackwardConfig.default(128, causal, soft_cap=True)
    assert plain.row_ring  # the rows a step ahead through the ring
    assert capped == dataclasses.replace(  # (run 246)
        plain, dkdv_registers=240, stagger_consumers=not causal)
    assert drop.dkdv_registers == plain.dkdv_registers
    assert plain.dq_registers is None
    assert MosaicBackwardConfig.default(
        128, causal, alibi=True).dkdv_registers == plain.dkdv_registers
    assert drop.dq_rows_in_registers == 0 and not drop.stagger_consumers
    assert drop.block_kv_dq == 128
  # ALiBi: no stagger where non-causal (without dropout)
  alibi = MosaicBackwardConfig.default(128, False, alibi=True)
  assert alibi.dq_rows_in_registers == 1 and not alibi.stagger_consumers
  assert MosaicBackwardConfig.default(128, True, alibi=True).stagger_consumers
  for causal in (False, True):
    alibi = MosaicBackwardConfig.default(128, causal, alibi=True)
    assert alibi.row_ring and not alibi.prefetch_rows
  assert MosaicBackwardConfig.default(128, False, dropout=True, alibi=True) \
      == MosaicBackwardConfig.default(128, False, dropout=True)
  for h in (64, 256):
    assert not MosaicBackwardConfig.default(h, False).stagger_consumers
  assert MosaicBackwardConfig.default(256, False).dq_rows_in_registers == 0
  with pytest.raises(ValueError, match="dq_rows_in_registers=3"):
    MosaicBackwardConfig(dq_rows_in_registers=3)
  with pytest.raises(ValueError, match="split_head_dim=False"):
    MosaicBackwardConfig(dq_rows_in_registers=1, split_head_dim=True)
  with pytest.raises(ValueError, match="dkdv_registers=236"):
    MosaicBackwardConfig(dkdv_registers=236)
  with pytest.raises(ValueError, match="dq_registers=240 .* two consumers"):
    MosaicBackwardConfig(dq_consumers=3, dq_registers=240)
  # the dQ kernel's own config drops the dK/dV kernel's count
  three = MosaicBackwardConfig(dq_consumers=3, dkdv_registers=240)
  assert three.dq_kernel().dkdv_registers is None


def test_backward_config_default_not_deterministic():
  """``deterministic=False`` takes the fused kernel with f32 dQ adds where
  it was measured faster (runs 204-205): d64 without dropout; elsewhere
  the deterministic entry (d128 since run 246, where the deterministic
  kernels were the faster)."""
  fast = lambda h, causal=False, **kw: MosaicBackwardConfig.default(
      h, causal, deterministic=False, **kw)
  cfg = fast(64)
  assert cfg.one_kernel and not cfg.deterministic and cfg.row_ring, cfg
  assert cfg.smem_bytes(64) <= 227 * 1024
  assert fast(64).persistent and fast(64).block_q_dkv == 128
  for kw in ({"alibi": True}, {"soft_cap": True}):  # d64: also causal
    assert fast(64, True, **kw) == dataclasses.replace(
        MosaicBackwardConfig.default(64, True, **kw), fused=False,
        deterministic=False)
  for h, causal, kw in ((128, True, {}), (128, False, {}), (256, False, {}),
                        (128, False, {"dropout": True}),
                        (128, False, {"alibi": True}),
                        (128, False, {"soft_cap": True}),
                        (64, False, {"dropout": True})):
    assert fast(h, causal, **kw) == MosaicBackwardConfig.default(
        h, causal, **kw), (h, causal, kw)
  # the backward reads the flag from the call's params
  q = jnp.zeros((1, 128, 1, 64), jnp.bfloat16)
  params = dataclasses.replace(_params(), deterministic=False)
  assert mosaic_backward._config(params, q, None)[1] == fast(64)
  assert mosaic_backward._config(_params(), q, None)[1] == \
      MosaicBackwardConfig.default(64, False)


def test_config_default_causal_persistent_sorts_items_longest_first():
  for h in (64, 128, 256):
    cfg = MosaicConfig.default(h, True)
    assert not cfg.persistent or cfg.heads_inner, (h, cfg)


def test_config_default_d64_causal_two_consumers_long_take_wide_tiles():
  d = MosaicConfig.default
  assert d(64, True, kv_seqlen=2048).block_kv == 128
  assert d(64, True, kv_seqlen=16384, window=True).block_kv == 256
  assert d(128, True, kv_seqlen=16384).block_kv == 128


def test_config_default_d64_long_non_causal_takes_three_consumers():
  d = MosaicConfig.default
  assert d(64, False, kv_seqlen=2048).consumers == 2
  # kv_seqlen >= 16384 with any feature (the rule before 2026-11-30)
  assert d(64, False, kv_seqlen=16384, q_seqlen=1024).consumers == 3
  assert d(64, False, kv_seqlen=16384, dropout=True).consumers == 3


def test_config_default_d128_long_non_causal_takes_three_consumers():
  long = MosaicConfig.default(128, False, kv_seqlen=16384)
  assert long.consumers == 3 and not long.persistent
  assert long.smem_bytes(128) <= 227 * 1024
  assert MosaicConfig.default(128, False, kv_seqlen=8192).consumers == 2
  assert MosaicConfig.default(128, False, kv_seqlen=16384,
                              q_seqlen=16384).consumers == 3
  assert MosaicConfig.default(128, False, kv_seqlen=16384,
                              q_seqlen=512).consumers == 2  # short queries
  # not where three consumers measured slower (config.py: ALiBi, a sliding
  # window, every tile masked); with dropout they are faster (run 75)
  for kw in (dict(alibi=True), dict(window=True),
             dict(every_tile_masked=True)):
    cfg = MosaicConfig.default(128, False, kv_seqlen=16384, **kw)
    assert cfg.consumers == 2, kw
  drop = MosaicConfig.default(128, False, kv_seqlen=16384, dropout=True)
  assert drop.consumers == 3 and not drop.overlap_softmax


def test_keep_select_register_pairs_match_the_wgmma_layout():
  """``score_tiles._keep_select`` pairs WGMMA registers by index: [.., n8 column
  block, .., row half (+8), ..] = idx[1], idx[4], two adjacent columns per
  register.  The layout it assumes (JAX 0.11.2's), checked without a GPU;
  the GPU tests check the bits against the reference."""
  from jax.experimental.mosaic.gpu import fragmented_array as fa
  layout = fa.WGMMA_LAYOUT
  assert layout.tiling.tile_shape((64, 64)) == (1, 8, 4, 1, 2, 1, 8, 4, 2)
  assert (layout.warp_dims, layout.lane_dims, layout.vector_dim) == (
      (-7,), (-3, -2), -1)
  assert layout.registers_shape((64, 128)) == (1, 16, 1, 1, 2, 1, 1, 1, 1)


def test_check_supported_and_forward_choose_the_config_in_one_place():
  """The config the support check sizes is the one the forward runs: with
  ALiBi slopes in the arrays, d128 non-causal S16k keeps two consumers."""
  q = jax.ShapeDtypeStruct((1, 16384, 2, 128), jnp.bfloat16)
  params = KernelParams(spec=masks.MaskSpec(), scale=128 ** -0.5,
                        logits_soft_cap=None, forward="mosaic", config=None,
                        interpret=True)
  plain = masks.MaskArrays(None, None)
  alibi = plain._replace(alibi_slopes=jnp.ones((2,), jnp.float32))
  assert mosaic_forward._config(params, q, q, None)[1].consumers == 3
  assert mosaic_forward._config(params, q, q, plain)[1].consumers == 3
  assert mosaic_forward._config(params, q, q, alibi)[1].consumers == 2
  mosaic_forward.check_supported(params, q, q, q, alibi)  # fits: no raise


def _dropout_bits(impl, rng, rate, b, n, t, s, broadcast=False):
  """The keep mask a backend applied, read back through its bf16 output: with
  q = 0 every probability is 1 / S and V = I (H = S) puts column j of P
  into output feature j, so out * S * (1 - rate) is the keep mask (to
  bf16's rounding)."""
  import pallas_flash as pf
  q = jnp.zeros((b, t, n, s), jnp.bfloat16)
  v = jnp.broadcast_to(jnp.eye(s, dtype=jnp.bfloat16)[None, :, None, :],
                       (b, s, 1, s))
  out = pf.flash_attention(q, v, v, dropout_rate=rate, dropout_rng=rng,
                           broadcast_dropout=broadcast, implementation=impl)
  scaled = np.asarray(out, np.float32) * s * (1.0 - rate)  # [B, T, N, S]
  np.testing.assert_allclose(scaled, np.round(scaled), atol=2e-2)
  return np.transpose(np.round(scaled), (0, 2, 1, 3)).astype(bool)


def test_dropout_bits_identical_to_helper_and_triton():
  """The Mosaic forward keeps exactly ``dropout_mask``'s bits, the Triton
  kernels' (odd T and S, padded head dim; also ``broadcast_dropout``)."""
  import pallas_flash as pf
  rng, rate, shape = jax.random.key(9), 0.3, (1, 2, 37, 48)
  helper = np.asarray(pf.dropout_mask(rng, shape, rate))
  mosaic = _dropout_bits("mosaic", rng, rate, *shape)
  np.testing.assert_array_equal(mosaic, helper)
  np.testing.assert_array_equal(mosaic,
                                _dropout_bits("triton", rng, rate, *shape))
  shared = np.asarray(pf.dropout_mask(rng, shape, rate, broadcast=True))
  np.testing.assert_array_equal(
      _dropout_bits("mosaic", rng, rate, *shape, broadcast=True), shared)


@pytest.mark.slow
def test_large_dropout_bits_match_helper():
  if INTERPRET:
    pytest.skip("GPU-sized case: run on the GPU with -m slow")
  import pallas_flash as pf
  rng, shape = jax.random.key(5), (1, 2, 700, 256)
  np.testing.assert_array_equal(_dropout_bits("mosaic", rng, 0.1, *shape),
                                np.asarray(pf.dropout_mask(rng, shape, 0.1)))


@pytest.mark.parametrize("config", [None, MosaicConfig(block_kv=64)],
                         ids=["default", "MosaicConfig"])
def test_gradients_through_public_api(config):
  """implementation="mosaic": Mosaic forward and Mosaic backward through the
  public function (a MosaicConfig without ``backward`` takes the backward's
  default)."""
  import pallas_flash as pf

  ks = jax.random.split(jax.random.key(11), 4)
  shape = (1, 130, 2, 64)
  q, k, v = (jax.random.normal(kk, shape, jnp.float32).astype(jnp.bfloat16)
             for kk in ks[:3])
  d_out = jax.random.normal(ks[3], shape, jnp.float32).astype(jnp.bfloat16)
  kw = dict(is_causal=True)
  out, vjp = jax.vjp(functools.partial(pf.flash_attention, config=config,
                                       implementation="mosaic", **kw), q, k, v)
  f32 = lambda x: x.astype(jnp.float32)
  ref, ref_vjp = jax.vjp(functools.partial(pf.flash_attention,
                                           implementation="xla", **kw),
                         f32(q), f32(k), f32(v))
  rel = lambda a, b: float(jnp.linalg.norm(f32(a) - b) / jnp.linalg.norm(b))
  assert rel(out, ref) < 1e-2
  for name, g, r in zip("qkv", vjp(d_out), ref_vjp(f32(d_out))):
    assert g.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(f32(g))))
    assert rel(g, r) < 2e-2, (name, rel(g, r))


LOWERINGS = [  # (head dim, causal, config, extra masking)
    *[(h, c, None, None) for h in (64, 128, 256) for c in (False, True)],
    (64, False, MosaicConfig(block_kv=256, persistent=True), None),
    (256, True, MosaicConfig(block_kv=64, masked_first=False,
                             overlap_softmax=True, persistent=True), None),
    (128, True, None, "segments"),
    (128, False, MosaicConfig(overlap_softmax=True), "dense mask"),
    (128, True, None, "soft-cap"),
    (64, True, MosaicConfig(consumers=3), None),
    (64, False, MosaicConfig(consumers=3, overlap_softmax=True), None),
    (128, True, MosaicConfig(consumers=3, persistent=True), None),
    # the row max / sum by Mosaic GPU's reduction with more accumulators
    (64, True, MosaicConfig(reduce_ilp=32), None),
    (128, True, MosaicConfig(overlap_softmax=True, reduce_ilp=16), None),
    (128, True, None, "alibi"),  # persistent, softmax overlap
    (128, False, None, "alibi"),  # ALiBi's tiles across the diagonal
    (64, False, None, "alibi"),
    (256, False, None, "alibi soft-cap"),  # ALiBi not folded
    (256, True, None, "alibi"),  # block_kv 64
    (256, False, None, "alibi"),
    (128, True, None, "dropout"),  # persistent, softmax overlap
    (64, False, None, "dropout alibi"),
    (256, False, MosaicConfig(block_kv=64), "dropout"),
    # A bias through its TMA ring (issue 50): the defaults made to fit it
    # (MosaicConfig.with_bias), three consumers, ALiBi and dropout beside it.
    *[(h, c, None, "bias") for h in (64, 128, 256) for c in (False, True)],
    (64, False, MosaicConfig(consumers=3), "bias"),
    (128, True, None, "bias dropout alibi"),
    # the bias tile with K (with_bias's choice) in the overlap form and under
    # ALiBi's folded init; the explicit configs above keep it with V
    (128, False, MosaicConfig(bias_with_k=True, overlap_softmax=True,
                              persistent=False), "bias"),
    (64, True, MosaicConfig(bias_with_k=True), "bias alibi"),
]


def _lowering_call(h, causal, config, extra, b=2, t=1000):
  """(MaskArrays, KernelParams) of a [b, t] call with the ``extra`` masking
  of the LOWERINGS tables, for lowering without a GPU."""
  lens = jnp.full((b,), t, jnp.int32)
  arrays = masks.MaskArrays(lens, lens)
  spec = masks.MaskSpec(is_causal=causal)
  if extra == "segments":
    seg = jnp.zeros((b, t), jnp.int32)
    arrays = arrays._replace(q_segment_ids=seg, kv_segment_ids=seg)
    spec = dataclasses.replace(spec, has_segments=True)
  elif extra == "dense mask":
    arrays = arrays._replace(mask=jnp.ones((b, 1, t, t), bool))
    spec = dataclasses.replace(spec, dense_mask_shape=(b, 1, t, t))
  elif extra in ("alibi", "alibi soft-cap", "dropout alibi"):
    arrays = arrays._replace(alibi_slopes=jnp.full((1, 4), 0.25, jnp.float32))
  elif extra is not None and extra.startswith("bias"):  # [1, N, T, S]
    arrays = arrays._replace(bias=jnp.zeros((1, 4, t, t), jnp.bfloat16))
    if "alibi" in extra:
      arrays = arrays._replace(alibi_slopes=jnp.full((1, 4), 0.25,
                                                     jnp.float32))
  rate = 0.0
  if extra is not None and "dropout" in extra:
    arrays = arrays._replace(dropout_seeds=jnp.arange(b * 4, dtype=jnp.int32
                                                      ).reshape(b, 4))
    rate = 0.1
  soft_cap = extra is not None and "soft-cap" in extra
  params = KernelParams(spec=spec, scale=h ** -0.5, forward="mosaic",
                        config=config, dropout_rate=rate,
                        logits_soft_cap=20.0 if soft_cap else None)
  return arrays, params


@pytest.mark.parametrize("h,causal,config,extra", LOWERINGS, ids=str)
def test_lowers_for_cuda(monkeypatch, whole_copy_slices, h, causal, config,
                         extra):
  """The Pallas -> Mosaic GPU lowering, which interpret mode skips, runs on
  any machine: lower the kernel for CUDA without a GPU (it caught a constant
  loop operand that only the GPU rejected).  T = 1000 is no whole number of
  tiles: no unswizzled copy may overhang its array (conftest's
  ``whole_copy_slices``)."""
  monkeypatch.setattr(mosaic_forward, "check_supported", lambda *a: None)
  monkeypatch.setattr(mosaic_forward, "_num_sms", lambda: 132)
  arrays, params = _lowering_call(h, causal, config, extra)
  q = jax.ShapeDtypeStruct((2, 1000, 4, h), jnp.bfloat16)
  f = jax.jit(lambda q: mosaic_forward.forward(q, q, q, arrays, params))
  f.trace(q).lower(lowering_platforms=("cuda",))
  assert whole_copy_slices.copies, "no copy recorded"
  assert not whole_copy_slices.unclipped()


# --------------------------------------------------------------------------
# Bias (issue 50): the forward and both backward kernels read it through
# their TMA rings; the dQ kernel writes dbias
# --------------------------------------------------------------------------


def _bias(case, pattern: str, seed: int = 3):
  """A random bias of the shape ``pattern`` spells (letters of B N T S, 1
  for a broadcast dim) in the case's dtype, -inf on keys 5..8 of every row
  (logits the bias masks)."""
  dims = dict(B=case.batch, N=case.heads, T=case.seqlen, S=case.kv_len)
  shape = tuple(dims.get(c, 1) for c in pattern)
  x = 2.0 * jax.random.normal(jax.random.key(seed), shape, jnp.float32)
  return x.at[..., 5:9].set(-jnp.inf).astype(case.dtype)


def _count_calls(monkeypatch, module, name: str) -> list:
  """A list that grows by one per call of ``module.name`` (patched), so that
  a test fails if the dispatcher silently took another backend."""
  calls = []
  real = getattr(module, name)

  def counted(*args, **kwargs):
    calls.append(1)
    return real(*args, **kwargs)
  monkeypatch.setattr(module, name, counted)
  return calls


@pytest.fixture
def mosaic_forward_calls(monkeypatch):
  """Counts calls of the Mosaic forward (the dispatcher must not fall back)."""
  return _count_calls(monkeypatch, mosaic_forward, "forward")


BIAS = [  # (case, bias pattern)
    (M("bias [1,N,T,S] causal gqa", n=4, k=2, t=100, s=150, causal=True),
     "1NTS"),
    (M("bias [B,N,T,S] d128 lengths", b=2, n=2, k=2, h=128, t=130, s=97,
       q_lengths=(130, 60), kv_lengths=(97, 50)), "BNTS"),
    (M("bias [N,T,S] fp16 causal bottom_right", n=2, t=77, s=200,
       causal=True, bottom_right=True, dtype="float16"), "NTS"),
    (M("bias [B,1,T,S] persistent overlap soft-cap", b=2, n=2, t=190, s=140,
       soft_cap=5.0, config=MosaicConfig(persistent=True,
                                         overlap_softmax=True)), "B1TS"),
    (M("bias [1,N,T,S] alibi dropout", n=2, t=96, s=160, causal=True,
       alibi=True, dropout=0.1), "1NTS"),
    # read in place (T, S whole (8, 64) tiles), T and S not whole kernel
    # tiles: TMA's zeros past the bias's ends, dbias's stores dropped there
    (M("bias [1,N,T,S] in place, partial tiles", n=2, t=200, s=320), "1NTS"),
    # the bias tile copied with K, freed with K's slot (with_bias's choice;
    # the explicit configs above copy it with V)
    (M("bias with K, overlap, causal", n=2, t=150, s=300, causal=True,
       config=MosaicConfig(bias_with_k=True, overlap_softmax=True)), "1NTS"),
    (M("bias with K, persistent, alibi", b=2, n=2, t=130, s=260,
       alibi=True, config=MosaicConfig(bias_with_k=True, persistent=True)),
     "BNTS"),
]


@pytest.mark.parametrize("case, pattern", BIAS, ids=str)
def test_bias_forward_and_gradients(case, pattern, mosaic_forward_calls,
                                    mosaic_backward_calls):
  """out, dq, dk, dv and dbias against the reference's VJP (random
  cotangent) with the Mosaic forward and backward reading the bias."""
  check_gradients(case, "mosaic", bias=_bias(case, pattern))
  assert mosaic_forward_calls, "the Mosaic forward did not run"
  assert mosaic_backward_calls, "the Mosaic backward did not run"


BB = lambda name, config=None, **kw: M(name, config=MosaicConfig(
    backward=config) if config else None, **kw)

BIAS_BACKWARD = [  # (case, bias pattern): the backward's configs and masks
    (BB("d128 causal top_left gqa odd T", n=4, k=2, h=128, t=97, s=130,
        causal=True), "1NTS"),
    (BB("d128 soft-cap causal bottom_right (bias added to the logits)", b=2,
        n=2, h=128, t=70, s=150, causal=True, bottom_right=True,
        soft_cap=5.0), "BNTS"),
    (BB("d64 window segments (skipped edge tiles)", t=256, s=256,
        causal=True, window=(40, 10), segments=True), "1NTS"),
    (BB("d64 dense mask lengths", b=2, n=2, k=1, t=130, s=200,
        q_lengths=(130, 0), kv_lengths=(200, 77),
        dense_mask="full_empty_row"), "B1TS"),
    (BB("d64 64-row dK/dV steps, 3 dQ consumers", t=200, s=130,
        config=MosaicBackwardConfig(block_q_dkv=64, dq_consumers=3)),
     "1NTS"),
    (BB("d64 3 consumers", n=2, k=1, t=150, s=260, causal=True,
        config=MosaicBackwardConfig(consumers=3)), "1NTS"),
    (BB("d128 causal, bias in place, partial tiles", n=2, h=128, t=136,
        s=192, causal=True), "BNTS"),
    # 3 CTAs in interpret mode: the Q / dO / bias ring and two K / V sets
    # run across items.
    (BB("d128 persistent, stagger, Q in registers, lengths", b=2, n=2, k=1,
        h=128, t=150, s=260, causal=True, q_lengths=(150, 90),
        kv_lengths=(260, 100), config=MosaicBackwardConfig(
            persistent=True, stagger_consumers=True,
            dq_rows_in_registers=1)), "BNTS"),
]


@pytest.mark.parametrize("case, pattern", BIAS_BACKWARD, ids=str)
def test_bias_backward(case, pattern, mosaic_backward_calls):
  """dq, dk, dv and dbias of the Mosaic backward with a bias, against the
  reference's VJP (random cotangent), across its configs and masks."""
  check_gradients(case, "mosaic", bias=_bias(case, pattern))
  assert mosaic_backward_calls, "the Mosaic backward did not run"


def test_bias_minus_inf_masks_like_the_reference(mosaic_forward_calls):
  """A -inf bias masks its logit; a row it masks entirely outputs zeros and
  LSE +inf (the backend contract), as the reference does."""
  import pallas_flash as pf
  case = M("bias -inf rows", b=2, n=2, k=1, t=70, s=130, causal=True,
           bottom_right=True)
  q, k, v, kw = case.inputs()
  bias = _bias(case, "BNTS").at[1].set(-jnp.inf).at[0, 1, 3].set(-jnp.inf)
  call = lambda impl, *x: pf.flash_attention(
      *x, bias=bias if impl == "mosaic" else bias.astype(jnp.float32),
      implementation=impl, return_residual=True, **kw)
  out, lse = call("mosaic", q, k, v)
  ref, ref_lse = call("xla", *(x.astype(jnp.float32) for x in (q, k, v)))
  assert mosaic_forward_calls
  np.testing.assert_array_equal(out[1], 0.0)
  np.testing.assert_array_equal(out[0, 3, 1], 0.0)
  np.testing.assert_array_equal(jnp.isinf(lse), jnp.isinf(ref_lse))
  assert float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref))) < 2e-2


def test_bias_minus_inf_rows_backward(mosaic_backward_calls):
  """Rows a -inf bias masks entirely (lse +inf) get dq = 0 and dbias = 0,
  and no gradient is NaN; the rest match the reference's VJP."""
  case = M("bias -inf rows bwd", b=2, n=2, k=1, h=128, t=70, s=130,
           causal=True, bottom_right=True)
  bias = _bias(case, "BNTS").at[1].set(-jnp.inf).at[0, 1, 3].set(-jnp.inf)
  _, (dq, dk, dv, dbias) = check_gradients(case, "mosaic", bias=bias)
  assert mosaic_backward_calls
  np.testing.assert_array_equal(dq[1], 0.0)
  np.testing.assert_array_equal(dq[0, 3, 1], 0.0)
  np.testing.assert_array_equal(dbias[1], 0.0)
  np.testing.assert_array_equal(dbias[0, 1, 3], 0.0)
  np.testing.assert_array_equal(dk[1], 0.0)  # no query row sees a key


def test_dbias_only_when_the_bias_needs_a_gradient_mosaic(monkeypatch):
  """The Mosaic backward gets ``bias_grad`` only for a perturbed bias and
  returns no dbias partial otherwise (its dQ kernel then has no dbias
  output or stores)."""
  case = M("dbias skip", t=70, s=70, n=2)
  calls, dbias = bias_grad_calls(monkeypatch, mosaic_backward, case,
                                 "mosaic", _bias(case, "1NTS"))
  assert calls == [(True, 4), (False, 3), (False, 3)]
  np.testing.assert_array_equal(dbias, 0.0)


def test_bias_the_forward_cannot_read_falls_back():
  """A float32 bias, or one broadcast along queries or keys, raises
  NotImplementedError in the Mosaic forward (the dispatcher falls back to
  Triton); a float16 / bfloat16 [1 | B, 1 | N, T, S] bias passes."""
  import pallas_flash as pf
  case = M("bias fallback", b=2, n=2, t=64, s=96)
  q, k, v, _ = case.inputs()
  for shape, dtype in (((2, 1, 1, 96), jnp.bfloat16),
                       ((2, 2, 64, 1), jnp.bfloat16),
                       ((1, 2, 64, 96), jnp.float32)):
    with pytest.raises(NotImplementedError, match="bias"):
      pf.flash_attention(q, k, v, bias=jnp.zeros(shape, dtype),
                         implementation="mosaic")
  for shape in ((1, 1, 64, 96), (2, 2, 64, 96), (2, 64, 96)):
    arrays = masks.MaskArrays(jnp.full((2,), 64), jnp.full((2,), 96),
                              bias=jnp.zeros(shape, jnp.float16).reshape(
                                  (1,) * (4 - len(shape)) + shape))
    mosaic_forward.check_bias(arrays, q, k, fp8=False)


def test_config_with_bias_fits_smem():
  """Every default entry, made to fit the bias ring (``with_bias``), fits
  227 KiB at d64 / d128 / d256 with a 2-byte bias, with two consumers at
  most, the bias tile copied with K; entries that fit as they are keep
  their tiles.  Causal d128 keeps its persistent launch with 64-key tiles
  and three stages; non-causal d128 drops it."""
  for h, causal, s in itertools.product((64, 128, 256), (False, True),
                                        (4096, 16384)):
    cfg = MosaicConfig.default(h, causal, kv_seqlen=s, q_seqlen=s,
                               bias=True)
    fitted = cfg.with_bias(h, causal=causal)
    assert fitted.smem_bytes(h, bias_itemsize=2) <= 227 * 1024, (h, causal)
    assert fitted.smem_bytes(h, bias_itemsize=2) == (
        fitted.smem_bytes(h) + fitted.bias_ring_bytes(2))
    assert fitted.consumers <= 2 and fitted.bias_with_k, fitted
    if h == 128:
      assert fitted.persistent == causal, fitted
      assert (fitted.block_kv, fitted.num_stages) == (
          (64, 3) if causal else (128, 2)), fitted
  small = MosaicConfig(block_kv=64)
  assert small.with_bias(128) == dataclasses.replace(small, bias_with_k=True)


def test_backward_config_with_bias_fits_smem():
  """Every default backward entry (d64, d128: with dropout, ALiBi, a
  soft-cap, deterministic or not), made to fit a 2-byte bias
  (``MosaicBackwardConfig.with_bias``), is two kernels, fits 227 KiB with
  the bias rings and dbias's staging tiles, and passes the backward's
  check; d256 (split_head_dim), a fused config, a float32 bias or one
  broadcast along queries raise NotImplementedError (the dispatcher runs
  the triton backward)."""
  for h, causal, dropout, alibi, cap, det in itertools.product(
      (64, 128), (False, True), (False, True), (False, True), (False, True),
      (False, True)):
    cfg = MosaicBackwardConfig.default(h, causal, dropout, alibi=alibi,
                                       soft_cap=cap, deterministic=det)
    fitted = cfg.with_bias(h)
    assert not fitted.one_kernel and not fitted.split_head_dim, fitted
    dkdv, dq = fitted.bias_bytes(2)
    assert fitted.smem_bytes(h, bias_itemsize=2) <= 227 * 1024, fitted
    assert fitted.smem_bytes(h, bias_itemsize=2) > fitted.smem_bytes(h)
    assert dkdv == 2 * fitted.num_stages * fitted.block_q_dkv * (
        fitted.consumers * fitted.block_kv_dkv)
  # the d64 fused entry becomes two kernels with its tiles; d128 takes
  # 64-key dQ steps (128-key ones need 289 KiB with the bias)
  d64 = MosaicBackwardConfig.default(64, True).with_bias(64)
  assert (d64.block_q_dkv, d64.block_kv_dq, d64.persistent,
          d64.row_ring) == (128, 128, True, True)
  d128 = MosaicBackwardConfig.default(128, False)
  assert d128.block_kv_dq == 128 and d128.with_bias(128).block_kv_dq == 64
  assert d128.smem_bytes(128, bias_itemsize=2) > 227 * 1024
  small = MosaicBackwardConfig(block_kv_dq=64)
  assert small.with_bias(128) is small
  lens = jnp.full((1,), 64, jnp.int32)
  for h in (64, 128, 256):
    q = jnp.zeros((1, 64, 2, h), jnp.bfloat16)
    arrays = masks.MaskArrays(lens, lens,
                              bias=jnp.zeros((1, 2, 64, 64), jnp.bfloat16))
    params = KernelParams(spec=masks.MaskSpec(), scale=0.1,
                          forward="mosaic", interpret=True)
    if h == 256:
      with pytest.raises(NotImplementedError, match="two-kernel form"):
        mosaic_backward.check_supported(params, q, q, q, arrays)
      continue
    mosaic_backward.check_supported(params, q, q, q, arrays)
    fused = dataclasses.replace(params, config=MosaicConfig(
        backward=MosaicBackwardConfig(block_q_dkv=128, fused=True)))
    with pytest.raises(NotImplementedError, match="two-kernel form"):
      mosaic_backward.check_supported(fused, q, q, q, arrays)
    for bias in (arrays.bias.astype(jnp.float32), arrays.bias[:, :, :1]):
      with pytest.raises(NotImplementedError, match="bias"):  # as the
        # forward (``check_bias``): the triton backward takes it
        mosaic_backward.check_supported(params, q, q, q,
                                        arrays._replace(bias=bias))


SLOW_BIAS = [
    (M("bias [1,N,T,S] d64 causal", n=8, k=8, t=2048, s=2048, causal=True),
     "1NTS"),
    (M("bias [1,N,T,S] d128", n=8, k=4, h=128, t=2048, s=2048), "1NTS"),
    (M("bias [B,N,T,S] d256 causal ragged", b=2, n=4, k=4, h=256, t=1000,
       s=1500, causal=True), "BNTS"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, pattern", SLOW_BIAS, ids=str)
def test_bias_large(case, pattern, mosaic_forward_calls,
                    mosaic_backward_calls):
  if INTERPRET:
    pytest.skip("GPU-sized case: minutes in interpret mode; run on the GPU "
                "with -m slow")
  check_gradients(case, "mosaic", bias=_bias(case, pattern))
  assert mosaic_forward_calls
  # d256: the triton backward (no room for the bias ring beside the split
  # form's exchange tiles)
  assert bool(mosaic_backward_calls) == (case.head_dim <= 128)


# --------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------

B = lambda name, config=None, **kw: M(name, config=MosaicConfig(
    backward=config) if config else None, **kw)

BACKWARD = [
    B("bwd dense"),
    B("bwd causal", t=256, s=256, causal=True),
    B("bwd d128 causal ragged bottom_right", h=128, t=97, s=130,
      causal=True, bottom_right=True),
    B("bwd gqa 4/2 (dK/dV summed over 2 heads)", n=4, k=2, causal=True),
    B("bwd mqa 3/1 window", n=3, k=1, t=200, s=200, window=(30, 10)),
    B("bwd lengths (incl. empty row)", b=2, t=160, s=200, causal=True,
      bottom_right=True, q_lengths=(150, 0), kv_lengths=(200, 77)),
    # Non-causal, a key tile reaching past kv_len: its dK/dV steps must all
    # be masked (they were taken as full tiles: dK of the keys past the
    # length came out nonzero).
    B("bwd kv lengths inside a key tile", b=2, n=2, k=1, h=128, t=128,
      s=128, kv_lengths=(128, 37)),
    B("bwd segments", t=256, s=256, causal=True, segments=True),
    B("bwd soft-cap", soft_cap=3.0, causal=True),
    B("bwd fp16", dtype="float16", t=130, s=130),
    B("bwd head dim 40 (padded)", h=40, t=100, s=70),
    B("bwd dense mask [B,N,T,S]", b=2, n=2, k=2, t=130, s=200, causal=True,
      dense_mask="full_empty_row"),
    B("bwd dense mask [B,1,1,S]", t=128, s=256, dense_mask="keys"),
    B("bwd wide tiles, 3 stages, ascending", t=300, s=333, causal=True,
      config=MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                  num_stages=3, masked_first=False)),
    # d128's default: lse2 / delta through the ring a step ahead, across the
    # GQA heads of a kv head and past the last step (ragged, bottom right).
    B("bwd d128 default (rows a step ahead) gqa causal ragged", n=4, k=2,
      h=128, t=130, s=200, causal=True, bottom_right=True, q_lengths=(130,),
      kv_lengths=(150,)),
    B("bwd d128 default non-causal (rows a step ahead) gqa lengths",
      n=4, k=2, h=128, t=200, s=190, kv_lengths=(150,)),
    B("bwd d128 soft-cap default (rows a step ahead) gqa", n=2, k=1, h=128,
      t=150, s=130, soft_cap=20.0),
    # split_head_dim: the consumers share one row tile, each its columns.
    B("bwd d256 (split head dim) gqa causal ragged", n=2, k=1, h=256, t=130,
      s=100, causal=True, bottom_right=True),
    B("bwd d128 split head dim, segments, lengths", b=2, h=128, t=128, s=128,
      segments=True, q_lengths=(128, 0), kv_lengths=(128, 70),
      config=MosaicBackwardConfig(split_head_dim=True)),
    B("bwd alibi gqa causal bottom_right", n=4, k=2, t=100, s=160,
      causal=True, bottom_right=True, alibi=True),
    B("bwd alibi d256 (split head dim) lengths", b=2, n=2, k=1, h=256, t=80,
      s=100, alibi=True, kv_lengths=(100, 37)),
    B("bwd alibi non-causal, tiles on both sides", t=300, s=400, alibi=True),
    # d128's ALiBi default where non-causal: Q in registers, no stagger.
    B("bwd alibi d128 non-causal default gqa lengths", b=2, n=2, k=1, h=128,
      t=100, s=130, alibi=True, kv_lengths=(130, 50)),
    # The fused kernel (interpret mode: each kv tile writes its own dQ slot
    # instead of the TMA reduce-add); GQA carries the lagged dQ share
    # across the head loop.
    B("bwd fused fixed point gqa causal ragged", n=4, k=2, t=150, s=200,
      causal=True, bottom_right=True, q_lengths=(150,), kv_lengths=(190,),
      config=MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                  fused=True)),
    B("bwd fused f32 d128 segments", h=128, t=130, s=256, segments=True,
      config=MosaicBackwardConfig(deterministic=False)),
    # flash_attention(deterministic=False): the table's f32 fused entries
    # (d128: ring, no stagger since run 214; d64: 128-row steps, persistent)
    B("bwd deterministic=False d128 gqa kv lengths", h=128, t=130, s=256,
      n=2, k=1, b=2, kv_lengths=(256, 100), deterministic=False),
    B("bwd deterministic=False d64 gqa causal softcap", n=4, k=2, t=200,
      s=256, causal=True, soft_cap=30.0, deterministic=False),
    # Dropout (the keep bits regenerated): the dK/dV and dQ kernels (d128),
    # their split_head_dim exchange (d256) and the fused fixed-point kernel.
    B("bwd dropout d128 (dK/dV and dQ kernels) gqa 2/1 causal ragged", n=2,
      k=1, h=128, t=70, s=130, causal=True, bottom_right=True, dropout=0.2),
    # The dK/dV kernel's dS^T from the kept Z P^T, through the soft-cap's
    # tanh factor (d64's dropout default: two kernels).
    B("bwd dropout soft-cap d64 two kernels", n=2, k=1, t=90, s=70,
      causal=True, soft_cap=4.0, dropout=0.3),
    # 128-key dQ steps and staggered consumers with dropout (d128's dropout
    # default from T, S >= 16k where causal in runs 136-157; batch row 1
    # has no queries).
    B("bwd dropout d128 causal stagger, 128-key dQ steps",
      b=2, n=2, k=1, h=128, t=100, s=130, causal=True, q_lengths=(100, 0),
      dropout=0.2, config=MosaicBackwardConfig(block_kv_dq=128,
                                               stagger_consumers=True)),
    B("bwd dropout d256 (split head dim) causal ragged", h=256, t=64, s=100,
      causal=True, dropout=0.3),
    B("bwd dropout fused fixed point gqa 2/1 causal", n=2, k=1, t=100, s=130,
      causal=True, dropout=0.2, config=MosaicBackwardConfig(
          block_q_dkv=128, block_kv_dq=128, fused=True)),
    # Three consumers: 192-row CTAs in the dQ kernel only (d128), or in both
    # kernels (d64), the releases counting three warpgroups.
    B("bwd dq 3 consumers d128 gqa causal ragged", n=2, k=1, h=128, t=200,
      s=130, causal=True, bottom_right=True,
      config=MosaicBackwardConfig(dq_consumers=3)),
    B("bwd 3 consumers both kernels segments lengths dropout", b=2, t=200,
      s=256, segments=True, kv_lengths=(256, 90), dropout=0.2,
      config=MosaicBackwardConfig(consumers=3, block_kv_dq=128)),
    # Staggered consumers; batch row 1 has no queries, so its CTAs have no
    # steps and consumer 1 must not wait for consumer 0's first one.
    B("bwd stagger consumers causal lengths 3 stages", b=2, t=200, s=256,
      n=2, k=1, causal=True, q_lengths=(200, 0), kv_lengths=(256, 100),
      config=MosaicBackwardConfig(stagger_consumers=True, num_stages=3)),
    B("bwd stagger fused fixed point causal lengths", b=2, t=150, s=200,
      n=2, k=1, causal=True, q_lengths=(150, 0),
      config=MosaicBackwardConfig(stagger_consumers=True, fused=True,
                                  block_q_dkv=128, block_kv_dq=128)),
    # Persistent dK/dV kernel (3 CTAs in interpret mode, more items than
    # CTAs): the Q / dO ring, the stagger and the fused kernel's dQ share
    # run across items; a batch row with no queries gives items of no steps.
    B("bwd persistent stagger gqa causal lengths", b=2, n=2, k=1, t=200,
      s=256, causal=True, q_lengths=(200, 0), kv_lengths=(256, 100),
      config=MosaicBackwardConfig(persistent=True, stagger_consumers=True)),
    B("bwd persistent fused fixed point causal ragged", b=2, t=150, s=300,
      causal=True, bottom_right=True, q_lengths=(150, 90),
      config=MosaicBackwardConfig(persistent=True, fused=True,
                                  block_q_dkv=128, block_kv_dq=128)),
    # row_ring (the d64 and d256 defaults' lse2 / delta rows through the
    # Q / dO ring; the d64 default is persistent): one item per CTA, and
    # beside dropout's key ring.
    B("bwd fused row ring, not persistent, gqa causal lengths", b=2, n=2,
      k=1, t=150, s=300, causal=True, q_lengths=(150, 0),
      kv_lengths=(300, 120), config=MosaicBackwardConfig(
          fused=True, row_ring=True, block_q_dkv=128, block_kv_dq=128)),
    B("bwd dropout two kernels row ring gqa causal", n=2, k=1, t=130, s=140,
      causal=True, dropout=0.1, config=MosaicBackwardConfig(
          block_kv_dq=128, row_ring=True)),
    # row_ring with prefetch_rows: the rows a step ahead through a ring of
    # stages + 1 slots, across the group's heads; kv tiles with no query
    # rows (one copy, read and not used); beside dropout's key ring.
    B("bwd row ring ahead stagger gqa causal lengths", b=2, n=2, k=1, t=200,
      s=256, causal=True, q_lengths=(200, 0), kv_lengths=(256, 100),
      config=MosaicBackwardConfig(row_ring=True, prefetch_rows=True,
                                  stagger_consumers=True)),
    B("bwd row ring ahead dropout d128 gqa", n=4, k=2, h=128, t=130, s=140,
      dropout=0.1, config=MosaicBackwardConfig(
          row_ring=True, prefetch_rows=True, block_kv_dq=128)),
    B("bwd persistent split head dim d128 dropout", n=2, k=1, h=128, t=64,
      s=200, dropout=0.2, config=MosaicBackwardConfig(
          persistent=True, split_head_dim=True)),
]

SLOW_BACKWARD = [
    B("bwd deterministic=False S2k d128 gqa ragged", b=2, t=2000, s=2048,
      n=8, k=2, h=128, kv_lengths=(2048, 1500), deterministic=False),
    B("bwd deterministic=False S2k d64 causal lengths", b=2, t=2048, s=2048,
      n=4, k=4, causal=True, q_lengths=(2048, 900), deterministic=False),
    B("bwd registers 240 both kernels gqa lengths d128", b=2, t=1024, s=1100,
      n=4, k=2, h=128, kv_lengths=(1100, 333), config=MosaicBackwardConfig(
          block_kv_dq=128, prefetch_rows=True, dkdv_registers=240,
          dq_registers=240)),
    B("bwd S2k causal d128", b=2, t=2048, s=2048, n=4, k=4, h=128,
      causal=True),
    B("bwd S1k d64", b=2, t=1024, s=1024, n=8, k=8),
    B("bwd ragged T1000 S1025 d128", t=1000, s=1025, n=2, k=2, h=128),
    B("bwd gqa 32/8 causal", t=512, s=512, n=32, k=8, h=128, causal=True),
    B("bwd segments S2k", b=2, t=2048, s=2048, n=2, k=2, h=128, causal=True,
      segments=True),
    B("bwd window S2k", t=2048, s=2048, n=2, k=2, h=64, causal=True,
      window=(256, 0)),
    B("bwd lengths bottom_right", b=2, t=256, s=384, n=2, k=2, h=128,
      causal=True, bottom_right=True, q_lengths=(219, 85),
      kv_lengths=(384, 197)),
    B("bwd fp16 softcap S1k d128", t=1024, s=1024, n=4, k=4, h=128,
      dtype="float16", soft_cap=20.0, causal=True),
    B("bwd dense mask S1k", b=2, t=1000, s=1024, n=2, k=2, h=128,
      dense_mask="full_empty_row"),
    B("bwd head dim 80 (padded)", t=200, s=200, n=2, k=2, h=80),
    B("bwd alibi S1k causal gqa d128", b=2, t=1024, s=1024, n=8, k=2, h=128,
      causal=True, alibi=True),
    B("bwd alibi d64 window soft-cap", t=1000, s=1100, n=4, k=4,
      window=(200, 30), soft_cap=20.0, alibi=True),
    B("bwd alibi non-causal bottom_right gqa d128", b=2, t=600, s=1000, n=8,
      k=2, h=128, bottom_right=True, alibi=True),
    B("bwd alibi non-causal lengths d64", b=2, t=512, s=700, n=4, k=4,
      alibi=True, kv_lengths=(700, 300)),
    B("bwd alibi d256 causal (split head dim)", t=512, s=512, n=2, k=2,
      h=256, causal=True, alibi=True),
    B("bwd d256 S1k causal gqa", b=2, t=1024, s=1024, n=4, k=2, h=256,
      causal=True),
    B("bwd d256 ragged window soft-cap", t=1000, s=777, n=2, k=2, h=256,
      window=(300, 50), soft_cap=20.0),
    B("bwd head dim 160 (padded to 256) dense mask", b=2, t=300, s=400, n=2,
      k=1, h=160, dense_mask="full_empty_row"),
    B("bwd wide tiles S1k d64", t=1024, s=1024, n=4, k=2, causal=True,
      config=MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                  num_stages=3)),
    # dQ by TMA reduce-add (GPU only: interpret mode does not simulate it).
    B("bwd fused dQ gqa causal ragged d128", b=2, t=1000, s=1100, n=4, k=2,
      h=128, causal=True, bottom_right=True,
      config=MosaicBackwardConfig(deterministic=False)),
    B("bwd fused dQ segments d64 lengths", b=2, t=1024, s=1024, n=2, k=2,
      segments=True, q_lengths=(1024, 0),
      config=MosaicBackwardConfig(block_q_dkv=128, deterministic=False)),
    B("bwd fused dQ softcap dense mask d128", b=2, t=512, s=640, n=2, k=1,
      h=128, soft_cap=20.0, dense_mask="full_empty_row",
      config=MosaicBackwardConfig(deterministic=False)),
    # One step per CTA (the lagged dQ share only in the tail) and GQA heads
    # whose steps carry the share across the head loop.
    B("bwd fused dQ one step, two steps gqa", b=2, t=64, s=200, n=4, k=1,
      h=128, config=MosaicBackwardConfig(deterministic=False)),
    # The same kernel with fixed-point (deterministic) dQ adds.
    B("bwd fused fixed-point gqa causal ragged d128", b=2, t=1000, s=1100,
      n=4, k=2, h=128, causal=True, bottom_right=True,
      config=MosaicBackwardConfig(fused=True)),
    B("bwd fused fixed-point segments d64 lengths", b=2, t=1024, s=1024,
      n=2, k=2, segments=True, q_lengths=(1024, 0),
      config=MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                  fused=True)),
    B("bwd fused fixed-point softcap dense mask alibi d128", b=2, t=512,
      s=640, n=2, k=1, h=128, soft_cap=20.0, dense_mask="full_empty_row",
      alibi=True, config=MosaicBackwardConfig(fused=True)),
    B("bwd dropout S2k causal d128 gqa", b=2, t=2048, s=2048, n=8, k=2,
      h=128, causal=True, dropout=0.1),
    B("bwd dropout S2k causal d128 lengths, stagger, 128-key dQ steps",
      b=2, t=2048, s=2000, n=4, k=2, h=128, causal=True, dropout=0.1,
      q_lengths=(2048, 700), config=MosaicBackwardConfig(
          block_kv_dq=128, stagger_consumers=True)),
    B("bwd dropout S1k d64 (fused fixed point) ragged lengths", b=2, t=1000,
      s=1025, n=4, k=4, q_lengths=(1000, 0), kv_lengths=(1025, 300),
      dropout=0.1, config=MosaicBackwardConfig(
          block_q_dkv=128, block_kv_dq=128, fused=True)),
    B("bwd dropout S1k d64 default (two kernels, 128-row steps) causal",
      b=2, t=1000, s=1025, n=4, k=2, causal=True, dropout=0.1),
    B("bwd dropout fused f32 dQ d128 alibi", b=2, t=1000, s=1100, n=4, k=2,
      h=128, alibi=True, dropout=0.1,
      config=MosaicBackwardConfig(deterministic=False)),
    B("bwd dropout d256 soft-cap window (split head dim)", t=1000, s=777,
      n=2, k=2, h=256, window=(300, 50), soft_cap=20.0, dropout=0.2),
    B("bwd dropout dense mask d128", b=2, t=1000, s=1024, n=2,
      k=2, h=128, dense_mask="full_empty_row", dropout=0.1),
    B("bwd dq 3 consumers S2k causal d128 gqa", b=2, t=2048, s=2000, n=8,
      k=2, h=128, causal=True, config=MosaicBackwardConfig(dq_consumers=3)),
    B("bwd dq 3 consumers 128-key steps d128 window lengths", b=2, t=1000,
      s=1100, n=4, k=4, h=128, window=(300, 20), kv_lengths=(1100, 400),
      config=MosaicBackwardConfig(dq_consumers=3, block_kv_dq=128)),
    B("bwd dq 3 consumers dropout alibi d128", b=2, t=1000, s=1024, n=4,
      k=2, h=128, causal=True, alibi=True, dropout=0.1,
      config=MosaicBackwardConfig(dq_consumers=3)),
    B("bwd dq rows (Q, dO) in registers d64 window lengths gqa", b=2,
      t=1000, s=1100, n=4, k=2, window=(300, 20), kv_lengths=(1100, 400),
      causal=True, config=MosaicBackwardConfig(dq_rows_in_registers=2,
                                               block_kv_dq=128)),
    B("bwd dq rows in registers dropout segments d128", b=2, t=1024,
      s=1024, n=2, k=2, h=128, segments=True, dropout=0.1,
      config=MosaicBackwardConfig(dq_rows_in_registers=2)),
    B("bwd 3 consumers both kernels d64 segments", b=2, t=1024, s=1024, n=4,
      k=2, segments=True, causal=True,
      config=MosaicBackwardConfig(consumers=3, block_q_dkv=128,
                                  block_kv_dq=128)),
    B("bwd 3 consumers both kernels d64 dense mask soft-cap", b=2, t=700,
      s=1000, n=2, k=2, dense_mask="full_empty_row", soft_cap=20.0,
      config=MosaicBackwardConfig(consumers=3)),
    B("bwd stagger consumers S2k d128 gqa lengths", b=2, t=2048, s=2048,
      n=8, k=2, h=128, kv_lengths=(2048, 700), q_lengths=(2048, 0),
      config=MosaicBackwardConfig(stagger_consumers=True)),
    B("bwd stagger consumers 3 stages causal d128 dropout", b=2, t=1000,
      s=1024, n=4, k=2, h=128, causal=True, dropout=0.1,
      config=MosaicBackwardConfig(stagger_consumers=True, num_stages=3)),
    B("bwd stagger fused fixed point d64 causal lengths", b=2, t=1000,
      s=1024, n=4, k=2, causal=True, q_lengths=(1000, 0),
      config=MosaicBackwardConfig(stagger_consumers=True, fused=True,
                                  block_q_dkv=128, block_kv_dq=128)),
    B("bwd stagger fused f32 dQ d128 gqa", b=2, t=1000, s=1100, n=4, k=2,
      h=128, config=MosaicBackwardConfig(stagger_consumers=True,
                                         deterministic=False)),
    B("bwd stagger 3 consumers (dQ kernel) d128 causal", b=2, t=1024,
      s=1024, n=4, k=4, h=128, causal=True,
      config=MosaicBackwardConfig(stagger_consumers=True, dq_consumers=3)),
    # Persistent dK/dV kernel with more items than SMs (2 x 8 x 24 of 128
    # keys), ragged causal work, GQA.
    B("bwd persistent d128 causal gqa ragged", b=2, t=3000, s=3000, n=8,
      k=4, h=128, causal=True, q_lengths=(3000, 1700),
      config=MosaicBackwardConfig(persistent=True, stagger_consumers=True,
                                  dq_rows_in_registers=1,
                                  prefetch_rows=True)),
    B("bwd persistent fused d64 causal", b=2, t=2048, s=2048, n=8, k=8,
      causal=True, config=MosaicBackwardConfig(
          persistent=True, fused=True, block_q_dkv=128, block_kv_dq=128)),
    B("bwd persistent fused d64 dropout", b=2, t=1024, s=1024, n=8, k=8,
      dropout=0.1, config=MosaicBackwardConfig(
          persistent=True, fused=True, block_q_dkv=128, block_kv_dq=128)),
]


@pytest.fixture
def mosaic_backward_calls(monkeypatch):
  """Counts calls of the Mosaic backward, so that a test fails if the
  dispatcher silently took the Triton backward instead."""
  return _count_calls(monkeypatch, mosaic_backward, "backward")


@pytest.mark.parametrize("case", BACKWARD, ids=str)
def test_backward(case, mosaic_backward_calls):
  check_gradients(case, "mosaic")
  assert mosaic_backward_calls, "the Mosaic backward did not run"


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_BACKWARD, ids=str)
def test_backward_large(case, mosaic_backward_calls):
  if INTERPRET:
    pytest.skip("GPU-sized case: minutes in interpret mode; run on the GPU "
                "with -m slow")
  check_gradients(case, "mosaic")
  assert mosaic_backward_calls, "the Mosaic backward did not run"


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_backward_takes_precomputed_delta(rate):
  """``delta=`` (the ring's backward passes it, out=None) gives the bits of
  the default backward; dropout's (1 - rate) and the padding apply to it."""
  check_backward_takes_delta(mosaic_backward.backward, "mosaic",
                             jnp.bfloat16, rate)


def test_backward_deterministic_and_zero_on_fully_masked_rows():
  """Two runs give identical bits; rows that see no key (query length 0 and
  a dense-mask row with no True) get dq = 0 and leave no NaN anywhere."""
  c = M("bwd determinism", b=2, t=130, s=200, n=2, k=1, causal=True,
        q_lengths=(130, 0), dense_mask="full_empty_row")
  _, first = check_gradients(c, "mosaic", seed=5)
  _, second = check_gradients(c, "mosaic", seed=5)
  for a, b in zip(first, second):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  dq = np.asarray(first[0], np.float32)
  assert (dq[1] == 0).all() and (dq[0, 3] == 0).all()


@pytest.mark.slow
def test_fused_fixed_point_backward_is_deterministic():
  """The fused kernel's fixed-point dQ adds land in any order, yet two runs
  give identical bits; fully masked rows get dq = 0."""
  if INTERPRET:
    pytest.skip("TMA reduce-add: GPU only")
  for h, cfg in ((128, MosaicBackwardConfig(fused=True)),
                 (64, MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                           fused=True))):
    c = B("fused determinism", b=2, t=1024, s=1024, n=4, k=2, h=h,
          q_lengths=(1024, 0), config=cfg)
    _, first = check_gradients(c, "mosaic", seed=5)
    _, second = check_gradients(c, "mosaic", seed=5)
    for a, b in zip(first, second):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (np.asarray(first[0], np.float32)[1] == 0).all()


def _dq_partials(seed, b, t, s, n, kh, h, q_scale, do_scale):
  """The fused kernel's dQ partials (dS K over each 128 keys, Alg. 2 line
  15) of random inputs, [B, N, T, S / 128, H], and their
  ``fixed_point_scale`` [B, N, T]."""
  keys = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(keys[0], (b, t, n, h), jnp.float32) * q_scale
  do = jax.random.normal(keys[1], (b, t, n, h), jnp.float32) * do_scale
  k, v = (jax.random.normal(x, (b, s, kh, h), jnp.float32) for x in keys[2:])
  kr, vr = (jnp.repeat(x, n // kh, axis=2) for x in (k, v))
  p = jax.nn.softmax(jnp.einsum("btnh,bsnh->bnts", q, kr), axis=-1)
  dp = jnp.einsum("btnh,bsnh->bnts", do, vr)
  delta = jnp.sum(p * dp, -1)  # rowsum(dO * O)
  ds = (p * (dp - delta[..., None])).reshape(b, n, t, s // 128, 128)
  partials = jnp.einsum("bntjc,bjcnh->bntjh", ds,
                        kr.reshape(b, s // 128, 128, n, h))
  return partials, mosaic_backward.fixed_point_scale(do, delta, k, v, n // kh)


def test_fixed_point_words_are_exact_and_order_free():
  """``to_fixed`` words of the partial sums of dQ = dS K (one partial per
  128 keys, as the fused kernel adds them) stay within the bound of
  ``fixed_point_scale``, sum to the same bits in any order, and give back
  the f32 sum."""
  partials, f = _dq_partials(3, b=1, t=64, s=1024, n=4, kh=2, h=64,
                             q_scale=3.0, do_scale=3.0)
  scaled = partials * f[..., None, None]
  assert float(jnp.max(jnp.abs(scaled))) < 2.0 ** 30
  assert float(jnp.max(jnp.abs(scaled))) > 2.0 ** 16  # bits not wasted
  words = mosaic_backward.to_fixed(partials, f[..., None, None])
  np.testing.assert_array_equal(  # each word is its partial, truncated
      words, jnp.trunc(scaled).astype(jnp.int32))
  order = np.random.default_rng(0).permutation(partials.shape[3])
  sums = words.sum(3), words[:, :, :, order].sum(3)
  np.testing.assert_array_equal(np.asarray(sums[0]), np.asarray(sums[1]))
  dq = mosaic_backward.from_fixed(sums[0], f[..., None])
  np.testing.assert_allclose(dq, partials.sum(3), rtol=1e-5,
                             atol=1e-6 * float(jnp.max(jnp.abs(dq))))


def test_fixed_point_precision_on_long_diffuse_rows():
  """Where attention is diffuse the bound of ``fixed_point_scale`` is loose
  and dQ uses few of the word's 30 bits: at S = 128k (1024 partials of 128
  keys, q scaled by 0.1) dQ's relative L2 error must stay below bf16's
  rounding of dQ (here 1.8e-3 against 7.1e-4, 2026-11-23)."""
  partials, f = _dq_partials(1, b=1, t=8, s=131072, n=1, kh=1, h=64,
                             q_scale=0.1, do_scale=1.0)
  words = mosaic_backward.to_fixed(partials, f[..., None, None])
  dq = mosaic_backward.from_fixed(words.sum(3), f[..., None])
  ref = partials.sum(3)
  err = float(jnp.linalg.norm(dq - ref) / jnp.linalg.norm(ref))
  bf16 = float(jnp.linalg.norm(ref.astype(jnp.bfloat16).astype(jnp.float32)
                               - ref) / jnp.linalg.norm(ref))
  assert err < 0.5 * bf16, (err, bf16)


def test_backward_head_dim_256_needs_split_head_dim():
  q = jnp.zeros((1, 128, 1, 256), jnp.bfloat16)
  mosaic_backward.check_supported(_params(), q, q, q)  # the default splits
  no_split = MosaicConfig(block_kv=64, backward=MosaicBackwardConfig())
  with pytest.raises(NotImplementedError, match="split_head_dim=True"):
    mosaic_backward.check_supported(_params(config=no_split), q, q, q)


def test_persistent_backward_takes_two_kv_sets_where_they_fit():
  """Two K / V sets (the next item's loaded during this one) for the d64 and
  d128 defaults, dropout's key ring included in the budget; one with
  split_head_dim, without ``persistent``, or in the d64 fused kernel with
  the row ring (its 2 KiB leave no room: the form runs 177-178 timed)."""
  for h, causal, dropout in itertools.product((64, 128), (False, True),
                                              (False, True)):
    cfg = MosaicBackwardConfig.default(h, causal, dropout)
    cfg = dataclasses.replace(  # (d128: the row ring read ahead is not
        # offered persistent)
        cfg, persistent=True, row_ring=cfg.row_ring and not cfg.prefetch_rows)
    want = 1 if h == 64 and cfg.row_ring else 2
    assert cfg.kv_buffers(h) == want, (h, causal, dropout, cfg)
    keys = cfg.num_stages * 2 * cfg.block_q_dkv * 4
    assert cfg.smem_bytes(h) + keys <= 227 * 1024, (h, cfg)
  split = dataclasses.replace(MosaicBackwardConfig.default(256, True),
                              persistent=True)
  assert split.kv_buffers(256) == 1
  assert dataclasses.replace(MosaicBackwardConfig.default(64, True),
                             persistent=False).kv_buffers(64) == 1
  # d128 fused does not fit a second set: one, within the budget
  fused = MosaicBackwardConfig(fused=True, persistent=True)
  assert fused.kv_buffers(128) == 1 and fused.smem_bytes(128) <= 227 * 1024


def test_fused_backward_smem_counts_no_dq_kernel():
  """The fused kernel is the only one: the dQ kernel's K / V ring (128-key
  steps in the d128 default) must not count, or check_supported sends the
  fused config to the triton backward (runs 187 and 201 timed that)."""
  q = jnp.zeros((1, 128, 1, 128), jnp.bfloat16)
  for causal, deterministic in itertools.product((False, True), (False, True)):
    cfg = dataclasses.replace(
        MosaicBackwardConfig.default(128, causal), fused=True,
        deterministic=deterministic, prefetch_rows=False, row_ring=True)
    assert cfg.block_kv_dq == 128 and cfg.smem_bytes(128) <= 227 * 1024
    params = _params(config=MosaicConfig(backward=cfg), is_causal=causal)
    mosaic_backward.check_supported(params, q, q, q)
  two = MosaicBackwardConfig.default(128, False)  # both kernels counted
  dq_ring = 2 * (2 * 64 + 2 * 128) * 128 * 2
  assert two.smem_bytes(128) == dq_ring + 1024


def test_bad_backward_config():
  with pytest.raises(ValueError, match="block_kv_dkv"):
    MosaicBackwardConfig(block_kv_dkv=128)
  with pytest.raises(ValueError, match="block_q_dkv"):
    MosaicBackwardConfig(block_q_dkv=96)
  with pytest.raises(ValueError, match="num_stages"):
    MosaicBackwardConfig(num_stages=1)
  with pytest.raises(ValueError, match="split_head_dim"):
    MosaicBackwardConfig(split_head_dim=True, deterministic=False)
  with pytest.raises(ValueError, match="num_stages=3 must be 2"):
    MosaicBackwardConfig(num_stages=3, deterministic=False)
  with pytest.raises(ValueError, match="num_stages=3 must be 2"):
    MosaicBackwardConfig(num_stages=3, fused=True)
  with pytest.raises(ValueError, match="needs fused=False"):
    MosaicBackwardConfig(split_head_dim=True, fused=True)
  with pytest.raises(ValueError, match="consumers=4"):
    MosaicBackwardConfig(consumers=4)
  for bad in (dict(fused=True), dict(deterministic=False),
              dict(split_head_dim=True)):
    with pytest.raises(ValueError, match="prefetch_rows needs"):
      MosaicBackwardConfig(prefetch_rows=True, **bad)
  with pytest.raises(ValueError, match="row_ring=True with prefetch_rows=True"
                     " needs persistent=False"):
    MosaicBackwardConfig(row_ring=True, prefetch_rows=True, persistent=True)
  assert MosaicBackwardConfig(row_ring=True, prefetch_rows=True,
                              block_q_dkv=64).row_ring_shape == (3, 2, 64)
  for bad in (dict(consumers=3, fused=True), dict(dq_consumers=3,
              deterministic=False), dict(dq_consumers=3, split_head_dim=True)):
    with pytest.raises(ValueError, match="consumers=3 needs"):
      MosaicBackwardConfig(**bad)
  with pytest.raises(ValueError, match=r"num_stages=5 must be an int in \[2, 4\]"):
    MosaicBackwardConfig(dq_consumers=3, num_stages=5)
  three = MosaicBackwardConfig(dq_consumers=3)
  assert (three.consumers, three.dq_kernel().consumers) == (2, 3)
  assert MosaicBackwardConfig(consumers=3).dq_kernel().consumers == 3
  for h in (64, 128, 256):
    for causal in (False, True):
      for dropout in (False, True):
        cfg = MosaicBackwardConfig.default(h, causal, dropout)
        assert cfg.smem_bytes(h) <= 227 * 1024, (h, causal, cfg)
  # d64: the fused kernel, but two kernels with dropout (its row and column
  # keys spill beside the fused kernel's tiles)
  assert MosaicBackwardConfig.default(64, False).fused
  assert not MosaicBackwardConfig.default(64, False, dropout=True).fused
  # ... with 128-row query steps (H200 2026-11-30, backward with dropout 0.1
  # +1 to +8% over 64-row steps, causal the most)
  for causal in (False, True):
    assert MosaicBackwardConfig.default(64, causal, True).block_q_dkv == 128
  # the rows through the ring: without dropout (runs 175, 177; d128 read a
  # step ahead, run 242); d64 without dropout persistent (runs 177-178)
  defaults = [MosaicBackwardConfig.default(h, c, d) for h in (64, 128, 256)
              for c in (False, True) for d in (False, True)]
  assert [cfg.row_ring for cfg in defaults] == [True, False] * 6
  assert [cfg.prefetch_rows for cfg in defaults] == \
      [False] * 4 + [True, False] * 2 + [False] * 4
  assert [cfg.persistent for cfg in defaults] == [True, False] * 2 + \
      [False] * 8


BACKWARD_LOWERINGS = [  # (head dim, causal, backward config, extra masking)
    *[(h, c, None, None) for h in (64, 128) for c in (False, True)],
    (64, True, MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                    num_stages=3), None),
    (128, True, None, "segments"),
    (128, False, None, "dense mask"),
    (64, True, None, "soft-cap"),
    (128, False, None, "soft-cap"),
    (64, True, MosaicBackwardConfig(block_q_dkv=128, deterministic=False),
     None),
    (128, False, MosaicBackwardConfig(deterministic=False), "segments"),
    (128, True, MosaicBackwardConfig(deterministic=False), "alibi"),
    (256, False, None, None),
    (256, True, None, "segments"),
    (128, True, MosaicBackwardConfig(split_head_dim=True), "dense mask"),
    (128, True, None, "alibi"),
    (128, False, None, "alibi"),
    (256, False, None, "alibi"),
    (256, True, None, "alibi"),
    (64, False, None, "alibi soft-cap"),
    (128, False, MosaicBackwardConfig(deterministic=False), "alibi"),
    (128, True, None, "dropout"),
    (64, False, MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                     fused=True), "dropout alibi"),
    (64, False, None, "dropout alibi"),  # d64's dropout default: two kernels
    # the d64 default's dK/dV query vector by FFMA (block_q_dkv 128)
    *[(64, c, MosaicBackwardConfig(block_q_dkv=128, block_kv_dq=128,
                                   fused=True, row_ring=True, persistent=True,
                                   alibi_fma_queries=True), "alibi")
      for c in (False, True)],
    (256, True, None, "dropout"),  # split_head_dim
    (64, True, MosaicBackwardConfig(block_q_dkv=128, deterministic=False),
     "dropout"),
    (128, False, MosaicBackwardConfig(dq_rows_in_registers=2), None),
    (128, True, MosaicBackwardConfig(dq_rows_in_registers=1), "dropout"),
    (64, True, MosaicBackwardConfig(dq_rows_in_registers=2, block_kv_dq=128),
     "alibi soft-cap"),
    (128, False, MosaicBackwardConfig(stagger_consumers=True, num_stages=3),
     None),
    (128, True, MosaicBackwardConfig(stagger_consumers=True, dq_consumers=3),
     "dropout"),
    (64, True, MosaicBackwardConfig(stagger_consumers=True, fused=True,
                                    block_q_dkv=128, block_kv_dq=128), None),
    (128, False, MosaicBackwardConfig(stagger_consumers=True,
                                      deterministic=False), "alibi"),
    (128, True, MosaicBackwardConfig(persistent=True, stagger_consumers=True,
                                     dq_rows_in_registers=1), None),
    (64, True, MosaicBackwardConfig(persistent=True, fused=True,
                                    block_q_dkv=128, block_kv_dq=128),
     "dropout"),
    (256, False, MosaicBackwardConfig(persistent=True, split_head_dim=True),
     "alibi"),
    (128, True, MosaicBackwardConfig(prefetch_rows=True, persistent=True,
                                     stagger_consumers=True), "segments"),
    (128, False, MosaicBackwardConfig(prefetch_rows=True, row_ring=True,
                                      stagger_consumers=True,
                                      dkdv_registers=240), "dropout"),
    (64, True, MosaicBackwardConfig(row_ring=True, persistent=True,
                                    fused=True, block_q_dkv=128,
                                    block_kv_dq=128), "dropout"),
]


@pytest.mark.parametrize("h,causal,config,extra", BACKWARD_LOWERINGS, ids=str)
def test_backward_lowers_for_cuda(monkeypatch, whole_copy_slices, h, causal,
                                  config, extra):
  """The backward's Pallas -> Mosaic GPU lowering on any machine (GQA 4/2),
  no unswizzled copy overhanging its array (T = 1000)."""
  monkeypatch.setattr(mosaic_forward, "check_supported", lambda *a: None)
  b, t = 2, 1000
  arrays, params = _lowering_call(h, causal, MosaicConfig(backward=config),
                                  extra, b, t)
  q = jax.ShapeDtypeStruct((b, t, 4, h), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((b, t, 2, h), jnp.bfloat16)
  lse = jax.ShapeDtypeStruct((b, 4, t), jnp.float32)
  f = jax.jit(lambda q, k, v, o, lse, do: mosaic_backward.backward(
      q, k, v, arrays, o, lse, do, params))
  f.trace(q, kv, kv, q, lse, q).lower(lowering_platforms=("cuda",))
  assert whole_copy_slices.copies, "no copy recorded"
  assert not whole_copy_slices.unclipped()


BIAS_BACKWARD_LOWERINGS = [  # (head dim, causal, config, extra, dbias)
    (64, True, None, "bias", True),  # d64: two kernels, persistent
    (64, False, None, "bias", False),  # no dbias output
    (128, False, None, "bias", True),  # row ring read ahead, 240 registers
    (128, True, None, "bias", True),
    (128, True, None, "bias dropout alibi", True),
    (128, False, None, "bias soft-cap", True),  # added to the logits
    (64, False, MosaicBackwardConfig(consumers=3), "bias", True),
    (128, True, MosaicBackwardConfig(persistent=True, stagger_consumers=True,
                                     dq_rows_in_registers=1), "bias", True),
]


@pytest.mark.parametrize("h,causal,config,extra,dbias",
                         BIAS_BACKWARD_LOWERINGS, ids=str)
def test_backward_with_bias_lowers_for_cuda(monkeypatch, whole_copy_slices,
                                            h, causal, config, extra, dbias):
  """The backward with a [1, N, T, S] bias (and dbias) lowers for CUDA on
  any machine (GQA 4/2): the transposed bias loads of the dK/dV kernel
  (``ldmatrix.trans``), the dQ kernel's dbias TMA stores."""
  monkeypatch.setattr(mosaic_forward, "check_supported", lambda *a: None)
  b, t = 2, 1000
  arrays, params = _lowering_call(h, causal, MosaicConfig(backward=config),
                                  extra, b, t)
  params = dataclasses.replace(params, bias_grad=dbias)
  q = jax.ShapeDtypeStruct((b, t, 4, h), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((b, t, 2, h), jnp.bfloat16)
  lse = jax.ShapeDtypeStruct((b, 4, t), jnp.float32)
  f = jax.jit(lambda q, k, v, o, lse, do: mosaic_backward.backward(
      q, k, v, arrays, o, lse, do, params))
  text = f.trace(q, kv, kv, q, lse, q).lower(
      lowering_platforms=("cuda",)).as_text()
  names = [name for name, _ in mosaic_modules.kernel_modules(text)]
  assert names == ["pallas_flash_mosaic_dkdv_mosaic_gpu",
                   "pallas_flash_mosaic_dq_mosaic_gpu"], names
  assert not whole_copy_slices.unclipped()


def test_public_path_with_bias_lowers_for_cuda(monkeypatch):
  """With a differentiated [1, N, T, S] bf16 bias the default Hopper path
  runs the Mosaic forward, dK/dV and dQ kernels at d64 and d128 (none of
  the Triton ones); at d256 the Triton backward."""
  import types
  from jax._src.pallas.triton import pallas_call_registration as registration
  import pallas_flash as pf
  from tools import first_call
  monkeypatch.setattr(registration, "gpu_info_lib", types.SimpleNamespace(
      get_gpu_info=lambda: types.SimpleNamespace(compute_capability="9.0")))

  def fwd_bwd(q, k, v, bias):
    loss = lambda q, k, v, bias: pf.flash_attention(
        q, k, v, bias=bias, is_causal=True).astype(jnp.float32).sum()
    return jax.grad(loss, (0, 1, 2, 3))(q, k, v, bias)

  for h in (64, 128, 256):
    x = jax.ShapeDtypeStruct((2, 256, 4, h), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((2, 256, 2, h), jnp.bfloat16)
    bias = jax.ShapeDtypeStruct((1, 4, 256, 256), jnp.bfloat16)

    text = first_call.lowered_for_hopper(fwd_bwd, x, kv, kv, bias)[2].as_text()
    mosaic = h <= 128
    for kernel in ("pallas_flash_mosaic_dkdv", "pallas_flash_mosaic_dq"):
      assert (kernel in text) == mosaic, (h, kernel)
    for kernel in ("pallas_flash_bwd_dkdv", "pallas_flash_bwd_dq"):
      assert (kernel in text) != mosaic, (h, kernel)
    assert "pallas_flash_mosaic_fwd" in text


@pytest.mark.parametrize("causal", [False, True], ids=["dense", "causal"])
def test_public_path_lowers_for_cuda(causal):
  """The whole default Hopper path, lowered for CUDA on any machine: dispatch
  (implementation=None), custom_vjp, the custom_partitioning of sharding.py,
  the Mosaic forward and the Mosaic backward (GQA 4/2, d64 (the fused
  kernel), d128 and d256, which takes the split_head_dim backward)."""
  for h in (64, 128, 256):
    text = mosaic_modules.lower_cell(h, causal, 0.0)
    for kernel in ("pallas_flash_mosaic_fwd", "pallas_flash_mosaic_dkdv"):
      assert kernel in text, (h, kernel)
    # d64: one fused kernel (fixed-point dQ adds); else a dQ kernel too
    assert ("pallas_flash_mosaic_dq" in text) == (h != 64), h


def test_equal_kernels_are_traced_once_and_compile_once(monkeypatch):
  """The forward of a jitted forward and of a jitted fwd+bwd, and two
  layers of one shape: the forward kernel is traced once
  (``sharding._traced``) and every copy of it carries one ``kernel_hash``,
  the key of XLA's compile cache (``mosaic/kernel_names.py``), as do the
  two layers' backward kernels."""
  from pallas_flash import flash_attention
  from tools import first_call
  traces = []
  kernel = mosaic_forward._attention_kernel
  monkeypatch.setattr(mosaic_forward, "_attention_kernel",
                      lambda *a, **kw: traces.append(1) or kernel(*a, **kw))
  x = jax.ShapeDtypeStruct((1, 256, 2, 128), jnp.bfloat16)

  def two_layers(q, k, v):
    o = flash_attention(q, k, v, is_causal=True)
    return flash_attention(o, k, v, is_causal=True)

  def fwd_bwd(q, k, v):
    loss = lambda *a: two_layers(*a).astype(jnp.float32).sum()
    return jax.grad(loss, (0, 1, 2))(q, k, v)

  programs = [first_call.kernel_list(first_call.lowered_for_hopper(
      f, x, x, x)[2]) for f in (two_layers, fwd_bwd)]
  hashes = {}
  for k in programs[0] + programs[1]:
    hashes.setdefault(k["name"], set()).add(k["hash"])
  assert len(traces) == 1
  assert {k["name"] for k in programs[0]} == {"fwd"}
  assert sorted(hashes) == ["dkdv", "dq", "fwd"]
  assert all(len(h) == 1 for h in hashes.values()), hashes


def test_equal_kernels_are_lowered_once_per_process(monkeypatch):
  """The forward kernel of a jitted forward is not lowered again inside a
  jitted fwd+bwd (``mosaic/lowering_cache.py``), and the module that
  program gets has the bytes (``kernel_hash``) of a fresh lowering."""
  from jax._src.pallas.mosaic_gpu import lowering

  from pallas_flash import flash_attention
  from pallas_flash.mosaic import lowering_cache
  from tools import first_call
  lowered = []
  lower = lowering.lower_jaxpr_to_module
  monkeypatch.setattr(lowering, "lower_jaxpr_to_module", lambda *a, **kw: (
      lowered.append(a[7].debug_info.func_name) or lower(*a, **kw)))
  x = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.bfloat16)
  fwd = lambda q, k, v: flash_attention(q, k, v, is_causal=True)

  def fwd_bwd(q, k, v, do):
    return jax.vjp(fwd, q, k, v)[1](do)

  def kernels(f, *specs):
    return sorted((k["name"], k["hash"]) for k in first_call.kernel_list(
        first_call.lowered_for_hopper(f, *specs)[2]))

  lowering_cache.clear()
  kernels(fwd, x, x, x)
  cached = kernels(fwd_bwd, x, x, x, x)
  assert lowered == ["pallas_flash_mosaic_fwd", "pallas_flash_mosaic_dkdv"]
  lowering_cache.clear()
  fresh = kernels(lambda *a: fwd_bwd(*a), x, x, x, x)
  assert lowered[2:] == ["pallas_flash_mosaic_fwd", "pallas_flash_mosaic_dkdv"]
  assert cached == fresh and [k for k, _ in fresh] == ["dkdv", "fwd"]


def test_disk_key_describes_functions_by_content():
  """``lowering_cache.disk_key`` tells apart two inline bodies that differ
  only in a value their closures hold (as the dropout threshold in the PTX
  of ``score_tiles._keep_select``), matches equal ones, and gives no key
  for an argument it cannot describe by content."""
  from pallas_flash.mosaic import lowering_cache

  def body_with(t):
    return lambda x: x + t

  def key(*params):
    return lowering_cache.disk_key(None, None, jax.make_jaxpr(
        lambda x: x)(1.0).jaxpr, (), (), params)

  assert key(body_with(3)) == key(body_with(3))
  assert key(body_with(3)) != key(body_with(4))
  assert key(body_with(3)) != key(lambda x: x + 3)  # (another function)
  assert key(np.int32(1)) != key(np.int64(1))
  assert key(object()) is None


def _lower_in_processes(folder, *envs):
  """Lowers a d64 causal fwd+bwd for sm90 in fresh Pythons, one per dict of
  ``envs``, all at once, with the disk tier in ``folder``; -> per process
  (the fresh lowerings, [(kernel, kernel_hash)])."""
  import json
  import os
  import subprocess
  import sys
  script = (
      "import json, jax, jax.numpy as jnp\n"
      "from jax._src.pallas.mosaic_gpu import lowering\n"
      "from tools import first_call\n"
      "from pallas_flash import flash_attention\n"
      "n, lower = [], lowering.lower_jaxpr_to_module\n"
      "lowering.lower_jaxpr_to_module = lambda *a, **k: n.append(1) or "
      "lower(*a, **k)\n"
      "x = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.bfloat16)\n"
      "f = lambda q, k, v, do: jax.vjp(lambda *a: flash_attention(\n"
      "    *a, is_causal=True), q, k, v)[1](do)\n"
      "ks = first_call.kernel_list(first_call.lowered_for_hopper(\n"
      "    f, x, x, x, x)[2])\n"
      "print(json.dumps([len(n), sorted((k['name'], k['hash']) "
      "for k in ks)]))\n")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  procs = [subprocess.Popen(
      [sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      env={**os.environ, "PYTHONPATH": root, "JAX_PLATFORMS": "cpu",
           "PALLAS_FLASH_MODULE_CACHE": str(folder), **env})
      for env in envs or ({},)]
  results = []
  for proc in procs:
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    fresh, kernels = json.loads(out.strip().splitlines()[-1])
    results.append((fresh, [tuple(k) for k in kernels]))
  return results


def test_modules_read_back_in_a_later_process(tmp_path):
  """The disk tier (``lowering_cache``): three processes lowering at once
  (different hash seeds) write the same two files (each lowers what it
  does not find written yet); a later process lowers nothing and gets their
  modules, and so their ``kernel_hash``es; with the tier off, or over
  damaged files, a process lowers afresh, to the same hashes."""
  writers = _lower_in_processes(
      tmp_path, *({"PYTHONHASHSEED": str(i)} for i in range(3)))
  (reader,) = _lower_in_processes(tmp_path, {"PYTHONHASHSEED": "7"})
  (off,) = _lower_in_processes("0")
  assert all(0 <= w[0] <= 2 for w in writers)
  assert sum(w[0] for w in writers) >= 2  # (each kernel lowered somewhere)
  assert reader[0] == 0 and off[0] == 2
  assert all(w[1] == reader[1] == off[1] for w in writers)
  assert [k for k, _ in off[1]] == ["dkdv", "fwd"]
  files = sorted(tmp_path.iterdir())
  assert len(files) == 2  # (no temporary file left behind)
  files[0].write_bytes(files[0].read_bytes()[:-100])  # a cut-off module
  files[1].write_bytes(b"not a module")
  assert _lower_in_processes(tmp_path) == [off]
  assert _lower_in_processes(tmp_path)[0][0] == 0  # rewritten


def test_kernels_compiled_ahead_are_the_programs_kernels(monkeypatch):
  """``mosaic/compile_ahead.py`` hands each distinct kernel of a program to
  a compile worker once, as a one-op program whose custom call carries the
  module bytes and ``kernel_hash`` that the program's own call carries (so
  the compile fills the cache entry the program then reads); the program's
  compile waits for the workers; kernels lowered inside a compile or
  ``suspended()`` are left alone."""
  from jax._src import compiler, xla_bridge
  from jax._src.interpreters import mlir as jax_mlir
  from jaxlib.mlir import ir

  from pallas_flash import flash_attention
  from pallas_flash.mosaic import compile_ahead
  from tools import first_call
  backends = xla_bridge.backends()
  monkeypatch.setattr(xla_bridge, "backends",
                      lambda: {**backends, "cuda": None})
  programs, waited = [], []
  monkeypatch.setattr(compile_ahead, "_compile",
                      lambda program, platform: programs.append(program))
  monkeypatch.setattr(compile_ahead, "_started", {})
  suspended = compile_ahead.suspended  # (what the lowering tools enter)
  monkeypatch.setattr(compile_ahead, "suspended", contextlib.nullcontext)
  compile_ahead.install()
  assert getattr(compiler.backend_compile_and_load, "pallas_flash_ahead")
  x = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.bfloat16)
  fwd = lambda q, k, v: flash_attention(q, k, v, is_causal=True)

  def fwd_bwd(q, k, v, do):
    return jax.vjp(fwd, q, k, v)[1](do)

  lowered = first_call.lowered_for_hopper(fwd_bwd, x, x, x, x)[2]
  first_call.lowered_for_hopper(lambda *a: fwd_bwd(*a), x, x, x, x)
  compile_ahead.install()  # (idempotent: the wrappers are not wrapped again)
  monkeypatch.setattr(compile_ahead, "wait", lambda: waited.append(1))
  jax.jit(lambda a: a * 3.0 + 0.5)(jnp.float32(2))  # a compile (CPU) waits
  assert waited
  calls = mosaic_modules.kernel_calls(lowered.as_text())
  ahead = []
  with jax_mlir.make_ir_context() as ctx:
    ctx.allow_unregistered_dialects = True
    for program in programs:
      text = str(ir.Module.parse(program))
      assert text.count("stablehlo.custom_call") == 1
      ahead += mosaic_modules.kernel_calls(text)
  assert len(calls) == len(programs) == 2  # fwd, dkdv (d64: fused)
  assert ({(c["kernel_hash"], c["raw"]) for c in calls}
          == {(c["kernel_hash"], c["raw"]) for c in ahead})
  # inside the lowering tools (``suspended``) and inside a compile (SPMD
  # partitioning's callback): left alone
  monkeypatch.setattr(compile_ahead, "_started", {})
  monkeypatch.setattr(compile_ahead, "suspended", suspended)
  first_call.lowered_for_hopper(lambda *a: fwd_bwd(*a), x, x, x, x)
  monkeypatch.setattr(compile_ahead, "suspended", contextlib.nullcontext)
  monkeypatch.setattr(compile_ahead._thread, "depth", 1, raising=False)
  first_call.lowered_for_hopper(lambda *a: fwd_bwd(*a), x, x, x, x)
  assert len(programs) == 2


def test_public_path_with_dropout_lowers_for_cuda():
  """With dropout the default Hopper path stays on the Mosaic kernels (the
  forward, the dK/dV and dQ kernels at d64 and d128: two kernels at d64
  too), none of the Triton ones."""
  for h in (64, 128):
    text = mosaic_modules.lower_cell(h, True, 0.1)
    for kernel in ("pallas_flash_mosaic_fwd", "pallas_flash_mosaic_dkdv",
                   "pallas_flash_mosaic_dq"):
      assert kernel in text, (h, kernel)
    for kernel in ("pallas_flash_fwd", "pallas_flash_bwd_dkdv",
                   "pallas_flash_bwd_dq"):
      assert kernel not in text, (h, kernel)


@pytest.mark.parametrize("h", (64, 128))
def test_bias_not_padded_at_aligned_lengths(monkeypatch, h):
  """At power-of-two lengths the default Hopper fwd+bwd with a [1, N, T, S]
  bias takes tiles that divide T and S, and at 1088 (17 x 64: no whole
  number of the kernels' tiles) the kernels read it in place
  (``BiasRing.in_place``), so neither the forward nor the backward pads
  (copies) the bias in XLA.  The d64 non-causal entry at
  16k keys has 192-row tiles: with them the bias was padded to T = 16512
  on every call, the whole bias read and written again (2.2x slower
  forward; ``MosaicConfig.with_bias``)."""
  import pallas_flash as pf
  from tools import first_call
  monkeypatch.setattr(mosaic_forward, "check_supported", lambda *a: None)

  for causal, t in itertools.product((False, True), (4096, 16384, 1088)):
    def fwd_bwd(q, k, v, bias):
      loss = lambda q, k, v, bias: pf.flash_attention(
          q, k, v, bias=bias, is_causal=causal).astype(jnp.float32).sum()
      return jax.grad(loss, (0, 1, 2, 3))(q, k, v, bias)

    x = jax.ShapeDtypeStruct((1, t, 2, h), jnp.bfloat16)
    bias = jax.ShapeDtypeStruct((1, 2, t, t), jnp.bfloat16)
    text = first_call.lowered_for_hopper(fwd_bwd, x, x, x, bias)[2].as_text()
    assert "pallas_flash_mosaic_dq" in text, (h, causal, t)
    pads = [line for line in text.splitlines()
            if "stablehlo.pad" in line and f"1x2x{t}x{t}xbf16" in line]
    assert not pads, (h, causal, t, pads[0][:200])


def test_forward_copies_no_rows_when_t_is_whole_8_row_tiles(monkeypatch):
  """With T a multiple of 8 the Mosaic forward takes q and out at T rows
  (TMA reads the rows past T as zeros and drops their stores): no pad of q
  and no slice of out in XLA, also where T is no whole number of CTA tiles
  (d64 / d128 non-causal at 16k keys: 192-row tiles; T = 1000).  LSE keeps
  whole CTA tiles (16512 rows there): its plain bulk stores would run on
  into the next head's rows (natively only; forward.forward's comment)."""
  import pallas_flash as pf
  from tools import first_call
  monkeypatch.setattr(mosaic_forward, "check_supported", lambda *a: None)
  for h, t, s in ((64, 16384, 16384), (128, 16384, 16384), (128, 1000, 1024)):
    x = jax.ShapeDtypeStruct((1, t, 2, h), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, s, 2, h), jnp.bfloat16)
    text = first_call.lowered_for_hopper(
        lambda q, k, v: pf.flash_attention(q, k, v), x, kv, kv)[2].as_text()
    assert "pallas_flash_mosaic_fwd" in text, (h, t)
    copies = [line for line in text.splitlines()
              if ("stablehlo.pad" in line or "stablehlo.slice" in line)
              and f"1x{t}x2x{h}xbf16" in line]
    assert not copies, (h, t, copies[0][:200])
    if t == 16384:
      assert "1x2x16512xf32" in text, h  # the kernel's LSE, whole tiles
