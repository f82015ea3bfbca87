"""Tile shapes and launch parameters of the Pallas-Triton kernels.

A frozen, validated config; ``TritonConfig.default(head_dim, ...)`` is the
per-device heuristic.  Every default constant is backed by a measurement:
the block-size sweeps of ``python -m tools.triton_sweep`` (H200, JAX 0.11.2;
logs in ``benchmarks/results/h200_2026-11-21_triton_vs_mha/``, summary in
docs/design.md, "Pallas-Triton kernels").
"""
from __future__ import annotations

import dataclasses


def _pow2(x: int) -> bool:
  return x >= 16 and (x & (x - 1)) == 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class TritonConfig:
  """Blocks, warps and pipeline stages of the three Pallas-Triton kernels.

  Attributes:
    block_q, block_k: forward tile [block_q, block_k] of the score matrix.
    num_warps, num_stages: forward launch parameters.
    block_q_dkv, block_k_dkv: dK/dV kernel tile (K/V block held, Q streamed).
    block_q_dq, block_k_dq: dQ kernel tile (Q block held, K/V streamed).
    num_warps_bwd, num_stages_bwd: backward launch parameters.
  """

  block_q: int = 64
  block_k: int = 64
  num_warps: int = 4
  num_stages: int = 3
  block_q_dkv: int = 64
  block_k_dkv: int = 64
  block_q_dq: int = 64
  block_k_dq: int = 64
  num_warps_bwd: int = 4
  num_stages_bwd: int = 2

  def __post_init__(self):
    for f in dataclasses.fields(self):
      value = getattr(self, f.name)
      if f.name.startswith("block") and not _pow2(value):
        raise ValueError(f"{f.name}={value} must be a power of two >= 16")
      if f.name.startswith("num_") and not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{f.name}={value} must be a positive int")

  @classmethod
  def default(cls, head_dim: int) -> "TritonConfig":
    """Per-head-dim default.

    Measured on an H200, JAX 0.11.2, bf16, B*S = 16384, S = 4096, mean of
    causal and non-causal (benchmarks/results/h200_2026-11-21_triton_vs_mha/
    triton_sweep_*.log):
    d64 forward (64, 64, 4 warps, 3 stages) 325 TFLOP/s vs 285-313 for
    (64,64,4,4), (64,128,4,3), (128,64,4,3), (64,32,4,3); d128 forward
    (128, 64, 8, 3) 368 vs 297-356 for (128,64,4,3), (128,128,8,2),
    (128,64,8,2), (128,32,4,3) (sweep v3);
    backward 64x64 tiles, 4 warps, 2 stages 287 (d64) / 343 (d128) TFLOP/s vs
    123-295 for 32-row tiles, 3 stages or 8 warps (register spills).  d > 128
    halves the tiles to stay inside the 227 KiB of shared memory.
    """
    if head_dim <= 64:
      return cls(block_q=64, block_k=64, num_warps=4, num_stages=3,
                 block_q_dkv=64, block_k_dkv=64, block_q_dq=64, block_k_dq=64,
                 num_warps_bwd=4, num_stages_bwd=2)
    if head_dim <= 128:
      return cls(block_q=128, block_k=64, num_warps=8, num_stages=3,
                 block_q_dkv=64, block_k_dkv=64, block_q_dq=64, block_k_dq=64,
                 num_warps_bwd=4, num_stages_bwd=2)
    return cls(block_q=64, block_k=32, num_warps=4, num_stages=2,
               block_q_dkv=32, block_k_dkv=32, block_q_dq=32, block_k_dq=32,
               num_warps_bwd=4, num_stages_bwd=2)

  def fit(self, t: int, s: int) -> "TritonConfig":
    """Shrinks blocks for short sequences (never below 16)."""
    def cap(block, n):
      return max(16, min(block, 1 << max(n - 1, 1).bit_length()))
    return dataclasses.replace(
        self, block_q=cap(self.block_q, t), block_k=cap(self.block_k, s),
        block_q_dkv=cap(self.block_q_dkv, t), block_k_dkv=cap(self.block_k_dkv, s),
        block_q_dq=cap(self.block_q_dq, t), block_k_dq=cap(self.block_k_dq, s))
