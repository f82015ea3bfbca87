"""The implementations the benchmark times: ours and the peers, each optional.

Every entry is an ``Impl`` whose ``build(workload, inputs)`` returns
``(fn, aux)`` with ``fn(q, k, v, aux) -> out`` ([B, T, N, H]) and ``aux`` a
dict of the extra arrays (mask, segment ids, lengths) passed through ``jit``
as arguments (never baked in as constants).  ``build`` raises
``NotImplementedError`` with the reason when the implementation cannot take
the workload (or is not installed / not on this device); the harness then
reports "did not run: <reason>".  Anything raised later (compile, run) is
reported the same way.

Score features (``--features``: ALiBi, dropout, a [1, N, T, S] bias): ours
take all three; cuDNN, XLA and tokamax take the bias (differentiated: dbias)
and raise ``NotImplementedError`` for ALiBi slopes and dropout, which their
signatures lack; the other peers take none.

Peers, with their signatures read from the installed sources:

* ``cudnn`` / ``xla``: ``jax.nn.dot_product_attention(q, k, v, bias, mask, *,
  scale, is_causal, query_seq_lengths, key_value_seq_lengths,
  local_window_size, implementation)``.  No segment ids: packed documents are
  given to it as a dense ``[B, 1, T, S]`` boolean mask.
* ``cudnn-det``: the same cuDNN call compiled with
  ``xla_gpu_deterministic_ops=True``.  XLA builds cuDNN's flash-attention
  backward with ``force_deterministic = RequireDeterminism(config)``
  (``cudnn_custom_call_compiler.cc``), which is false by default: the
  ``cudnn`` row's backward may change bits run to run (its dQ reduction
  order), while ours is deterministic by default.  This row is the peer
  under the same guarantee.
* ``jax-mha``: ``jax.experimental.pallas.ops.gpu.attention.mha(q, k, v,
  segment_ids, sm_scale=1.0, causal=False, block_sizes=BlockSizes.get_default(),
  ...)``, [B, T, N, H]; sm_scale is passed explicitly as 1/sqrt(H) (its
  default is 1.0); T and S must be multiples of its block (128); K must equal
  N (its BlockSpecs index K/V by the query head); no lengths.
* ``jax-mgpu``: ``jax.experimental.pallas.ops.gpu.attention_mgpu.attention(q,
  k, v, config: TuningConfig, save_residuals=False)``, Hopper only, H a
  multiple of 64, f16/bf16, GQA, causal forward but no causal backward, no
  masks other than causal.  It takes **no scale**: it computes
  ``softmax(q k^T) v``, so we give it the same q and check it against the
  reference with scale 1 (the FLOPs are the same).  Config: the one from its
  own tests (block_q 64, block_kv 128 (64 for H=256), 2 stages; backward
  blocks dq 64x128, dkv 128x64, 2 compute warpgroups for H <= 128).
* ``cudnn-fp8``: cuDNN's fp8 attention, a private JAX entry:
  ``jax._src.cudnn.fused_attention_stablehlo.dot_product_attention(q, k, v,
  bias=None, mask=None, q_seqlen=None, kv_seqlen=None, q_offsets=None,
  kv_offsets=None, fp8_params=None, *, scale=1.0, mask_type=NO_MASK,
  seed=42, dropout_rate=0., qkv_layout="BTNH", sliding_window_length=None,
  use_fp8=False, return_residual=False) -> (out, amax_s, amax_o)``;
  fp8_params: a dict of ``fp8_params_keys`` -> float32 [1, 1, 1, 1] (unit
  scales here, as in issue 49's table); NO_MASK or CAUSAL only, no lengths;
  its out is e4m3 (ours bf16).  fp8 cells only.
* ``tokamax-mosaic`` / ``tokamax-triton``: ``tokamax.dot_product_attention(q,
  k, v, bias, mask, *, scale, is_causal, query_seq_lengths,
  key_value_seq_lengths, local_window_size, logits_soft_cap, precision,
  implementation, q_sharding)`` (tokamax 0.0.17).  No segment ids: packed
  documents go in as a dense mask.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from typing import Any, Callable

import jax

from benchmarks import workloads as wl


def on_gpu() -> bool:
  return jax.default_backend() == "gpu"


def is_hopper() -> bool:
  try:
    return str(getattr(jax.devices()[0], "compute_capability", "")).startswith("9")
  except Exception:  # pragma: no cover
    return False


@dataclasses.dataclass(frozen=True)
class Impl:
  name: str
  ours: bool
  build: Callable[[wl.Workload, wl.Inputs], tuple[Callable, dict]]
  # Logit scale the implementation applies (what the reference must use).
  ref_scale: Callable[[wl.Workload], float] = lambda w: 1.0 / math.sqrt(w.head_dim)
  note: str = ""
  # XLA compile options of its jitted forward and forward + backward.
  compile_options: dict | None = None


def _aux(x: wl.Inputs, **extra) -> dict[str, Any]:
  return dict(seg=x.segment_ids, ql=x.q_lengths, kl=x.kv_lengths,
              alibi=x.alibi_slopes, drop=x.dropout_rng, bias=x.bias, **extra)


def _refuse_features(w: wl.Workload, takes: tuple[str, ...] = ()):
  """NotImplementedError for a score feature (``wl.FEATURES``) of cell
  ``w`` that the implementation does not take (``takes``: those it does)."""
  has = {"alibi": w.alibi, "dropout": w.dropout > 0, "bias": w.bias}
  missing = [f for f, on in has.items() if on and f not in takes]
  if missing:
    raise NotImplementedError(f"no {' or '.join(missing)} argument")


# ------------------------------------------------------------------ ours


def _ours(backend: str, deterministic: bool = True):
  def build(w: wl.Workload, x: wl.Inputs):
    if backend == "mosaic":
      if not (on_gpu() and is_hopper()):
        raise NotImplementedError("the Mosaic GPU kernel needs a Hopper GPU")
      if importlib.util.find_spec("pallas_flash.mosaic.forward") is None:
        raise NotImplementedError("pallas_flash.mosaic.forward does not exist yet")
    from pallas_flash import flash_attention

    def fn(q, k, v, aux):
      return flash_attention(
          q, k, v, aux["bias"], is_causal=w.causal, implementation=backend,
          query_segment_ids=aux["seg"], query_seq_lengths=aux["ql"],
          key_value_seq_lengths=aux["kl"], deterministic=deterministic,
          alibi_slopes=aux["alibi"], dropout_rate=w.dropout,
          dropout_rng=aux["drop"])
    return fn, _aux(x)
  return build


# ------------------------------------------------------------------ jax.nn


def _jax_nn(implementation: str):
  def build(w: wl.Workload, x: wl.Inputs):
    if implementation == "cudnn" and not on_gpu():
      raise NotImplementedError("cuDNN needs an NVIDIA GPU")
    _refuse_features(w, takes=("bias",))

    def fn(q, k, v, aux):
      return jax.nn.dot_product_attention(
          q, k, v, aux["bias"], mask=aux["mask"], is_causal=w.causal,
          query_seq_lengths=aux["ql"], key_value_seq_lengths=aux["kl"],
          implementation=implementation)
    return fn, _aux(x, mask=wl.dense_mask(x, w.causal))
  return build


# ------------------------------------------------------------------ JAX Pallas ops


def _jax_mha(w: wl.Workload, x: wl.Inputs):
  from jax.experimental.pallas.ops.gpu import attention as pallas_attention
  _refuse_features(w)
  if w.kv_heads != w.heads:
    raise NotImplementedError(f"no GQA: needs num_kv_heads == num_heads, got "
                              f"K={w.kv_heads}, N={w.heads}")
  if x.q_lengths is not None:
    raise NotImplementedError("no sequence lengths (padding)")
  block = pallas_attention.BlockSizes.get_default()
  for b in (block.block_q, block.block_k):
    if w.seqlen % min(b, w.seqlen):
      raise NotImplementedError(f"seqlen {w.seqlen} not a multiple of block {b}")
  sm_scale = 1.0 / math.sqrt(w.head_dim)
  interpret = not on_gpu()

  def fn(q, k, v, aux):
    return pallas_attention.mha(q, k, v, aux["seg"], sm_scale=sm_scale,
                                causal=w.causal, interpret=interpret)
  return fn, _aux(x)


def _mgpu_config(w: wl.Workload):
  from jax.experimental.pallas.ops.gpu import attention_mgpu
  small = w.head_dim <= 128
  return attention_mgpu.TuningConfig(
      block_q=64, block_kv=128 if small else 64, max_concurrent_steps=2,
      causal=w.causal, compute_wgs_bwd=2 if small else 1,
      block_q_dq=64, block_kv_dq=128, block_q_dkv=128, block_kv_dkv=64)


def _jax_mgpu(w: wl.Workload, x: wl.Inputs):
  if not (on_gpu() and is_hopper()):
    raise NotImplementedError("Mosaic GPU FA3 needs a Hopper (sm90) GPU")
  _refuse_features(w)
  if w.kind != "dense":
    raise NotImplementedError("no segment ids, lengths or masks other than causal")
  if w.head_dim % 64:
    raise NotImplementedError(f"head_dim {w.head_dim} not a multiple of 64")
  if w.dtype != "float16":
    # Its dtype check admits bf16, but its SMEM scratch buffers are declared
    # jnp.float16 (attention_mgpu.py, jax 0.11.2), so bf16 fails to lower:
    # "Expected dtypes to match but src had type bfloat16 and dst had type
    # float16" (seen on the H200, 2026-11-21).
    raise NotImplementedError(f"{w.dtype}: only float16 works (its SMEM "
                              "scratch is hard-coded float16)")
  from jax.experimental.pallas.ops.gpu import attention_mgpu
  config = _mgpu_config(w)

  def fn(q, k, v, aux):
    del aux
    return attention_mgpu.attention(q, k, v, config)
  return fn, _aux(x)


def cudnn_fp8(causal: bool, scale: float, s_scale: float = 1.0):
  """``fn(q, k, v, params) -> out`` of cuDNN's fp8 attention and its
  ``params`` (unit descales; P quantized as P * ``s_scale``)."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn
  import jax.numpy as jnp
  one = jnp.ones((1, 1, 1, 1), jnp.float32)
  params = {key: one for key in cudnn.fp8_params_keys}
  params.update(scale_s=one * s_scale, descale_s=one / s_scale)
  mask = cudnn.MaskType.CAUSAL if causal else cudnn.MaskType.NO_MASK

  def fn(q, k, v, params):
    out, _, _ = cudnn.dot_product_attention(
        q, k, v, fp8_params=params, scale=scale, mask_type=mask,
        use_fp8=True)
    return out
  return fn, params


def cudnn_fp8_scaled(params: dict, q_descale, k_descale, v_descale,
                     o_scale=1.0) -> dict:
  """``cudnn_fp8``'s ``params`` for e4m3 inputs with these (scalar)
  descales, O written in e4m3 as O * ``o_scale`` (its real values:
  ``out.astype(float32) / o_scale``)."""
  import jax.numpy as jnp
  one = jnp.ones((1, 1, 1, 1), jnp.float32)
  return {**params, "descale_q": one * q_descale, "descale_k": one * k_descale,
          "descale_v": one * v_descale, "scale_o": one * o_scale,
          "descale_o": one / o_scale}


def _cudnn_fp8(w: wl.Workload, x: wl.Inputs):
  if w.dtype != "float8_e4m3fn":
    raise NotImplementedError("fp8 cells only")
  if not (on_gpu() and is_hopper()):
    raise NotImplementedError("cuDNN fp8 attention needs a Hopper GPU")
  if w.kind != "dense":
    raise NotImplementedError("no segment ids or lengths (NO_MASK / CAUSAL)")
  _refuse_features(w)
  fn, params = cudnn_fp8(w.causal, 1.0 / math.sqrt(w.head_dim))
  return (lambda q, k, v, aux: fn(q, k, v, aux["fp8"])), _aux(x, fp8=params)


# ------------------------------------------------------------------ tokamax


def _tokamax(implementation: str):
  def build(w: wl.Workload, x: wl.Inputs):
    if not on_gpu():
      raise NotImplementedError(f"tokamax {implementation} is benchmarked on GPU only")
    try:
      import tokamax
    except Exception as e:  # ImportError, or a missing dependency inside
      raise NotImplementedError(f"tokamax not importable ({type(e).__name__}: {e})") from e
    _refuse_features(w, takes=("bias",))

    def fn(q, k, v, aux):
      return tokamax.dot_product_attention(
          q, k, v, aux["bias"], mask=aux["mask"], is_causal=w.causal,
          query_seq_lengths=aux["ql"], key_value_seq_lengths=aux["kl"],
          implementation=implementation)
    return fn, _aux(x, mask=wl.dense_mask(x, w.causal))
  return build


def tokamax_version() -> str | None:
  try:
    import tokamax
    return getattr(tokamax, "__version__", "?")
  except Exception:
    return None


IMPLS: dict[str, Impl] = {
    i.name: i for i in (
        Impl("ours-triton", True, _ours("triton"),
             note="pallas_flash.flash_attention(implementation='triton')"),
        Impl("ours-mosaic", True, _ours("mosaic"),
             note="pallas_flash.flash_attention(implementation='mosaic')"),
        Impl("ours-mosaic-nondet", True, _ours("mosaic", deterministic=False),
             note="pallas_flash.flash_attention(implementation='mosaic', "
                  "deterministic=False): dQ added in f32 in any order where "
                  "that is faster"),
        Impl("cudnn", False, _jax_nn("cudnn"),
             note="jax.nn.dot_product_attention(implementation='cudnn')"),
        Impl("cudnn-det", False, _jax_nn("cudnn"),
             compile_options={"xla_gpu_deterministic_ops": True},
             note="jax.nn.dot_product_attention(implementation='cudnn') "
                  "compiled with xla_gpu_deterministic_ops=True (cuDNN's "
                  "deterministic backward)"),
        Impl("cudnn-fp8", False, _cudnn_fp8,
             note="cuDNN fp8 attention (jax._src.cudnn.fused_attention_"
                  "stablehlo.dot_product_attention(use_fp8=True), unit "
                  "scales, e4m3 out)"),
        Impl("xla", False, _jax_nn("xla"),
             note="jax.nn.dot_product_attention(implementation='xla')"),
        Impl("jax-mha", False, _jax_mha,
             note="jax.experimental.pallas.ops.gpu.attention.mha (Pallas-Triton)"),
        Impl("jax-mgpu", False, _jax_mgpu, ref_scale=lambda w: 1.0,
             note="jax.experimental.pallas.ops.gpu.attention_mgpu.attention "
                  "(Mosaic GPU FA3; no scale argument: checked with scale 1)"),
        Impl("tokamax-mosaic", False, _tokamax("mosaic"),
             note="tokamax.dot_product_attention(implementation='mosaic')"),
        Impl("tokamax-triton", False, _tokamax("triton"),
             note="tokamax.dot_product_attention(implementation='triton')"),
    )
}
