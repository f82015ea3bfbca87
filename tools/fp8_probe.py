"""Probe: fp8 (e4m3) wgmma in Pallas Mosaic GPU (JAX 0.11.2), both GEMMs of
attention on one [64, 128] tile: S = Q K^T from shared memory (both operands
K-major), then O = P V with P from registers and V^T [H, bk] in shared memory
(fp8 wgmma takes no transposed operand, so V arrives transposed).

P's registers: the f32 accumulator (WGMMA layout) holds, per thread and
16-column block, columns {2t, 2t+1, 8+2t, 9+2t}; the 8-bit A operand layout
(WGMMA_8BIT) holds {4t .. 4t+3}.  Packing each thread's four values with
two ``cvt.rn.satfinite.e4m3x2.f32`` gives P with its keys permuted within
each 16-key block (``perm_cols``), so V^T's keys are permuted the same way
(no shuffles; FA3 Sec. 3.3 permutes bytes for the same reason).

  python -m tools.fp8_probe            # native on a Hopper GPU, else interpret
  python -m tools.fp8_probe --lower    # lower for CUDA on any machine
"""
import os, sys
os.environ.setdefault("NPROC", "8")
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_cpu_enable_async_dispatch", False)
import jax.experimental.pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.mosaic.gpu import utils as mgpu_utils
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import vector as vector_dialect
F8 = jnp.float8_e4m3fn
WGMMA = plgpu.Layout.WGMMA
interpret = jax.default_backend() != "gpu"

def p_to_fp8(p):
  @plgpu.inline_mgpu(arg_types=(WGMMA,), return_type=plgpu.ShapeDtypeStruct(p.shape, F8, layout=plgpu.Layout.WGMMA_8BIT))
  def body(_, x):
    regs = x.registers
    shape = mgpu.WGMMA_LAYOUT_8BIT.registers_shape(p.shape)
    out = np.empty(shape, object)
    i32 = ir.IntegerType.get_signless(32)
    ext = lambda r, e: vector_dialect.extract(r, [], [e])
    for idx in np.ndindex(shape):
      a = regs[(idx[0], 2 * idx[1], *idx[2:])]
      b = regs[(idx[0], 2 * idx[1] + 1, *idx[2:])]
      w = mgpu_utils.inline_ptx(
          "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; "
          "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; mov.b32 $0, {lo, hi}; }",
          ext(a, 0), ext(a, 1), ext(b, 0), ext(b, 1), result_types=i32)
      out[idx] = vector_dialect.bitcast(ir.VectorType.get([4], ir.Float8E4M3FNType.get()),
                                        vector_dialect.from_elements(ir.VectorType.get([1], i32), [w]))
    return mgpu.FragmentedArray(_registers=out, _layout=mgpu.WGMMA_LAYOUT_8BIT, _is_signed=None)
  return body(p)

def perm_cols(p):  # the column order p_to_fp8's registers give
  bq, bk = p.shape
  return p.reshape(bq, bk // 16, 2, 4, 2).transpose(0, 1, 3, 2, 4).reshape(bq, bk)

M, BK, H = 64, 128, 128
tiled = (plgpu.TilingTransform((8, 128)), plgpu.SwizzleTransform(128))
def kernel(q_ref, k_ref, vt_ref, o_ref, s_ref_out):
  def body(q_smem, k_smem, vt_smem, bar):
    plgpu.copy_gmem_to_smem(q_ref, q_smem, bar.at[0])
    plgpu.copy_gmem_to_smem(k_ref, k_smem, bar.at[0])
    plgpu.copy_gmem_to_smem(vt_ref, vt_smem, bar.at[0])
    plgpu.barrier_wait(bar.at[0])
    def qk(acc):
      plgpu.wgmma(acc, q_smem, k_smem.T)
      return acc[...]
    s = pl.run_scoped(qk, plgpu.ACC((M, BK), jnp.float32))
    s_ref_out[...] = s
    p = jnp.exp2(s * 0.05 - 1.0)
    if interpret:
      o = jnp.dot(perm_cols(p).astype(F8), vt_smem[...].T, preferred_element_type=jnp.float32)
    else:
      p8 = p_to_fp8(p)
      def pv(acc_ref):
        plgpu.wgmma(acc_ref, p8, vt_smem.T)
      o = pl.run_state(pv)(plgpu.ACC.init(plgpu.layout_cast(jnp.zeros((M, H), jnp.float32), WGMMA)))
    o_ref[...] = o
  pl.run_scoped(lambda *a: body(*a[0], a[1]),
                (plgpu.SMEM((M, H), F8, transforms=tiled), plgpu.SMEM((BK, H), F8, transforms=tiled),
                 plgpu.SMEM((H, BK), F8, transforms=tiled)), plgpu.Barrier(num_arrivals=3, num_barriers=1))

def run(q, k, vt):
  return plgpu.kernel(kernel, out_type=(jax.ShapeDtypeStruct((M, H), jnp.float32), jax.ShapeDtypeStruct((M, BK), jnp.float32)),
                      interpret=plgpu.InterpretGPUParams() if interpret else None)(q, k, vt)

rng = np.random.default_rng(0)
q = jnp.asarray(rng.standard_normal((M, H)), F8)
k = jnp.asarray(rng.standard_normal((BK, H)), F8)
v = jnp.asarray(rng.standard_normal((BK, H)), F8)
# V^T with keys permuted within 16-blocks as P's fp8 registers hold them
vt = perm_cols(v.T)
if "--lower" in sys.argv:
  interpret = False
  f = jax.jit(run)
  txt = f.trace(q, k, vt).lower(lowering_platforms=("cuda",)).as_text()
  import re; print("lowered ok", sorted(set(re.findall(r"wgmma.mma_async[.a-z0-9]*", txt))), sorted(set(re.findall(r"cvt.rn.satfinite[.a-z0-9]*", txt))))
  sys.exit()
o, s = run(q, k, vt)
s_ref = q.astype(jnp.float32) @ k.astype(jnp.float32).T
print("S err", float(jnp.abs(s - s_ref).max()))
p = jnp.exp2(s_ref * 0.05 - 1.0)
o_ref = p.astype(F8).astype(jnp.float32) @ v.astype(jnp.float32)
print("O err", float(jnp.abs(o - o_ref).max()), float(jnp.abs(o_ref).max()))
