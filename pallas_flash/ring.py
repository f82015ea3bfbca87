"""Ring attention (context parallelism) over a mesh axis, for ``shard_map``.

Liu et al. 2023, "Ring Attention with Blockwise Transformers": the sequence
is split into P contiguous chunks over the devices of ``axis_name``; device
i holds query rows and key/value rows of chunk i.  In P steps every device
attends its queries to every K/V chunk while the chunks travel one device
along the ring (``lax.ppermute``: one packed transfer per step, sent
while the step's kernel runs, ``_in_flight``).  Partial outputs merge exactly
through their log-sum-exps (FlashAttention-2 Alg. 1's rescaling, one block
at a time):

    lse = logaddexp(lse_a, lse_b),  out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b

The backward is a ring too: each step runs the kernels' backward on (local
queries, travelling K/V chunk) with the *global* out and lse (so that
P = exp(S - lse) is the final softmax), dQ accumulates locally, and dK/dV
accumulators travel with their chunk, arriving home after P steps.

Causal (top-left, equal chunk lengths): key chunk j is fully visible to
the queries of chunk i > j, causal for j = i, and skipped for j > i.  With a
contiguous split the last device does P blocks and the first one.  The
"zigzag" layout (Brandon et al. 2023, "Striped Attention", and the zig-zag
split of Megatron's context parallelism) cuts the sequence into 2P chunks and
gives device i chunks i and 2P - 1 - i: every device then does one causal
call on its share at its own step and one half-size full call at each other
step (``_plan``).  Each step is one kernel call (a ``lax.cond`` picks which
where it depends on the device), so the kernels run on large blocks.

Bottom-right causal with lengths: query row i of batch row b sees key
j <= i + Lk[b] - Lq[b] (whole lengths), so the diagonal's place in a block
is known per batch row at run time only.  Every step then runs each block
of consecutive positions (contiguous: the shares; zigzag: the four pairs of
chunks) causal top-left with a per-row ``MaskArrays.diagonal_shift`` of
qs - ks + Lk[b] - Lq[b] (qs, ks: the block's first query / key position),
which the kernels add to their diagonal and tile bounds, and a ``lax.cond``
skips the blocks where no batch row has a visible pair (``_run``).

Sliding windows run the same shifted blocks: ``masks.py`` defines the
window relative to the diagonal (i + offset - left <= j <= i + offset +
right), so the block's shift places it on the whole sequence, and
``masks.block_visible`` skips a block no row of which sees a key of it, per
device.  Where the shift is static (no per-row lengths) the plan also
drops the steps no device needs (``_steps``: a causal window narrower than
a share keeps steps 0 and 1); K/V then jump over them in one
collective-permute.  A dense mask is held as each device's rows against
every key (the layout's order); each block slices the columns of the share
it meets (``_arrays``), so the mask never travels.

The automatic ring (``backend_calls``, sharding.py's calls under ``jit``)
receives contiguous shares; causal, it reorders them into the zigzag layout
and back inside the call, by collective-permutes of half-shares
(``_reorder``), so the work is balanced with no permutation asked of the
user.  Top-left without a window, each device first runs the two diagonal
chunks of its contiguous share (``_diagonals``: data it holds already, so
the reordering's permutes fly meanwhile) and the zigzag ring's step 0
leaves them out (``_plan``); the partials merge at home.

Letters: B batch, T / S local query / key chunk length, N / K query / kv
heads, H head dim; layout [B, T, N, H] as everywhere.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from pallas_flash import _dispatch, masks
from pallas_flash.params import KernelParams, row_delta


def ring_attention(query, key, value, *, axis_name, is_causal: bool = False,
                   layout: str = "contiguous", scale: float | None = None,
                   query_seq_lengths=None, key_value_seq_lengths=None,
                   query_segment_ids=None, key_value_segment_ids=None,
                   local_window_size=None, mask=None,
                   causal_alignment: masks.CausalAlignment = "top_left",
                   logits_soft_cap: float | None = None,
                   implementation: str | None = None, config=None):
  """Attention over a sequence split across the devices of ``axis_name``.

  Call inside ``jax.shard_map`` (with ``check_vma=False``) where q, k, v
  are each device's share of the sequence along axis 1.

  Args:
    query: ``[B, T, N, H]``, this device's query rows.
    key, value: ``[B, S, K, H]``, this device's key / value rows
      (N % K == 0).
    axis_name: the mesh axis the sequence is split over (P devices).
    is_causal: causal over the whole sequence (needs T == S).
    layout: how the sequence is split.  ``"contiguous"``: device i holds
      chunk i of P.  ``"zigzag"``: the sequence is cut into 2P chunks and
      device i holds chunks i and 2P - 1 - i (put a global array in that
      order with ``zigzag(x, P)`` before sharding it, and the output back
      with ``zigzag(out, P, inverse=True)``); with ``is_causal`` every
      device then does the same work (Brandon et al. 2023's balancing).
    scale: default ``1 / sqrt(H)``.
    query_seq_lengths, key_value_seq_lengths: int32 ``[B]``, lengths of the
      *whole* sequence (the same on every device): rows / keys at global
      positions ``>= length`` are padding.
    query_segment_ids: int ``[B, T]``, this device's share of the packed
      sequence ids (in the layout of ``query``); negative ids are padding.
    key_value_segment_ids: int ``[B, S]``, this device's share for the
      keys; defaults to ``query_segment_ids``.  They travel round the ring
      with their K/V share.
    local_window_size: ``w`` or ``(left, right)``, as for
      ``flash_attention``, on positions of the whole sequence.  Ring steps
      whose K/V share no local query row can see are skipped (``lax.cond``
      per device), and steps that no device needs leave the ring.
    mask: boolean ``[B | 1, N | 1, T | 1, P * S | 1]`` (True = attend): this
      device's query rows against the keys of the *whole* sequence in the
      layout's order, i.e. a global ``[B, N, P T, P S]`` mask sharded over
      its rows (``P(None, None, axis_name)``; zigzag: ``zigzag`` its rows
      and its columns).  Each step slices the columns of the K/V share it
      holds; the mask itself never travels.
    causal_alignment: ``"top_left"`` or ``"bottom_right"`` (query row i
      of batch row b sees keys ``j <= i + kv_len[b] - q_len[b]`` of the
      whole lengths, as ``flash_attention``); the same diagonal for equal
      whole lengths.
    logits_soft_cap: ``cap * tanh(logits / cap)``.
    implementation: ``None`` (Mosaic GPU on Hopper, else Pallas-Triton;
      interpret mode on a CPU), ``"triton"`` or ``"mosaic"``.
    config: backend config, as for ``flash_attention``.

  Returns:
    ``[B, T, N, H]``: this device's rows of the output, in the layout of
    ``query``.

  Raises:
    ValueError: malformed input (as ``flash_attention``), an unknown
      layout, causal with T != S, a zigzag share of odd length, or a mask
      that does not broadcast to ``[B, N, T, P * S]``.
    NotImplementedError: ``implementation="xla"`` (no block backward with
      a given lse), or a backend that cannot take the input.
  """
  q, k, v, arrays, spec, scale, cap = _dispatch.validate_shares(
      "ring_attention", query, key, value, scale, is_causal, query_seq_lengths,
      key_value_seq_lengths, local_window_size, implementation,
      causal_alignment, query_segment_ids, key_value_segment_ids,
      logits_soft_cap)
  if layout not in ("contiguous", "zigzag"):
    raise ValueError(f"layout={layout!r} must be 'contiguous' or 'zigzag'")
  (b, t, n, _), s = q.shape, k.shape[1]
  if is_causal and t != s:
    raise ValueError(f"causal ring attention needs equal chunks, got query "
                     f"rows {t} and key rows {s}")
  if layout == "zigzag" and (t % 2 or s % 2):
    raise ValueError(f"layout='zigzag' holds two chunks per device: query "
                     f"rows {t} and key rows {s} must be even")
  if implementation == "xla":
    raise NotImplementedError("ring_attention runs the kernels "
                              "(implementation 'triton' or 'mosaic')")
  dense = None
  if mask is not None:  # the query rows' stripe of the whole key sequence
    full = (b, n, t, lax.axis_size(axis_name) * s)
    dense = _dispatch.broadcastable(mask, "mask", True, full)
  lengths = (query_seq_lengths, key_value_seq_lengths)
  ring_mask = _Mask(*(a if x is not None else None for a, x in
                      zip(arrays[:2], lengths)), *arrays[2:4], dense)
  # Asks for backends that take the blocks' masks (a block's dense mask:
  # [Bm, Nm, T|1, S|1]).
  block_mask = None if dense is None else (
      *dense.shape[:2], *(d if m != 1 else 1 for d, m in
                          zip((t, s), dense.shape[2:])))
  params = _dispatch.plan(
      q, k, v, None, dataclasses.replace(spec, dense_mask_shape=block_mask),
      scale, cap, 0.0, implementation, config, ring=True)
  # Bottom-right equals top-left for equal whole lengths; with lengths
  # given the diagonal (and a window) sits per batch row.
  per_row = (spec.bottom_right and (is_causal or spec.window is not None)
             and any(x is not None for x in lengths))
  return _ring(_make_static(params, axis_name, layout == "zigzag", per_row),
               q, k, v, ring_mask)


def takes(params: KernelParams, q, k) -> bool:
  """Whether the ring runs ``flash_attention``'s call for sharding.py: equal
  T and S and a kernel backend (windows and dense masks run per block;
  sharding.py refuses the score terms: bias, ALiBi, dropout)."""
  return params.forward in ("triton", "mosaic") and q.shape[1] == k.shape[1]


def backend_calls(params: KernelParams, axis_name):
  """(forward, backward) of the ring over ``axis_name`` with the kernels'
  backend signatures (``params.py``), for sharding.py's per-shard calls of
  a T- and S-sharded input under ``jit``: forward(q, k, v, arrays) -> (out,
  lse +inf on rows that see no key); backward(q, k, v, arrays, out, lse,
  d_out) -> (dq, dk, dv).  ``arrays`` holds the whole lengths (always
  given: bottom-right runs per-row diagonals), the local segment ids and
  the dense mask's local rows ([Bm, Nm, T|1, S|1], all S columns).

  The inputs are contiguous shares.  Where those are unbalanced
  (``_balanced``: causal) the calls reorder them into the zigzag layout
  first, by collective-permutes of half-shares (``_reorder``), run the
  zigzag ring and permute the outputs (forward: out, lse; backward: dq,
  dk, dv) back, so the caller sees contiguous shares throughout (dK / dV
  from where the ring's last step leaves them, in one move).  The backward
  reorders delta = rowsum(dO * O) ([B, N, T] f32, ``_delta``) in place of
  out, which the blocks' backends then do not read (``delta=``).

  Zigzag without a window or a per-row diagonal (``diagonal_first``): the
  two diagonal chunk pairs of each contiguous share run first, on the
  shares as they arrive (``_diagonals``), while the reordering's
  collective-permutes fly; the ring's step 0 runs only its second chunk
  against its first (``_plan``), so every device still does the same work
  at every step.  Their out / lse merge with the ring's once those are
  back (``_merged``); their dq, dk, dv add to the ring's at home.  An
  optimization barrier ties the diagonals to the moved inputs (as
  ``_in_flight`` ties a ring step to its transfer): XLA could otherwise
  run them anywhere before their only use at the end, e.g. after the ring,
  and the first step would wait for the moves as before."""
  spec = params.spec

  def static(q):
    st = _make_static(
        params, axis_name, _balanced(spec, q.shape[1]),
        spec.bottom_right and (spec.is_causal or spec.window is not None))
    # Zigzag causal with the diagonal at a fixed place (no window, no
    # per-row diagonal): the share's diagonal chunks run first, locally.
    return dataclasses.replace(st, diagonal_first=st.zigzag and
                               not st.shifted)

  def contiguous(arrays):  # the ring's _Mask of the shares as they arrive
    return _Mask(arrays.q_len, arrays.kv_len, arrays.q_segment_ids,
                 arrays.kv_segment_ids, arrays.mask)

  def fwd(q, k, v, arrays):
    st = static(q)
    to, back = _orders(st)
    if st.diagonal_first:  # no data of another device: beside the moves
      local = _diagonals(st, q, k, v, contiguous(arrays))
    q, k, v = to((q, k, v))
    if st.diagonal_first:  # the moves beside the diagonals (``_in_flight``)
      (q, k, v), local = _in_flight((q, k, v), local)
    out, lse = _forward(st, q, k, v, _ring_mask(st, arrays))
    out, lse = back((out, lse), axes=(1, 2))
    return _merged(out, lse, *local) if st.diagonal_first else (out, lse)

  def bwd(q, k, v, arrays, out, lse, d_out):
    st = static(q)
    to, back = _orders(st)
    # delta = rowsum(dO * O) once on the contiguous share: reordered instead
    # of out (a [B, N, T] f32 row for each [T, N, H] one).
    delta = _delta(q, out, d_out)
    if st.diagonal_first:  # no data of another device: beside the moves
      local = _diagonals(st, q, k, v, contiguous(arrays),
                         grads=(delta, lse, d_out))
    ins = q, k, v
    q, k, v, delta, lse, d_out = to((q, k, v, delta, lse, d_out),
                                    axes=(1, 1, 1, 2, 2, 1))
    if st.diagonal_first:  # the moves beside the diagonals (``_in_flight``)
      (q, k, v, delta, lse, d_out), local = _in_flight(
          (q, k, v, delta, lse, d_out), local)
    residuals = (q, k, v, _ring_mask(st, arrays), delta, lse)
    if not st.zigzag:
      return _grads_home(st, residuals, d_out)[:3]
    # dK / dV go from where the last ring step leaves them (share me - at)
    # straight to their contiguous homes: one move, not the hop home and
    # the reorder.
    dq, dk, dv, at = _ring_grads(st, residuals, d_out)
    grads = back((dq, dk, dv), held_at=(0, at, at))
    if not st.diagonal_first:
      return grads
    return tuple((g.astype(jnp.float32) + l.astype(jnp.float32)).astype(
        x.dtype) for g, l, x in zip(grads, local, ins))

  return fwd, bwd


def _balanced(spec: masks.MaskSpec, rows: int) -> bool:
  """Whether the automatic ring reorders its contiguous shares of ``rows``
  rows into the zigzag layout: causal, where contiguous chunks leave device
  P-1 P times device 0's work.  Not causal every pair of chunks is one full
  block (balanced as is); a causal window whose left side fits in a share
  (``w <= rows``) gives every device but the first its diagonal block plus
  w keys of the share before (balanced too, and in two ring steps:
  ``_steps``).  Zigzag needs even shares."""
  return (spec.is_causal and rows % 2 == 0
          and (spec.window is None or spec.window[0] > rows))


def _orders(static):
  """(to, back): contiguous shares -> the ring's layout and back
  (identity unless ``static.zigzag``), of one array (sequence ``axis``) or
  of a tuple of them (``axes``, default 1), moved together (``_reorder``;
  back from zigzag shares ``held_at``)."""
  def order(xs, axis=1, axes=None, inverse=False, held_at=0):
    one = not isinstance(xs, tuple)
    xs = (xs,) if one else xs
    axes = (axis,) * len(xs) if axes is None else axes
    if static.zigzag:
      ats = held_at if isinstance(held_at, tuple) else (held_at,) * len(xs)
      kept = lambda ys: [y for x, y in zip(xs, ys) if x is not None]
      moved = iter(_reorder(kept(xs), static.axis_name, kept(axes), inverse,
                            kept(ats)))
      xs = tuple(None if x is None else next(moved) for x in xs)
    return xs[0] if one else xs
  return order, functools.partial(order, inverse=True)


def _ring_mask(static, arrays: masks.MaskArrays):
  """The ring's _Mask of backend ``arrays`` holding contiguous shares, in
  the ring's layout: segment ids and the dense mask's rows moved like q,
  the dense mask's columns (all local) reordered in place."""
  to, _ = _orders(static)
  dense = to(arrays.mask, axis=2)
  if static.zigzag and dense is not None and dense.shape[3] != 1:
    dense = zigzag(dense, lax.axis_size(static.axis_name), axis=3)
  return _Mask(arrays.q_len, arrays.kv_len,
               *to((arrays.q_segment_ids, arrays.kv_segment_ids)), dense)


def _reorder(xs, axis_name, axes, inverse: bool = False, held_at=0):
  """Contiguous shares -> zigzag shares along each array's axis in ``axes``
  (``inverse``: back), by collective-permutes of half-shares, the halves
  of all ``xs`` packed together (``_pack``): of the 2P halves of the
  sequence, device i holds halves 2i, 2i+1 contiguous and halves i,
  2P-1-i zigzag (``zigzag``'s order).  A size-1 (broadcast) axis stays.

  ``held_at`` (inverse only; one offset, or one per array): device d holds
  zigzag share (d - held_at) mod P, which goes from there straight to its
  contiguous homes (the ring's dK / dV where its last step leaves them)."""
  ats = (tuple(held_at) if isinstance(held_at, (tuple, list))
         else (held_at,) * len(xs))
  if not inverse and any(ats):
    raise ValueError("held_at applies to the inverse (zigzag shares)")
  moving = [i for i, (x, a) in enumerate(zip(xs, axes)) if x.shape[a] != 1]
  out = list(xs)
  if not moving:
    return out
  xs_m, ax_m = [xs[i] for i in moving], [axes[i] for i in moving]
  p = lax.axis_size(axis_name)
  me = lax.axis_index(axis_name)
  even = lax.rem(me, 2) == 0
  halves = [jnp.split(x, 2, axis=a) for x, a in zip(xs_m, ax_m)]
  first, second = [h[0] for h in halves], [h[1] for h in halves]
  pick = lambda c, a, b: [jnp.where(c, u, w) for u, w in zip(a, b)]
  if not inverse:
    # Half h goes to zigzag device h (h < P) or 2P-1-h; an even device
    # receives an even half first, an odd one an odd half first.
    home = lambda h: h if h < p else 2 * p - 1 - h
    first = _permute_all(first, axis_name,
                         [(i, home(2 * i)) for i in range(p)])
    second = _permute_all(second, axis_name,
                          [(i, home(2 * i + 1)) for i in range(p)])
    lo, hi = pick(even, first, second), pick(even, second, first)
  else:
    # Zigzag share j held by device d = j + at (``_homes``): its parity,
    # not d's, says which of d's halves is the even one.  Halves of one
    # permutation travel packed, whatever their offsets.
    table = lambda t: jnp.asarray(t, jnp.int32)[me]  # this device's entry
    moves = {}  # pairs -> [(half sent, array, gets)]
    new = {}  # array -> [its even half, its odd half]: held, then home
    for at in dict.fromkeys(ats[i] for i in moving):
      even_j = even if not at else lax.rem(lax.rem(me + p - at, p), 2) == 0
      for i in (i for i, m in enumerate(moving) if ats[m] == at):
        new[i] = pick(even_j, (first[i], second[i]), (second[i], first[i]))
        for pairs, sends, gets in _homes(p, at):
          sent = (new[i][sends[0]] if len(set(sends)) == 1 else
                  jnp.where(table(sends) == 1, new[i][1], new[i][0]))
          moves.setdefault(pairs, []).append((sent, i, gets))
    for pairs, items in moves.items():
      got = _permute_all([h for h, *_ in items], axis_name, list(pairs))
      for (_, i, gets), h in zip(items, got):
        for part in (0, 1):
          if all(g == part for g in gets):
            new[i][part] = h
          elif part in gets:
            new[i][part] = jnp.where(table(gets) == part, h, new[i][part])
    lo, hi = ([new[i][part] for i in range(len(moving))] for part in (0, 1))
  for i, a, l, h in zip(moving, ax_m, lo, hi):
    out[i] = jnp.concatenate([l, h], a)
  return out


def _homes(p: int, at: int):
  """The collective-permutes that send zigzag shares held at offset ``at``
  (device d holds share j = (d - at) mod P) to their contiguous homes, as
  (pairs, sends, gets): device d sends its even half (``sends[d]`` 0) or
  its odd one (1), device c puts the half it receives first (``gets[c]``
  0) or second (1), or keeps its own (-1).

  Share j holds the even half j or 2P-1-j (whichever is even) and the odd
  one; half h goes home to contiguous device h // 2: one permute of the
  even halves and one of the odd, pairs (d, home), or one of both where no
  device sends or receives two halves that leave their device (P = 4, at
  = 3: dK / dV after the ring), each device sending the half that leaves.
  """
  even_half = lambda j: j if j % 2 == 0 else 2 * p - 1 - j
  homes = (lambda j: even_half(j) // 2,
           lambda j: (2 * p - 1 - even_half(j)) // 2)
  perms = [tuple((d, home((d - at) % p)) for d in range(p))
           for home in homes]
  off = [[(d, c) for d, c in perm if d != c] for perm in perms]
  src, dst = ([{pair[k] for pair in o} for o in off] for k in (0, 1))
  if not all(off) or src[0] & src[1] or dst[0] & dst[1]:
    return [(perm, (part,) * p, (part,) * p)
            for part, perm in enumerate(perms)]
  return [(tuple(sorted(off[0] + off[1])),
           tuple(int(d in src[1]) for d in range(p)),
           tuple(0 if c in dst[0] else 1 if c in dst[1] else -1
                 for c in range(p)))]


def _permute_all(xs, axis_name, perm):
  """``xs`` along ``perm`` in one collective-permute (``_transfer``);
  nothing where every device keeps its part."""
  if all(i == j for i, j in perm):
    return xs
  payload, unpack = _transfer(xs, axis_name, perm)
  return unpack(payload)


def zigzag(x, num_devices: int, *, axis: int = 1, inverse: bool = False):
  """Reorders a global sequence axis for ``layout="zigzag"``: chunks
  (0, 2P-1, 1, 2P-2, ...), so that a contiguous split over P devices gives
  device i chunks i and 2P - 1 - i.  ``inverse=True`` undoes it."""
  p2 = 2 * num_devices
  if x.shape[axis] % p2:
    raise ValueError(f"axis {axis} of length {x.shape[axis]} must be a "
                     f"multiple of 2 * num_devices = {p2}")
  order = [c for i in range(num_devices) for c in (i, p2 - 1 - i)]
  if inverse:
    order = [order.index(c) for c in range(p2)]
  chunks = jnp.split(x, p2, axis=axis)
  return jnp.concatenate([chunks[c] for c in order], axis=axis)


class _Mask(NamedTuple):
  """Whole-sequence lengths ([B], None: no padding), the local segment ids
  ([B, T] / [B, S] shares, or None) and the dense mask's local rows against
  every key in the layout's order ([Bm, Nm, T|1, P S|1], or None)."""
  q_len: jax.Array | None
  kv_len: jax.Array | None
  q_seg: jax.Array | None
  kv_seg: jax.Array | None
  dense: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class _Static:
  params: KernelParams  # of a non-causal, unwindowed block without a mask
  axis_name: str
  is_causal: bool
  zigzag: bool
  # The diagonal of batch row b sits at kv_len[b] - q_len[b], known at run
  # time only (bottom-right with lengths, causal or windowed).
  per_row: bool = False
  window: tuple[int, int] | None = None
  bottom_right: bool = False
  # The automatic ring's zigzag causal top-left path: each device runs the
  # two diagonal chunks of its contiguous share itself, before the
  # reordering (``_diagonals``), and the ring's step 0 leaves them out
  # (``_plan``).
  diagonal_first: bool = False

  @property
  def shifted(self) -> bool:
    """Every step runs blocks of consecutive positions with their own
    diagonal (``MaskArrays.diagonal_shift``), each skipped by a
    ``lax.cond`` where no pair of it is visible (``_run``)."""
    return self.per_row or self.window is not None


def _make_static(params: KernelParams, axis_name, zigzag: bool,
                 per_row: bool) -> _Static:
  spec = params.spec
  return _Static(
      dataclasses.replace(params, spec=masks.MaskSpec(
          has_segments=spec.has_segments)),
      axis_name, spec.is_causal, zigzag, per_row, spec.window,
      spec.bottom_right)


@dataclasses.dataclass(frozen=True)
class _Block:
  """One kernel call: query rows x key rows of the local share (``None``:
  all rows, 0 / 1: the first / second half), causal diagonal or none."""
  q_part: int | None = None
  kv_part: int | None = None
  causal: bool = False


def _block_spec(static: _Static, blk: _Block, dense_shape=None):
  """A block's top-left mask: its causal diagonal (or none), the window,
  the shape of its slice of the dense mask."""
  return dataclasses.replace(static.params.spec, is_causal=blk.causal,
                             window=static.window,
                             dense_mask_shape=dense_shape)


def _block_params(static: _Static, blk: _Block,
                  arrays: masks.MaskArrays) -> KernelParams:
  dense = None if arrays.mask is None else tuple(arrays.mask.shape)
  return dataclasses.replace(static.params,
                             spec=_block_spec(static, blk, dense))


def _plan(static: _Static, step: int, me=None):
  """(pred, block, other) of ring step ``step`` (keys of device me - step):
  ``block`` where ``pred`` (None: always), else ``other`` (None: skip).

  Causal, step 0: the local share against itself is causal top-left, in
  both layouts (zigzag: the share's second chunk sees all of its first).
  Later steps bring the keys of device src = me - step (mod P), which lie
  before the local queries iff me >= step.  Contiguous: then fully visible,
  else skipped.  Zigzag (chunks me, 2P-1-me against src, 2P-1-src): either
  all queries see the first key chunk, or the second query chunk sees both;
  one half-size call either way (Brandon et al. 2023's balance).

  ``diagonal_first`` (zigzag): the two diagonal chunk pairs are done before
  the ring (``_diagonals``), so step 0 keeps only the second chunk against
  the first, one quarter-size full call on every device; the other steps
  are unchanged, so every device still does the same work at every step.

  ``me``: this device's index as a Python int (tests; default the traced
  ``lax.axis_index``).
  """
  if not static.is_causal:
    return None, _Block(), None
  if step == 0:
    if static.diagonal_first:
      return None, _Block(q_part=1, kv_part=0), None
    return None, _Block(causal=True), None
  if me is None:
    me = lax.axis_index(static.axis_name)
  earlier = me >= step
  if not static.zigzag:
    return earlier, _Block(), None
  return earlier, _Block(kv_part=0), _Block(q_part=1)


def _shifted_blocks(static: _Static):
  """The blocks of every step where the diagonal is placed per block
  (``_Static.shifted``): spans of consecutive positions (contiguous: the
  shares; zigzag: the four chunk pairs of the two shares)."""
  causal = static.is_causal
  if not static.zigzag:
    return (_Block(causal=causal),)
  return tuple(_Block(qp, kp, causal=causal) for qp in (0, 1)
               for kp in (0, 1))


def _sizes(blk: _Block, t: int, s: int):
  return (t if blk.q_part is None else t // 2,
          s if blk.kv_part is None else s // 2)


def _seen(static: _Static, blk: _Block, step: int, t: int, s: int) -> bool:
  """Whether block ``blk`` of step ``step`` holds a visible pair on some
  device, by positions alone (static: no lengths, ``per_row`` False; a
  bottom-right diagonal then sits at P (S - T))."""
  p = lax.axis_size(static.axis_name)
  tq, sk = _sizes(blk, t, s)
  base = p * (s - t) if static.bottom_right else 0
  offset = lambda me: (base + _start(static, me, blk.q_part, tq)
                       - _start(static, (me - step) % p, blk.kv_part, sk))
  spec = _block_spec(static, blk)
  return any(bool(masks.block_visible(spec, tq, sk, offset(me), xp=np))
             for me in range(p))


def _steps(static: _Static, t: int, s: int) -> list[int]:
  """The ring steps that run: all, but with a window only those where some
  device sees some key of the share it holds (a window narrower than a
  share: causal contiguous steps 0 and 1)."""
  steps = range(lax.axis_size(static.axis_name))
  if not static.shifted or static.per_row:
    return list(steps)
  return [step for step in steps
          if any(_seen(static, blk, step, t, s)
                 for blk in _shifted_blocks(static))]


def _half(x, part, axis=1):
  if part is None:
    return x
  return jnp.split(x, 2, axis=axis)[part]


def _parts(static: _Static, x, axis=1):
  """An accumulator of the local share as the ring holds it: zigzag, a
  tuple of its two halves, each updated on its own (no split and
  concatenate of the whole at every step; ``_whole`` joins them once, in
  the pass that casts the result); else the array."""
  if not static.zigzag or isinstance(x, tuple):
    return x
  return tuple(jnp.split(x, 2, axis=axis))


def _whole(x, axis=1):
  """``_parts``' inverse."""
  return jnp.concatenate(x, axis=axis) if isinstance(x, tuple) else x


def _update(static: _Static, fn, accs, part, values, axes):
  """Accumulators ``accs`` (``_parts``, sequence axis in ``axes``) with
  ``fn(*accs, *values) -> accs`` on the rows ``part`` (None: all) of the
  share; ``values`` are a block's, of those rows."""
  accs = [_parts(static, a, ax) for a, ax in zip(accs, axes)]
  if not static.zigzag:
    return fn(*accs, *values)
  new = [list(a) for a in accs]
  for i in (0, 1) if part is None else (part,):
    vals = [x if part is not None else _half(x, i, ax)
            for x, ax in zip(values, axes)]
    for n, x in zip(new, fn(*(a[i] for a in accs), *vals)):
      n[i] = x
  return tuple(map(tuple, new))


def _f32(static: _Static, acc):
  """An accumulator in f32, as the ring holds it (``_parts``)."""
  return _parts(static, jax.tree.map(lambda x: x.astype(jnp.float32), acc))


def _add(static: _Static, acc, part, g):
  """``acc`` plus a block's gradient ``g`` on its rows ``part`` (None:
  all), summed in f32.  ``acc`` None (nothing yet): ``g`` as it is (a
  half block: with zeros for the other half, ``_parts``), converted where
  it is next added (no pass of its own)."""
  if acc is None:
    if part is None:
      return g
    halves = [jnp.zeros_like(g)] * 2  # the other half: nothing yet
    halves[part] = g
    return tuple(halves)
  add = lambda a, g: (a + g.astype(jnp.float32),)
  return _update(static, add, (_f32(static, acc),), part, (g,), (1,))[0]


def _put(x, part, value, axis=1):
  """``x`` with ``_half(x, part, axis)`` replaced by ``value``."""
  if part is None:
    return value
  halves = jnp.split(x, 2, axis=axis)
  halves[part] = value
  return jnp.concatenate(halves, axis=axis)


def _start(static: _Static, device, part, rows: int):
  """Global position of the first row of a block of consecutive positions:
  ``device``'s share (contiguous, ``part`` None), its chunk ``part``
  (zigzag: chunks device and 2P - 1 - device; contiguous: its halves),
  ``rows`` long."""
  if not static.zigzag:  # contiguous: a share, or its half ``part``
    return device * rows if part is None else (2 * device + part) * rows
  last = 2 * lax.axis_size(static.axis_name) - 1
  return (device if part == 0 else last - device) * rows


def _local_length(static: _Static, length, device, part, rows: int):
  """Rows of a block (``part`` of ``device``'s share, ``rows`` long) below
  the whole-sequence ``length`` [B] (None: all).  Within a share global
  positions increase (zigzag: chunk 2P-1-i follows chunk i), so the valid
  rows are a prefix of the block: the kernels' length mask."""
  if length is None:
    return None
  if static.zigzag and part is None:  # both chunks of the share
    return sum(_local_length(static, length, device, c, rows // 2)
               for c in (0, 1))
  return jnp.clip(length - _start(static, device, part, rows), 0, rows)


def _arrays(static: _Static, mask: _Mask, blk: _Block, src, q, k, kv_seg):
  """The kernels' MaskArrays of block ``blk`` (of the local queries ``q``
  and the keys ``k`` of device ``src``, whole shares).

  Shifted blocks (``_Static.shifted``): global query row qs + r sees key
  ks + c iff the whole sequence's rule holds for them, i.e. the block's
  top-left causal diagonal and window shifted by qs - ks, plus Lk - Lq
  bottom-right (whole lengths clipped to the whole sequence, as the
  single-device call clips them); under causal the key length mask is
  implied by the diagonal for every row below Lq.  The dense mask's slice
  is its local rows of the block against the columns of ``src``'s share.
  """
  me = lax.axis_index(static.axis_name)
  (b, t), s = q.shape[:2], k.shape[1]
  tq, sk = _sizes(blk, t, s)
  q_len = _local_length(static, mask.q_len, me, blk.q_part, tq)
  kv_len = _local_length(static, mask.kv_len, src, blk.kv_part, sk)
  segs = (None, None) if mask.q_seg is None else (
      _half(mask.q_seg, blk.q_part), _half(kv_seg, blk.kv_part))
  dense = mask.dense
  if dense is not None and dense.shape[3] != 1:
    dense = _half(lax.dynamic_slice_in_dim(dense, src * s, s, axis=3),
                  blk.kv_part, axis=3)
  if dense is not None and dense.shape[2] != 1:
    dense = _half(dense, blk.q_part, axis=2)
  shift = None
  if static.shifted:
    shift = (_start(static, me, blk.q_part, tq)
             - _start(static, src, blk.kv_part, sk))
    if static.bottom_right:
      p = lax.axis_size(static.axis_name)
      whole = lambda x, n: n if x is None else jnp.clip(x, 0, n)
      shift = shift + whole(mask.kv_len, p * s) - whole(mask.q_len, p * t)
    shift = jnp.broadcast_to(shift, (b,)).astype(jnp.int32)
  full = lambda n: jnp.full((b,), n, jnp.int32)
  return masks.MaskArrays(
      full(tq) if q_len is None else q_len,
      full(sk) if kv_len is None else kv_len, *segs, mask=dense,
      diagonal_shift=shift)


def _shift(static: _Static, by: int, *xs):
  """Send each array ``by`` devices on along the ring (i -> i + by) in one
  collective-permute, whatever ``by`` and however many arrays: they travel
  packed in one flat 16-bit buffer (``_pack``), because XLA's GPU scheduler
  keeps one collective in flight at a time, and only one transfer per step
  can hide under the step's kernel.  Returns ``(payload, receive)``:
  ``receive(payload)`` gives the arrays (None where ``xs`` has None).
  Unpacking after ``_in_flight`` lets XLA fuse it into each array's first
  use (an accumulator's add) instead of copying it out first."""
  p = lax.axis_size(static.axis_name)
  perm = [(i, (i + by) % p) for i in range(p)]
  present = [x for x in xs if x is not None]
  payload, unpack = _transfer(present, static.axis_name, perm)

  def receive(payload):
    moved = iter(unpack(payload))
    return tuple(None if x is None else next(moved) for x in xs)
  return payload, receive


def _transfer(xs, axis_name, perm):
  """``(payload, unpack)``: the arrays ``xs`` sent along ``perm`` packed in
  one collective-permute (``_pack``), ``unpack(payload)`` their list on
  arrival; arrays of other widths than 16 / 32 bits (none today) travel
  one per permute."""
  if all(x.dtype.itemsize in (2, 4) for x in xs):
    return (lax.ppermute(_pack(xs), axis_name, perm),
            lambda buf: _unpack(buf, xs))
  return tuple(lax.ppermute(x, axis_name, perm) for x in xs), list


def _moved(static: _Static, by: int, *xs):
  """``xs`` sent ``by`` devices on, received at once (nothing to overlap)."""
  payload, receive = _shift(static, by, *xs)
  return receive(payload)


def _pack(xs):
  """Arrays of 16- or 32-bit elements as one flat uint16 buffer."""
  return jnp.concatenate([
      lax.bitcast_convert_type(x, jnp.uint16).reshape(-1) for x in xs])


def _unpack(buf, like):
  """``_pack``'s inverse: arrays shaped and typed like ``like``."""
  out, at = [], 0
  for x in like:
    words = x.dtype.itemsize // 2
    part = lax.slice(buf, (at,), (at + x.size * words,))
    at += x.size * words
    shape = x.shape + ((words,) if words > 1 else ())
    out.append(lax.bitcast_convert_type(part.reshape(shape), x.dtype))
  return out


def _in_flight(sent, state):
  """Tie a transfer to the step that runs beside it: neither is used before
  both are done, so the next transfer cannot start before this step's
  kernel (XLA would otherwise issue all of a ring's K/V hops up front, each
  exposed) and this one has exactly that kernel to hide under."""
  return lax.optimization_barrier((sent, state))


def _run(static: _Static, mask: _Mask, step: int, q, k, kv_seg, apply,
         state, skip=lambda state: state):
  """``apply(block, arrays, state)`` for the blocks of ring step ``step``
  (local queries ``q``, the keys ``k`` held at that step, with their
  ``kv_seg``): a ``lax.cond`` between the plan's two where it depends on
  the device; shifted blocks run only where they hold a visible pair
  (``masks.block_visible``; skipped blocks add nothing: their rows' lse
  stays -inf), and not at all where no device's does (``_seen``).
  ``skip(state)``: the state a skipped block leaves (a ``lax.cond``'s
  branches return alike)."""
  src = _source(static, step)
  arrays = lambda blk: _arrays(static, mask, blk, src, q, k, kv_seg)
  if static.shifted:
    for blk in _shifted_blocks(static):
      if not static.per_row and not _seen(static, blk, step, q.shape[1],
                                          k.shape[1]):
        continue
      a = arrays(blk)
      visible = jnp.any(masks.block_visible(
          _block_spec(static, blk), a.q_len, a.kv_len, a.diagonal_shift))
      state = lax.cond(visible, functools.partial(apply, blk, a), skip,
                       state)
    return state
  pred, block, other = _plan(static, step)
  run = lambda blk, st: skip(st) if blk is None else apply(blk, arrays(blk),
                                                           st)
  if pred is None:
    return run(block, state)
  return lax.cond(pred, functools.partial(run, block),
                  functools.partial(run, other), state)


def _source(static: _Static, step: int):
  """The device whose K/V share this one holds at ring step ``step``."""
  p = lax.axis_size(static.axis_name)
  return lax.rem(lax.axis_index(static.axis_name) - step + p, p)


def _forward(static: _Static, q, k, v, mask: _Mask):
  """(out [B, T, N, H] q.dtype, lse [B, N, T] f32, +inf on rows that see
  no key: the kernels' backend contract)."""
  b, t, n, _ = q.shape

  def apply(kb, vb, blk: _Block, arrays, state):
    qa = _half(q, blk.q_part)
    kc, vc = _half(kb, blk.kv_part), _half(vb, blk.kv_part)
    params = _block_params(static, blk, arrays)
    o_b, l_b = _dispatch.forward_fn(params)(qa, kc, vc, arrays, params)
    return _update(static, _merge, state, blk.q_part,
                   (o_b, _lse_to_merge(l_b)), (1, 2))

  state = (_parts(static, jnp.zeros(q.shape, jnp.float32)),
           _parts(static, jnp.full((b, n, t), -jnp.inf, jnp.float32), 2))
  # K/V (and their segment ids) hop on between the steps that run; a step
  # left out of the ring (``_steps``) costs no hop of its own.
  # The next step's share is sent while this step's kernel runs (re-packing
  # the share received costs no pass: XLA folds _pack(_unpack(buf)) to buf).
  steps = _steps(static, t, k.shape[1])
  held = (k, v, mask.kv_seg)
  if steps[0]:
    held = _moved(static, steps[0], *held)
  for i, step in enumerate(steps):
    last = i + 1 == len(steps)
    if not last:
      payload, receive = _shift(static, steps[i + 1] - step, *held)
    kb, vb, sb = held
    state = _run(static, mask, step, q, kb, sb,
                 functools.partial(apply, kb, vb), state)
    if not last:
      payload, state = _in_flight(payload, state)
      held = receive(payload)
  out, lse = _whole(state[0]), _whole(state[1], axis=2)
  return out.astype(q.dtype), _lse_to_contract(lse)


def _lse_to_merge(lse):
  """A backend's lse (+inf on rows that see no key) as ``_merge`` takes it
  (-inf: logaddexp then leaves such a row to the other partial)."""
  return jnp.where(jnp.isinf(lse), -jnp.inf, lse)


def _lse_to_contract(lse):
  """``_lse_to_merge``'s inverse: -inf back to the backends' +inf."""
  return jnp.where(jnp.isneginf(lse), jnp.inf, lse)


def _merge(out_a, lse_a, o_b, l_b):
  """FA-2 Alg. 1's rescaling, across blocks: (out [B, T, N, H] f32, lse
  [B, N, T]) of two blocks' partials, lse -inf on rows that see no key
  (their out stays zeros)."""
  to_rows = lambda x: jnp.transpose(x, (0, 2, 1))[..., None]  # [B, T, N, 1]
  new = jnp.logaddexp(lse_a, l_b)
  ref = jnp.where(jnp.isneginf(new), 0.0, new)
  return (out_a.astype(jnp.float32) * to_rows(jnp.exp(lse_a - ref))
          + o_b.astype(jnp.float32) * to_rows(jnp.exp(l_b - ref)), new)


def _diagonals(static: _Static, q, k, v, mask: _Mask, grads=None):
  """The two diagonal chunk pairs of the local contiguous share (halves 2d
  and 2d + 1 of the sequence cut into 2P, each against itself, causal
  top-left), run on the shares as they arrive, before any reordering
  (``diagonal_first``): the same work on every device, with no data of
  another, so the reordering's collective-permutes fly meanwhile.

  Forward (``grads`` None): (out [B, T, N, H] q.dtype, lse [B, N, T] f32,
  +inf on rows that see no key of the diagonals).  Backward: ``grads`` =
  (delta, lse, d_out) of the share (lse the whole sequence's), gives (dq,
  dk, dv) of the diagonals in the input dtypes."""
  flat = dataclasses.replace(static, zigzag=False, diagonal_first=False)
  me = lax.axis_index(static.axis_name)
  parts = []
  for h in (0, 1):
    blk = _Block(h, h, causal=True)
    arrays = _arrays(flat, mask, blk, me, q, k, mask.kv_seg)
    params = _block_params(flat, blk, arrays)
    qa, kc, vc = (_half(x, h) for x in (q, k, v))
    if grads is None:
      parts.append(_dispatch.forward_fn(params)(qa, kc, vc, arrays, params))
    else:
      delta, lse, d_out = grads
      parts.append(_dispatch.backward_fn(params)(
          qa, kc, vc, arrays, None, _half(lse, h, axis=2),
          _half(d_out.astype(q.dtype), h), params,
          delta=_half(delta, h, axis=2)))
  axes = (1, 2) if grads is None else (1, 1, 1)
  return tuple(jnp.concatenate(x, axis=a) for x, a in zip(zip(*parts), axes))


def _merged(out_a, lse_a, out_b, lse_b):
  """(out, lse) of two partials of the same rows in the kernels' contract
  (lse +inf on rows that see no key: those rows stay zeros, never NaN)."""
  out, lse = _merge(out_a, _lse_to_merge(lse_a), out_b, _lse_to_merge(lse_b))
  return out.astype(out_a.dtype), _lse_to_contract(lse)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(static: _Static, q, k, v, mask: _Mask):
  return _forward(static, q, k, v, mask)[0]


def _ring_fwd(static, q, k, v, mask):
  out, lse = _forward(static, q, k, v, mask)
  return out, (q, k, v, mask, out, lse)


def _delta(q, out, d_out):
  """delta = rowsum(dO * O) [B, N, T] f32 (FA-2 Alg. 2 line 4) of a share,
  from dO in q's dtype as the blocks' backends see it: what each block's
  backend would compute of its rows, given to it (``delta=``)."""
  return row_delta(out, d_out.astype(q.dtype))


def _ring_bwd(static, residuals, d_out):
  q, k, v, mask, out, lse = residuals
  return _grads_home(static, (q, k, v, mask, _delta(q, out, d_out), lse),
                     d_out)


def _grads_home(static, residuals, d_out):
  dq, dk, dv, at = _ring_grads(static, residuals, d_out)
  if at:  # one more hop brings every share's dK / dV home (device me - at)
    dk, dv = _moved(static, lax.axis_size(static.axis_name) - at, dk, dv)
  return dq, dk, dv, None


def _ring_grads(static, residuals, d_out):
  """(dq, dk, dv, at) of the ring's backward: dq of the local share, dk /
  dv (in the input dtype) of the share of device me - at, where the last
  ring step leaves them (``_grads_home`` sends them home).  ``residuals``
  hold delta (``_delta``) where the forward's are out: the blocks' backends
  get their rows of it and no out."""
  q, k, v, mask, delta, lse = residuals
  d_out = d_out.astype(q.dtype)

  def apply(kb, vb, blk: _Block, arrays, state):
    dq, dk, dv = state
    qa, do_a = (_half(x, blk.q_part) for x in (q, d_out))
    lse_a, delta_a = (_half(x, blk.q_part, axis=2) for x in (lse, delta))
    kc, vc = _half(kb, blk.kv_part), _half(vb, blk.kv_part)
    params = _block_params(static, blk, arrays)
    dq_b, dk_b, dv_b = _dispatch.backward_fn(params)(
        qa, kc, vc, arrays, None, lse_a, do_a, params, delta=delta_a)
    dq = _add(static, dq, blk.q_part, dq_b)
    if static.shifted:  # several blocks a step: their dK / dV summed in f32
      return (dq, _add(static, dk, blk.kv_part, dk_b),
              _add(static, dv, blk.kv_part, dv_b))
    # One block a step: its dK / dV as the kernel gave them (zeros on the
    # rest of the share), summed in f32 with the accumulator that arrived,
    # after the barrier (the kernels' outputs cross it: no f32 copy first).
    return dq, _put(dk, blk.kv_part, dk_b), _put(dv, blk.kv_part, dv_b)

  # dQ accumulates here; the dK / dV accumulators travel after their share,
  # one step behind it: step i's kernel runs while the share for step i + 1
  # arrives and the accumulator of the share held at step i - 1 leaves,
  # both in one transfer where their hops are equal; each step's kernel
  # starts from zero dK / dV, and the accumulator that arrived meanwhile is
  # added after it.
  steps = _steps(static, q.shape[1], k.shape[1])
  # Step 0 of an unshifted ring runs one whole block: its dQ stays as the
  # kernel gave it until the next step adds to it.
  dq = _f32(static, jnp.zeros_like(q)) if static.shifted else None
  zeros = tuple(_f32(static, x) if static.shifted else x
                for x in (jnp.zeros_like(k), jnp.zeros_like(v)))
  skip = lambda st: (_f32(static, st[0]), *st[1:])
  held = (k, v, mask.kv_seg)
  if steps[0]:
    held = _moved(static, steps[0], *held)
  # (dk, dv) of the share held at the previous step, sent on (its leaves:
  # zigzag shifted blocks sum halves, ``_parts``)
  acc = None
  for i, step in enumerate(steps):
    last = i + 1 == len(steps)
    hop_kv = None if last else steps[i + 1] - step
    hop_acc = None if i == 0 else step - steps[i - 1]
    leaves = jax.tree.leaves(acc)
    if leaves and hop_kv == hop_acc:
      transfers = [_shift(static, hop_kv, *held, *leaves)]
    else:
      transfers = ([] if last else [_shift(static, hop_kv, *held)]) + (
          [_shift(static, hop_acc, *leaves)] if leaves else [])
    kb, vb, sb = held
    dq, dk, dv = _run(static, mask, step, q, kb, sb,
                      functools.partial(apply, kb, vb), (dq, *zeros), skip)
    payloads, (dq, dk, dv) = _in_flight([t for t, _ in transfers],
                                        (dq, dk, dv))
    sent = sum((receive(t) for t, (_, receive) in zip(payloads, transfers)),
               ())
    if not last:
      held, sent = sent[:3], sent[3:]
    acc = (dk, dv)
    if i:  # the accumulator of this step's share, from the devices before
      acc = jax.tree.map(
          lambda a, b: a.astype(jnp.float32) + b.astype(jnp.float32), acc,
          jax.tree.unflatten(jax.tree.structure(acc), sent))
  # Every share's dK / dV is whole now: rounded before the move home (the
  # same bits as after it), which then moves half the bytes of f32.
  dk, dv = (_whole(x).astype(y.dtype) for x, y in zip(acc, (k, v)))
  return _whole(dq).astype(q.dtype), dk, dv, steps[-1]


_ring.defvjp(_ring_fwd, _ring_bwd)
