"""Can Pallas Mosaic GPU (JAX 0.11.2) lower the GEMM shapes of 80-row query
steps with a transposed dQ?  Lowering for CUDA on the CPU (no run)."""
import functools, jax, jax.numpy as jnp
import jax.experimental.pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu

BQ = int(__import__("sys").argv[1]) if len(__import__("sys").argv) > 1 else 80
T = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
if __import__("os").environ.get("ALL_SWIZZLE32") == "1":  # every tile
  T = (plgpu.TilingTransform((8, 16)), plgpu.SwizzleTransform(32))
DO_T = eval(__import__("os").environ.get("DO_T", "T"))
DS_T = T if BQ % 64 == 0 else (plgpu.TilingTransform((8, 16)), plgpu.SwizzleTransform(32))

def kernel(k_ref, q_ref, do_ref, ds_ref, o1, o2, o3, k_s, q_s, do_s, ds_s, bar):
  plgpu.copy_gmem_to_smem(k_ref, k_s, bar.at[0])
  plgpu.copy_gmem_to_smem(q_ref, q_s, bar.at[1])
  plgpu.copy_gmem_to_smem(do_ref, do_s, bar.at[2])
  plgpu.copy_gmem_to_smem(ds_ref, ds_s, bar.at[3])
  for i in range(4):
    plgpu.barrier_wait(bar.at[i])
  # S^T = K Q^T: [64, BQ], K=128
  def s_body(acc):
    plgpu.wgmma(acc, k_s, q_s.transpose((1, 0)))
  s = pl.run_state(s_body)(plgpu.ACC.init(plgpu.layout_cast(jnp.zeros((64, BQ), jnp.float32), plgpu.Layout.WGMMA)))
  p = s.astype(jnp.bfloat16)
  PARTS = __import__('os').environ.get('PARTS', 'svq')
  # dV += P^T dO: [64, 128], K=BQ, A from registers
  def v_body(acc):
    plgpu.wgmma(acc, p, do_s)
  dv = jnp.zeros((64,128), jnp.float32) if 'v' not in PARTS else pl.run_state(v_body)(plgpu.ACC.init(plgpu.layout_cast(jnp.zeros((64, 128), jnp.float32), plgpu.Layout.WGMMA)))
  # dQ^T[0:64] = K^T[0:64, keys] dS^T[keys, BQ]: M=64, K=64 keys, N=BQ
  def q_body(acc):
    plgpu.wgmma(acc, k_s.at[:, pl.ds(0, 64)].transpose((1, 0)), ds_s)
  dqt = jnp.zeros((64,BQ), jnp.float32) if 'q' not in PARTS else pl.run_state(q_body)(plgpu.ACC.init(plgpu.layout_cast(jnp.zeros((64, BQ), jnp.float32), plgpu.Layout.WGMMA)))
  o1[...] = s; o2[...] = dv; o3[...] = dqt

def run():
  bf = jnp.bfloat16
  scratch = [plgpu.SMEM((64, 128), bf, transforms=T), plgpu.SMEM((BQ, 128), bf, transforms=T),
             plgpu.SMEM((BQ, 128), bf, transforms=DO_T), plgpu.SMEM((64, BQ), bf, transforms=DS_T),
             plgpu.Barrier(num_barriers=4)]
  def body(*refs):
    pl.run_scoped(lambda *sc: kernel(*refs, *sc), *scratch, collective_axes="wg")
  f = plgpu.kernel(
      body,
      out_type=(jax.ShapeDtypeStruct((64, BQ), jnp.float32), jax.ShapeDtypeStruct((64, 128), jnp.float32),
                jax.ShapeDtypeStruct((64, BQ), jnp.float32)),
      num_threads=1, thread_name="wg")
  sd = lambda *s: jax.ShapeDtypeStruct(s, bf)
  jax.jit(f).trace(sd(64, 128), sd(BQ, 128), sd(BQ, 128), sd(64, BQ)).lower(lowering_platforms=("cuda",))
  print("BQ", BQ, "lowers")
run()
