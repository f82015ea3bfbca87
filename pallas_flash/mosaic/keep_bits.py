"""The forward's dropout keep bits, drawn by the producer warpgroup.

In the warp-specialised forward (FA3 Sec. 3.1) the producer warpgroup only
issues TMA copies, while each consumer's softmax sits on its critical path
between its own GEMMs.  With dropout a consumer also spent about 2.5 of its
~7 non-tensor instructions per score on ``dropout.keep`` (per pair of scores
an IMAD, a LEA.HI and a HSETP2, then a SEL per score; ``forward._keep_select``).
Here the producer draws the same bits (the same hash, so the same mask as
the reference's and every other kernel's) for each step's score tiles, once
that step's column keys have landed, and packs them into ``block_kv / 64``
32-bit words per consumer thread.  The consumer reads its words from shared
memory and drops P's pairs in their bf16 / f16 form: one PRMT and one AND per
pair of scores, after the conversion P needs anyway.

Layout.  A thread of a WGMMA [64, block_kv] f32 tile holds register (n, h):
rows r + 8h (h = 0, 1) and columns 8n + 2 (lane % 4) + e (e = 0, 1), the
entry e of the register.  The bit of (n, h, e) lies in word n // 8 at

    bit 8b + 7 - (2s + e),   nn = n % 8,  b = 2h + nn % 2,  s = nn // 2.

Row r's bits are in the low half of a word and row r + 8's in the high
half, so one ``set.u32.f16x2`` of a pair's hash word (0xFFFF in each kept
half) ANDed with a constant places both of its bits (``draw_word``).  For
register (n, h) the bits of e = 0 and e = 1 are the top bits of byte b of
W << 2s and of W << 2s + 1, which PRMT's sign-replicate mode spreads over the
low and the high half of a 32-bit mask (``apply_words``).
"""
from __future__ import annotations

import jax.experimental.pallas.mosaic_gpu as plgpu
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.mosaic.gpu import utils as mgpu_utils
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith as arith_dialect
from jaxlib.mlir.dialects import vector as vector_dialect
import jax.numpy as jnp
import numpy as np

_WGMMA = plgpu.Layout.WGMMA
WORD = plgpu.Layout.WG_STRIDED((128,), vec_size=1)  # one int32 per thread
WORD_COLS = 64  # score columns whose bits one word holds (8 n8 blocks)


def bit_of(n: int, h: int, e: int) -> int:
  """Bit of register (n8 block n, row half h, entry e) in word n // 8."""
  nn = n % 8
  b, s = 2 * h + nn % 2, nn // 2
  return 8 * b + 7 - (2 * s + e)


def prmt_selector(n: int, h: int) -> int:
  """PRMT selector that spreads register (n, h)'s two bits: result bytes 0-1
  replicate the top bit of byte b of the first source (W << 2s: entry 0),
  bytes 2-3 that of byte b of the second (W << 2s + 1: entry 1)."""
  b = 2 * h + (n % 8) % 2
  lo, hi = 8 | b, 8 | (4 + b)
  return lo | lo << 4 | hi << 8 | hi << 12


def _ext(reg, e):
  return vector_dialect.extract(reg, [], [e])


def draw_word(row_keys, col_keys, thresh, word: int):
  """Producer: word ``word`` of every thread's keep bits, from the row-key
  pair (additive key, multiplier) and the column keys of that word's 64
  columns, each broadcast to a WGMMA [64, 64] tile.  Per pair of scores a
  multiply-add, the fold (``dropout.fold``), one ``set.u32.f16x2`` and an
  AND / OR into the word (``dropout.keep``'s bits, the layout above)."""
  t, keep_below = thresh
  cmp = "lt" if keep_below else "geu"  # keep iff x < t, or iff not x < t
  r_t, m_t = row_keys

  @plgpu.inline_mgpu(arg_types=(_WGMMA,) * 3,
                     return_type=plgpu.ShapeDtypeStruct((128,), jnp.int32,
                                                        layout=WORD))
  def body(_, r, m, c):
    i32 = ir.IntegerType.get_signless(32)
    first = (0,) * len(r.registers.shape)
    args = [_ext(r.registers[first], 0), _ext(m.registers[first], 0),
            arith_dialect.constant(i32, t | t << 16)]
    lines = [".reg .b32 w, k;", "mov.b32 $0, 0;"]
    for idx in np.ndindex(c.registers.shape):
      if idx[4] != 0:  # the column keys of both row halves are the same
        continue
      n = 8 * word + idx[1]
      for e in (0, 1):
        args.append(_ext(c.registers[idx], e))
        bits = 1 << bit_of(n, 0, e) | 1 << bit_of(n, 1, e)
        lines += [f"mad.lo.u32 w, ${len(args)}, $2, $1;",
                  "mad.hi.u32 w, w, 65536, w;",  # dropout.fold
                  f"set.{cmp}.u32.f16x2 k, w, $3;",
                  f"and.b32 k, k, {bits:#010x};",
                  "or.b32 $0, $0, k;"]
    out = mgpu_utils.inline_ptx("{ " + " ".join(lines) + " }", *args,
                                result_types=i32)
    regs = np.empty((1,), object)
    regs[0] = vector_dialect.from_elements(ir.VectorType.get([1], i32), [out])
    return mgpu.FragmentedArray(_registers=regs, _layout=WORD.to_mgpu(),
                                _is_signed=True)

  return body(r_t, m_t, col_keys)


def apply_words(p, words, dtype):
  """Consumer: P (f32, WGMMA [64, block_kv]) converted to ``dtype`` (bf16 /
  f16) with its dropped entries +0, from the thread's keep-bit ``words``
  (``draw_word``'s, one per 64 columns).  The same bits as converting
  ``where(keep, P, 0)``."""
  cvt = {jnp.dtype(jnp.bfloat16): "bf16x2", jnp.dtype(jnp.float16): "f16x2"}[
      jnp.dtype(dtype)]

  @plgpu.inline_mgpu(arg_types=(_WGMMA,) + (WORD,) * len(words),
                     return_type=plgpu.ShapeDtypeStruct(p.shape, dtype,
                                                        layout=_WGMMA))
  def body(_, x, *ws):
    i32 = ir.IntegerType.get_signless(32)
    elt = ir.BF16Type.get() if cvt == "bf16x2" else ir.F16Type.get()
    shifted = []  # shifted[word][k] = word << k
    for w in ws:
      w0 = _ext(w.registers[0], 0)
      shifted.append([w0] + [arith_dialect.shli(w0, arith_dialect.constant(
          i32, k)) for k in range(1, 8)])
    outs = np.empty(x.registers.shape, object)
    for idx in np.ndindex(x.registers.shape):
      n, h = idx[1], idx[4]
      s = (n % 8) // 2
      a, b = shifted[n // 8][2 * s], shifted[n // 8][2 * s + 1]
      y = mgpu_utils.inline_ptx(
          "{ .reg .b32 x, k; "
          f"cvt.rn.{cvt}.f32 x, $2, $1; "  # (entry 1 high, entry 0 low)
          f"prmt.b32 k, $3, $4, {prmt_selector(n, h):#06x}; "
          "and.b32 $0, x, k; }",
          _ext(x.registers[idx], 0), _ext(x.registers[idx], 1), a, b,
          result_types=i32)
      outs[idx] = vector_dialect.bitcast(
          ir.VectorType.get([2], elt),
          vector_dialect.from_elements(ir.VectorType.get([1], i32), [y]))
    return mgpu.FragmentedArray(_registers=outs, _layout=x.layout,
                                _is_signed=None)

  return body(p, *words)
