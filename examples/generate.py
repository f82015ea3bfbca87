"""Greedy generation with a KV cache, checked against generation without one.

Takes the byte-level language model of ``examples/train_lm.py`` (imported,
unchanged), optionally trains it briefly on the same stdlib-docstring corpus
(``--train-steps``), then generates greedily twice:

* without a cache: every step runs the model over the whole prefix;
* with a cache: the prompt is prefilled into a ``[B, S, K, H]`` KV cache per
  layer, then each step feeds one token and attends through
  ``pallas_flash.decode.attend_with_cache`` (bottom-right causal; the split-KV
  kernel on a GPU, the f32 reference on a CPU).

The cached path runs the same ``LanguageModel``: Flax's ``intercept_methods``
routes each attention layer's call through the cache (projections from the
layer's own parameters) and shifts the position embedding to the cache
offset.  The script exits with status 1 if the first ``--check-tokens``
tokens of the two generations differ.

    python examples/generate.py            # CPU: random weights, f32 reference
    python examples/generate.py --train-steps 300   # trained first
"""
from __future__ import annotations

import argparse
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_lm  # noqa: E402  (the model and corpus of examples/train_lm.py)

from pallas_flash.decode import attend_with_cache  # noqa: E402
from pallas_flash.flax import linen as pf_linen  # noqa: E402


def cached_apply(model, params, tokens, caches, lengths):
  """``model.apply`` on new tokens [B, T] at positions ``lengths + t``, with
  every attention layer reading and extending its KV cache.

  ``caches``: {layer path: (k_cache, v_cache)}, each [B, S, K, H].
  Returns (logits [B, T, vocab], updated caches).
  """
  t = tokens.shape[1]
  new_caches = {}

  def interceptor(next_fun, args, kwargs, context):
    mod = context.module
    if context.method_name != "__call__":
      return next_fun(*args, **kwargs)
    if isinstance(mod, nn.Embed):
      # LanguageModel adds pos[:T]; the new tokens sit at lengths + t.
      pos = params["params"]["pos"]
      at = lengths[:, None] + jnp.arange(t)[None, :]
      return next_fun(*args, **kwargs) + pos[at] - pos[:t]
    if isinstance(mod, pf_linen.MultiHeadAttention):
      x = args[0]  # [B, T, D]
      p = mod.variables["params"]
      proj = lambda name, h: nn.DenseGeneral(p[name]["kernel"].shape[1:]).apply(
          {"params": p[name]}, h)
      q, k, v = proj("query", x), proj("key", x), proj("value", x)
      path = "/".join(mod.scope.path)
      out, kc, vc = attend_with_cache(q, k, v, *caches[path], lengths,
                                      is_causal=True)
      new_caches[path] = (kc, vc)
      return nn.DenseGeneral(x.shape[-1], axis=(-2, -1)).apply(
          {"params": p["out"]}, out)
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(interceptor):
    logits = model.apply(params, tokens)
  return logits, new_caches


def empty_caches(params, batch: int, capacity: int, dtype):
  """{layer path: zero (k, v) caches [B, S, K, H]} from the key projections."""
  caches = {}
  for name, block in params["params"].items():
    if name.startswith("block"):
      _, kh, h = block["attn"]["key"]["kernel"].shape
      shape = (batch, capacity, kh, h)  # two buffers: both are donated
      caches[f"{name}/attn"] = (jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))
  return caches


def train(model, params, data, steps: int, seq_len: int, batch: int, seed: int):
  if steps == 0:
    return params, None
  tx = optax.adamw(optax.warmup_cosine_decay_schedule(
      0.0, 2e-3, min(50, steps // 5 + 1), steps + 1), weight_decay=0.01)
  opt_state = tx.init(params)
  rng = np.random.default_rng(seed)

  @jax.jit
  def step(params, opt_state, b):
    loss, grads = jax.value_and_grad(
        lambda prm: train_lm.loss_fn(model, prm, b))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  loss = None
  for _ in range(steps):
    starts = rng.integers(0, len(data) - seq_len - 1, batch)
    b = jnp.asarray(np.stack([data[s:s + seq_len + 1] for s in starts]), jnp.int32)
    params, opt_state, loss = step(params, opt_state, b)
  return params, None if loss is None else float(loss)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--prompt", default="Return the ")
  p.add_argument("--new-tokens", type=int, default=64)
  p.add_argument("--check-tokens", type=int, default=32)
  p.add_argument("--train-steps", type=int, default=None,
                 help="default 300 on a GPU, 0 (random weights) on a CPU")
  p.add_argument("--seq-len", type=int, default=128)
  p.add_argument("--width", type=int, default=128)
  p.add_argument("--depth", type=int, default=2)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  prompt = list(args.prompt.encode("utf-8"))
  total = len(prompt) + args.new_tokens
  if total > args.seq_len:
    print(f"prompt + new tokens ({total}) must fit --seq-len {args.seq_len}",
          file=sys.stderr)
    return 2

  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; attention "
        f"{'pallas_flash kernels (split-KV for the cached steps)' if jax.default_backend() == 'gpu' else 'pallas_flash f32 reference'}")
  data = np.frombuffer(train_lm.stdlib_corpus(), np.uint8)
  model = train_lm.LanguageModel(vocab=256, seq_len=args.seq_len,
                                 width=args.width, depth=args.depth,
                                 num_heads=args.heads)
  params = model.init(jax.random.key(args.seed),
                      jnp.zeros((1, args.seq_len), jnp.int32))
  if args.train_steps is None:
    args.train_steps = 300 if jax.default_backend() == "gpu" else 0
  params, loss = train(model, params, data, args.train_steps, args.seq_len,
                       args.batch, args.seed)
  print(f"trained {args.train_steps} steps"
        + ("" if loss is None else f", loss {loss:.3f}"))

  # -- without a cache: the whole (padded) prefix every step
  full = jax.jit(model.apply)
  tokens = np.zeros((1, args.seq_len), np.int32)
  tokens[0, :len(prompt)] = prompt
  plain = []
  for i in range(len(prompt), total):
    nxt = int(jnp.argmax(full(params, jnp.asarray(tokens))[0, i - 1]))
    tokens[0, i] = nxt
    plain.append(nxt)

  # -- with a KV cache: prefill the prompt, then one token per step
  step = jax.jit(lambda params, tok, caches, lengths: cached_apply(
      model, params, tok, caches, lengths), donate_argnums=(2,))
  caches = empty_caches(params, 1, args.seq_len, jnp.float32)
  logits, caches = step(params, jnp.asarray([prompt], jnp.int32), caches,
                        jnp.zeros((1,), jnp.int32))
  cached = [int(jnp.argmax(logits[0, -1]))]
  for i in range(len(prompt), total - 1):
    logits, caches = step(params, jnp.asarray([[cached[-1]]], jnp.int32),
                          caches, jnp.full((1,), i, jnp.int32))
    cached.append(int(jnp.argmax(logits[0, -1])))

  text = lambda toks: bytes(prompt + toks).decode("utf-8", "replace")
  print(f"without cache: {text(plain)!r}")
  print(f"with cache:    {text(cached)!r}")
  n = min(args.check_tokens, args.new_tokens)
  same = plain[:n] == cached[:n]
  print(f"first {n} tokens {'agree' if same else 'DIFFER'}; all "
        f"{args.new_tokens}: {sum(a == b for a, b in zip(plain, cached))} agree")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
