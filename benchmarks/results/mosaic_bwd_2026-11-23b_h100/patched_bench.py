"""Run benchmarks/bwd_bench.py with mosaic_backward.to_fixed replaced (timing diagnostics only)."""
import runpy, sys, jax.numpy as jnp
from jax import lax
import pallas_flash.mosaic.backward as mb
mode = sys.argv.pop(1)
if mode == "cvt":  # one cvt.rzi per element
  mb.to_fixed = lambda part, scale: (part * scale).astype(jnp.int32)
elif mode == "bits":  # no conversion at all (wrong numbers; isolates the int32 reduce-add)
  mb.to_fixed = lambda part, scale: lax.bitcast_convert_type(part, jnp.int32)
print("to_fixed:", mode, flush=True)
sys.argv[0] = "benchmarks/bwd_bench.py"
runpy.run_path("benchmarks/bwd_bench.py", run_name="__main__")
