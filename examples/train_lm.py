"""Train a small byte-level decoder-only transformer with pallas_flash attention.

The corpus is real English text that ships with Python: the docstrings of a
fixed list of standard-library modules and their public members (no download).
The model uses ``pallas_flash.flax.linen.MultiHeadAttention(is_causal=True)``;
the same model with Flax's own ``MultiHeadDotProductAttention`` and a causal
mask has the same parameter tree, and the first ``--check-steps`` steps
compare the two (loss and every gradient) before training goes on.  The
script exits with status 1 if they differ.

``implementation=None``: the GPU kernels on a GPU, the float32 XLA reference on
a CPU.

    python examples/train_lm.py --steps 300
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pallas_flash.flax import linen as pf_linen

MODULES = (
    "abc argparse ast asyncio base64 bisect calendar collections contextlib "
    "copy csv dataclasses datetime decimal difflib doctest email enum "
    "fractions functools gettext glob gzip hashlib heapq hmac html http "
    "inspect io ipaddress itertools json logging mailbox math mimetypes "
    "operator optparse os pathlib pickle pprint queue random re sched "
    "secrets shelve shutil socket sqlite3 statistics string struct "
    "subprocess tarfile tempfile textwrap threading timeit tokenize "
    "traceback types typing unittest urllib uuid warnings weakref zipfile"
).split()


def stdlib_corpus() -> bytes:
  """Docstrings of MODULES and their public functions and classes."""
  parts = []
  for name in MODULES:
    try:
      module = importlib.import_module(name)
    except ImportError:  # a stdlib module left out of this Python build
      continue
    parts.append(inspect.getdoc(module) or "")
    for attr, obj in sorted(vars(module).items()):
      if attr.startswith("_") or getattr(obj, "__module__", None) != name:
        continue
      if inspect.isfunction(obj) or inspect.isclass(obj):
        parts.append(inspect.getdoc(obj) or "")
  text = "\n\n".join(p for p in parts if p)
  return text.encode("utf-8")


class Block(nn.Module):
  num_heads: int
  use_flax_attention: bool

  @nn.compact
  def __call__(self, x):
    h = nn.LayerNorm(name="ln1")(x)
    if self.use_flax_attention:  # Flax's own attention, with a [T, T] mask
      mask = nn.make_causal_mask(jnp.ones(x.shape[:-1]))
      h = nn.MultiHeadDotProductAttention(self.num_heads, name="attn")(
          h, mask=mask)
    else:  # pallas_flash: causal as a flag, no mask
      h = pf_linen.MultiHeadAttention(self.num_heads, name="attn")(
          h, is_causal=True)
    x = x + h
    h = nn.LayerNorm(name="ln2")(x)
    h = nn.Dense(4 * x.shape[-1], name="mlp_in")(h)
    h = nn.Dense(x.shape[-1], name="mlp_out")(nn.gelu(h))
    return x + h


class LanguageModel(nn.Module):
  vocab: int
  seq_len: int
  width: int
  depth: int
  num_heads: int
  use_flax_attention: bool = False

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab, self.width, name="embed")(tokens)
    pos = self.param("pos", nn.initializers.normal(0.02),
                     (self.seq_len, self.width))
    x = x + pos[: tokens.shape[-1]]
    for i in range(self.depth):
      x = Block(self.num_heads, self.use_flax_attention, name=f"block{i}")(x)
    return nn.Dense(self.vocab, name="head")(nn.LayerNorm(name="ln_f")(x))


def loss_fn(model, params, batch):
  logits = model.apply(params, batch[:, :-1])
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, batch[:, 1:]).mean()


def grad_errors(grads, ref):
  """Per-leaf ||g - ref|| / max(||ref||, 1e-3 ||ref||_global).

  The floor keeps gradients that are zero in exact arithmetic (e.g. the key
  projection's bias: softmax ignores a per-row constant) from dividing
  rounding noise by rounding noise.
  """
  floor = 1e-3 * optax.global_norm(ref)
  return jax.tree.map(
      lambda a, b: float(jnp.linalg.norm(a - b)
                         / jnp.maximum(jnp.linalg.norm(b), floor)), grads, ref)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=300)
  p.add_argument("--seq-len", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--width", type=int, default=128)
  p.add_argument("--depth", type=int, default=2)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--lr", type=float, default=2e-3)
  p.add_argument("--check-steps", type=int, default=3)
  p.add_argument("--log-every", type=int, default=25)
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)

  on_gpu = jax.default_backend() == "gpu"
  # The check runs with exact float32 matmuls (no TF32 on the Flax side); the
  # f32 reference then agrees with Flax to rounding, the kernels (exact f32
  # dots, another summation order) to a little more.
  tol = 1e-3 if on_gpu else 1e-4
  data = np.frombuffer(stdlib_corpus(), np.uint8)
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; corpus "
        f"{len(data) / 1e3:.0f} kB of stdlib docstrings; attention "
        f"{'pallas_flash kernels' if on_gpu else 'pallas_flash f32 reference'}")

  config = dict(vocab=256, seq_len=args.seq_len, width=args.width,
                depth=args.depth, num_heads=args.heads)
  model = LanguageModel(**config)
  flax_model = LanguageModel(**config, use_flax_attention=True)
  rng = np.random.default_rng(args.seed)

  def sample_batch():
    starts = rng.integers(0, len(data) - args.seq_len - 1, args.batch)
    return jnp.asarray(np.stack([data[s:s + args.seq_len + 1] for s in starts]),
                       jnp.int32)

  params = model.init(jax.random.key(args.seed), sample_batch()[:, :-1])
  n_params = sum(x.size for x in jax.tree.leaves(params))
  print(f"model: {args.depth} layers, width {args.width}, {args.heads} heads, "
        f"seq {args.seq_len}, batch {args.batch}, {n_params / 1e6:.2f}M params")
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(optax.warmup_cosine_decay_schedule(
                       0.0, args.lr, min(50, args.steps // 5 + 1),
                       max(args.steps, 1)), weight_decay=0.01))
  opt_state = tx.init(params)

  grad_fn = jax.jit(jax.value_and_grad(
      lambda prm, b: loss_fn(model, prm, b)))
  flax_grad_fn = jax.jit(jax.value_and_grad(
      lambda prm, b: loss_fn(flax_model, prm, b)))

  @jax.jit
  def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(lambda prm: loss_fn(model, prm, batch))(
        params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  # -- cross-check against Flax's own attention on the first steps
  for step in range(args.check_steps):
    batch = sample_batch()
    with jax.default_matmul_precision("float32"):
      loss, grads = grad_fn(params, batch)
      flax_loss, flax_grads = flax_grad_fn(params, batch)
    errs = grad_errors(grads, flax_grads)
    worst = max(jax.tree.leaves(errs))
    loss_err = abs(float(loss) - float(flax_loss)) / abs(float(flax_loss))
    ok = worst < tol and loss_err < tol
    print(f"check step {step}: loss {float(loss):.6f} (flax {float(flax_loss):.6f}, "
          f"rel err {loss_err:.1e}); worst gradient rel err {worst:.1e} "
          f"[{'ok' if ok else 'FAIL'}, tol {tol:.0e}]")
    if not ok:
      print("FAILED: pallas_flash and Flax attention disagree", file=sys.stderr)
      return 1
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)

  # -- train
  first = last = None
  t0, timed_steps, step_times = None, 0, []
  for step in range(args.check_steps, args.steps):
    params, opt_state, loss = train_step(params, opt_state, sample_batch())
    if t0 is None:  # the first step compiles: time from after it
      loss.block_until_ready()
      t0 = time.perf_counter()
      first = float(loss)
      continue
    timed_steps += 1
    if (step + 1) % args.log_every == 0 or step == args.steps - 1:
      last = float(loss)  # blocks
      dt = (time.perf_counter() - t0) / timed_steps
      step_times.append(dt)
      print(f"step {step + 1:5d}  loss {last:.4f}  {dt * 1e3:.1f} ms/step")
      t0, timed_steps = time.perf_counter(), 0
  if first is not None and last is not None:
    median = float(np.median(step_times))
    print(f"loss {first:.4f} -> {last:.4f}; {median * 1e3:.1f} ms/step (median "
          f"over logged intervals, batch {args.batch} x seq {args.seq_len})")
    if not last < first:
      print("FAILED: the loss did not fall", file=sys.stderr)
      return 1
  print(sample(model, params, args.seq_len))
  return 0


def sample(model, params, seq_len, n=120, temperature=0.7):
  """A sampled continuation of a prompt, for a look at what was learnt."""
  text = list(b"Return the ")
  tokens = np.zeros((1, seq_len), np.int32)
  apply = jax.jit(model.apply)
  key = jax.random.key(0)
  for _ in range(n):
    window = text[-seq_len:]
    tokens[0, :len(window)] = window
    logits = apply(params, jnp.asarray(tokens))[0, len(window) - 1]
    key, sub = jax.random.split(key)
    text.append(int(jax.random.categorical(sub, logits / temperature)))
  return "sample: " + bytes(text).decode("utf-8", "replace")

if __name__ == "__main__":
  sys.exit(main())
