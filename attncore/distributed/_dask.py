"""The plan run on Dask: data scattered to its owners, one task per pair on
the query chunk's owner (only K/V move), merges and sums where the data lies."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import pickle
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

import attncore
from attncore.distributed import _worker as W
from attncore._problem import _per_head, check_key_lengths, sum_to_shape
from attncore.distributed._blocks import as_pairwise, cut, merge_all
from attncore.distributed._plan import Plan, plan as make_plan


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ImportError("attncore.distributed needs Dask: pip install 'attncore[distributed]'"
                          ) from None
    return distributed


class WorkerLostError(RuntimeError):
    """A worker that held a computation's data left the cluster before it ended."""


def check_client(client) -> None:
    """A running, synchronous ``distributed.Client``, or a TypeError/ValueError
    that says what was passed instead."""
    distributed = _distributed()
    if isinstance(client, distributed.deploy.Cluster):
        raise TypeError("client must be a distributed.Client, got a cluster: pass "
                        "distributed.Client(cluster)")
    if not isinstance(client, distributed.Client):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
    if client.asynchronous:
        raise ValueError("attncore.distributed needs a synchronous Client (its calls block), "
                         "got one made with asynchronous=True")
    if client.status != "running":
        raise ValueError(f"the Dask client is {client.status}, not running")


def alive_workers(client) -> set[str]:
    """The addresses of the cluster's workers now, asked of the scheduler (all
    of them: its summary lists only the first few unless asked for all).

    Not ``client.scheduler_info()``: that fetches into the client's cached copy
    and returns the cache, which the client's own periodic refresh (a summary
    with no workers in it) can overwrite in between, so that a healthy cluster
    looked empty about once in a few hundred calls."""
    check_client(client)
    return set(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def _forget_frames(e: BaseException) -> None:
    """Cut a caught exception (and those it chains) from the frames it was
    raised through.  Dask's ``sync`` keeps the exception in a local of a frame
    its own traceback holds: a reference cycle through the waiting frames and
    their futures, which kept a call's chunks on the workers until Python's
    cyclic garbage collector happened to run."""
    seen: set[int] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        x.__traceback__ = None
        todo += [x.__context__, x.__cause__]


def workers_of(client, workers: list[str] | int | None = None) -> list[str]:
    """The worker addresses to use: all of the cluster's (sorted), its first
    ``workers`` if an int, or the given addresses."""
    alive = sorted(alive_workers(client))
    if not alive:
        raise ValueError("the Dask cluster has no workers")
    if workers is None:
        return alive
    if isinstance(workers, int):
        if not 1 <= workers <= len(alive):
            raise ValueError(f"workers must be in [1, {len(alive)}] for this cluster, "
                             f"got {workers}")
        return alive[:workers]
    missing = [w for w in workers if w not in alive]
    if missing:
        raise ValueError(f"not workers of this cluster: {missing}")
    return list(workers)


def wait_for(client, futures: list, addrs: list[str], what: str, poll_s: float = 0.5) -> None:
    """Wait for futures.  Raise WorkerLostError as soon as a worker they are
    pinned to has left (its tasks would wait for it for ever) or Dask gives up
    on them with their data (cancelled futures, a killed worker); re-raise a
    task's own exception."""
    distributed = _distributed()
    pending = [f for f in futures if f is not None]
    lost = (concurrent.futures.CancelledError, distributed.KilledWorker)
    try:
        while True:
            try:
                distributed.wait(pending, timeout=poll_s)
                break
            except TimeoutError as e:
                _forget_frames(e)
                alive = alive_workers(client)
                gone = [a for a in addrs if a not in alive] or ([] if alive else ["(every one)"])
                if gone:
                    client.cancel(pending)
                    raise WorkerLostError(f"{what}: worker {', '.join(gone)} left the cluster "
                                          f"before the computation ended") from None
        for f in pending:
            if f.status in ("lost", "cancelled"):
                raise WorkerLostError(f"{what}: a result was lost ({f.status}) with its worker")
            if f.status == "error":
                f.result()  # raises the task's exception
    except lost as e:
        raise WorkerLostError(f"{what}: a worker was lost with data the computation needed "
                              f"({type(e).__name__})") from e


def gather(client, futures: list, addrs: list[str], what: str) -> list:
    """client.gather straight from the workers, a lost worker as WorkerLostError."""
    wait_for(client, futures, addrs, what)
    try:
        return client.gather(futures, direct=True)
    except (concurrent.futures.CancelledError, _distributed().KilledWorker) as e:
        raise WorkerLostError(f"{what}: a worker was lost with a result ({type(e).__name__})"
                              ) from e


def scatter_to(client, data: dict, addr: str, what: str) -> dict:
    """``client.scatter(data)`` straight to the worker at ``addr``.  Dask waits
    up to its connect timeout (30 s) for a worker it cannot reach and then
    raises a bare TimeoutError or CommClosedError; here a worker that has left
    the cluster is a WorkerLostError within about a second, and one that is
    only slow (paused, say) is waited for as long as Dask would."""
    deadline = time.monotonic() + client._timeout
    while True:
        try:
            return client.scatter(data, workers=[addr], direct=True, timeout=1)
        except OSError as e:  # TimeoutError and Dask's CommClosedError are OSErrors
            _forget_frames(e)
            if addr not in alive_workers(client):
                raise WorkerLostError(f"{what}: worker {addr} left the cluster while the "
                                      f"inputs were placed") from None
            if time.monotonic() > deadline:
                raise


# --- measured transfers ----------------------------------------------------

_meters: list[Transfers] = []
_meters_lock = threading.Lock()


@dataclass
class Transfers:
    """Worker-to-worker bytes of the attncore.distributed calls made inside
    ``with transfers(client) as t:``, read from the workers' own transfer logs
    (``Worker.transfer_incoming_log``) when the block ends: ``t.bytes``,
    ``t.per_worker``.  A worker's log keeps its last
    ``distributed.admin.low-level-log-length`` transfers (1000 by default);
    ``t.complete`` is False when a log was full, so older ones may be missing."""
    client: Any
    prefixes: list[str] = field(default_factory=list)
    per_worker: dict[str, int] = field(default_factory=dict)
    complete: bool = True

    @property
    def bytes(self) -> int:
        return sum(self.per_worker.values())

    def read(self) -> dict[str, int]:
        got = self.client.run(W.incoming, prefixes=self.prefixes) if self.prefixes else {}
        self.per_worker = {w: size for w, (size, _) in got.items()}
        self.complete = not any(full for _, full in got.values())
        return self.per_worker


class transfers:
    """Context manager: ``with transfers(client) as t: ...`` then ``t.bytes``."""

    def __init__(self, client) -> None:
        self.meter = Transfers(client)

    def __enter__(self) -> Transfers:
        with _meters_lock:
            _meters.append(self.meter)
        return self.meter

    def __exit__(self, *exc) -> None:
        with _meters_lock:
            _meters.remove(self.meter)
        self.meter.read()


class _Run:
    """One call's keys: every key it makes starts with its own prefix, so its
    transfers can be told apart in the workers' logs."""

    def __init__(self, client, addrs: list[str], what: str) -> None:
        self.client, self.addrs, self.what = client, addrs, what
        self.renew()

    def renew(self) -> None:
        """A new prefix for the keys made from now on (a long-lived object's
        next call), counted by the transfer meters open now."""
        self.prefix = f"attncore-{self.what}-{uuid.uuid4().hex[:12]}-"
        with _meters_lock:
            for meter in _meters:
                meter.prefixes.append(self.prefix)

    def key(self, *parts: object) -> str:
        return self.prefix + "-".join(map(str, parts))

    def submit(self, fn, *args, at: int, name: tuple, **kwargs):
        return self.client.submit(fn, *args, key=self.key(*name), workers=[self.addrs[at]],
                                  allow_other_workers=False, pure=False, **kwargs)

    def place(self, name: str, a, bounds: tuple[int, ...], owner: tuple[int, ...]) -> list:
        """Chunks of a along axis -2, each on its owner: NumPy scattered straight
        to the worker (never through the scheduler); a dask array rechunked to
        the bounds and each chunk computed on its owner."""
        if _is_dask(a):
            sizes = tuple(b - a_ for a_, b in zip(bounds, bounds[1:]))
            lazy = a.rechunk({ax: (sizes if ax == a.ndim - 2 else -1) for ax in range(a.ndim)})
            blocks = lazy.to_delayed().reshape(-1)
            futures = []
            for c, block in enumerate(blocks):
                computed = self.client.compute(block, workers=[self.addrs[owner[c]]],
                                               allow_other_workers=False)
                # under a key of this call's, so that its moves are counted
                futures.append(self.submit(W.same, computed, at=owner[c], name=(name, c)))
            return futures
        return self.place_all([(name, a, bounds)], owner)[0]

    def place_all(self, arrays: list[tuple], owner: tuple[int, ...]) -> list[list]:
        """place() of each (name, NumPy array, bounds), in one scatter per worker
        (each a few round trips to the scheduler, so one for all the arrays)."""
        placed: dict[str, Any] = {}
        for w in sorted(set(owner)):
            mine = {self.key(name, c): a[..., bounds[c]:bounds[c + 1], :]
                    for name, a, bounds in arrays for c in range(len(owner)) if owner[c] == w}
            placed |= scatter_to(self.client, mine, self.addrs[w], self.what)
        return [[placed[self.key(name, c)] for c in range(len(owner))] for name, _, _ in arrays]

    def place_pairs(self, pl: Plan, scores: Scores) -> dict:
        """(query chunk, key chunk) -> {"mask": future, "bias": future}: each
        pair's cut of the call's mask and bias, scattered straight to the
        query chunk's owner, where the pair runs (nothing when there is neither)."""
        pieces: dict[tuple[int, int], dict] = {}
        for name, a in (("mask", scores.mask), ("bias", scores.bias)):
            if a is None:
                continue
            for w in sorted({pl.owner[i] for i, _ in pl.pairs}):
                mine = {self.key(name, i, j): cut(a, pl.q_bounds[i], pl.q_bounds[i + 1],
                                                  pl.k_bounds[j], pl.k_bounds[j + 1])
                        for i, j in pl.pairs if pl.owner[i] == w}
                placed = scatter_to(self.client, mine, self.addrs[w], self.what)
                for i, j in pl.pairs:
                    if pl.owner[i] == w:
                        pieces.setdefault((i, j), {})[name] = placed[self.key(name, i, j)]
        return pieces

    def wait(self, futures: list) -> None:
        wait_for(self.client, futures, self.addrs, f"attncore.distributed.{self.what}")

    def kv_where_needed(self, pl: Plan, kf: list, vf: list) -> dict:
        """(worker, key chunk) -> (k, v) futures on that worker, for every pair's
        reads: a copy of its own on each worker that reads the chunk.

        So each chunk crosses the network exactly once per worker that reads
        it, as the plan says.  Read straight from the placed chunk, a worker
        could fetch it twice: once a second worker holds a replica, Dask's
        active memory manager may drop either one, the owner's included, and a
        pair still to run where it was dropped fetches it back.  The copies
        have one replica each, which the manager never drops, and the owner's
        copies exist before any other worker fetches the chunk."""
        readers: dict[int, set[int]] = {}
        for w in range(pl.workers):
            for _, j in pl.pairs_of(w):
                readers.setdefault(j, set()).add(w)
        where = {(pl.owner[j], j): tuple(self.submit(W.same, f[j], at=pl.owner[j],
                                                     name=(name, j, "at", pl.owner[j]))
                                         for name, f in (("k", kf), ("v", vf)))
                 for j in readers}
        self.wait([f for pair in where.values() for f in pair])
        for j, ws in readers.items():
            for w in ws - {pl.owner[j]}:
                where[w, j] = tuple(self.submit(W.same, f[j], at=w, name=(name, j, "at", w))
                                    for name, f in (("k", kf), ("v", vf)))
        return where


def _is_dask(a) -> bool:
    return type(a).__module__.startswith("dask.")


@dataclass
class Scores:
    """A call's score modifiers and mask, checked: ALiBi slopes and soft-cap
    act on each score alone (every pair applies them, placed by positions);
    mask and bias as (B or 1, H or 1, n or 1, m or 1) arrays, cut per pair;
    the sinks folded into each row once, after the merge (:func:`_fold_sinks`)."""
    alibi_slopes: np.ndarray | None = None
    softcap: float | None = None
    sinks: np.ndarray | None = None  # (H,) float64
    mask: np.ndarray | None = None
    bias: np.ndarray | None = None
    bias_shape: tuple | None = None  # the shape the bias came in (its gradient's)

    def geo(self) -> dict:
        return dict(alibi_slopes=self.alibi_slopes, softcap=self.softcap)


def _check_scores(q, n: int, m: int, *, mask=None, bias=None, alibi_slopes=None, softcap=None,
                  sinks=None) -> tuple[Scores, dict]:
    """The modifiers as a :class:`Scores`, and the keywords that check them on
    one-token stand-ins (their mask and bias one cell of the real ones)."""
    full = tuple(q.shape[:-2]) + (n, m)
    sc = Scores(softcap=softcap)
    stand: dict = dict(alibi_slopes=alibi_slopes, softcap=softcap, sinks=sinks)
    for name, a in (("mask", mask), ("bias", bias)):
        if a is None:
            continue
        a = np.asarray(a)
        try:
            fits = a.ndim <= len(full) and np.broadcast_shapes(a.shape, full) == full
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{name} of shape {a.shape} does not broadcast to {full}")
        a2 = a.reshape((1,) * (2 - a.ndim) + a.shape) if a.ndim < 2 else a
        stand[name] = a2[..., :1, :1]
        if name == "bias":
            sc.bias_shape = a.shape
            if a.dtype.kind == "f" and a.dtype != q.dtype:
                a = a.astype(q.dtype)
        setattr(sc, name, as_pairwise(a, tuple(q.shape[:-3])))
    heads = q.shape[-3] if len(q.shape) >= 3 else 1
    if alibi_slopes is not None:
        sc.alibi_slopes = _per_head(alibi_slopes, "alibi_slopes", heads)
    if sinks is not None:
        sc.sinks = _per_head(sinks, "sinks", heads)
    return sc, stand


def _fold_sinks(out, lse, sinks: np.ndarray | None):
    """(out, lse) with each head's sink added to every row's denominator, as
    attncore.attention(..., sinks=) has them: the sink is one more term of
    the merge, weight exp(sink - lse').  NumPy or dask arrays."""
    if sinks is None:
        return out, lse
    s = sinks.reshape(-1, 1) if len(lse.shape) >= 2 else sinks.reshape(())
    with np.errstate(invalid="ignore"):
        new = np.logaddexp(lse, s).astype(lse.dtype)
        w = np.exp(lse - new)
    w = np.where(np.isnan(w), 0, w).astype(out.dtype)  # nothing seen and no sink: stays 0
    return out * w[..., None], new


def _sink_gradient(sinks: np.ndarray, out, lse, dout):
    """d(sinks): -Σ exp(sink_h - lse)·rowsum(dout ∘ out) over every row of head h."""
    D = (dout.astype(np.float64) * out.astype(np.float64)).sum(-1)
    s = sinks.reshape(-1, 1) if len(lse.shape) >= 2 else sinks.reshape(())
    with np.errstate(over="ignore", invalid="ignore"):
        g = -(np.exp(s - lse.astype(np.float64)) * D)
    if len(lse.shape) < 2:
        return g.sum().reshape(1)
    head = len(lse.shape) - 2
    return g.sum(axis=tuple(a for a in range(len(lse.shape)) if a != head))


def _call_shape(q, k, v, *, scale, causal, window, key_lengths, stand_kw=None):
    """Check the shapes and arguments as attncore.attention does, on stand-ins
    one token long (nothing is computed or copied): (scale, key lengths or
    None, batch, heads, kv_heads, d_k, d_v, n, m)."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):
            raise TypeError(f"{name} must be a NumPy or dask array, got {type(a).__name__}")
        if len(a.shape) < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., seq, dim), got {a.shape}")
    stand = [np.zeros(a.shape[:-2] + (1, a.shape[-1]), a.dtype) for a in (q, k, v)]
    attncore.attention(*stand, scale=scale, causal=causal, window=window,  # raises what it would
                       **(stand_kw or {}))
    n, m = q.shape[-2], k.shape[-2]
    if v.shape[-2] != m:
        raise ValueError(f"k has {m} keys but v has {v.shape[-2]}")
    if n == 0 or m == 0:
        raise ValueError(f"attncore.distributed needs n >= 1 and m >= 1, got n={n}, m={m}")
    batch = q.shape[:-3]
    kl = None if key_lengths is None else check_key_lengths(key_lengths, batch, m)
    heads = q.shape[-3] if len(q.shape) >= 3 else 1
    kv_heads = k.shape[-3] if len(k.shape) >= 3 else 1
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return scale, kl, math.prod(batch), heads, kv_heads, q.shape[-1], v.shape[-1], n, m


def _plan_for(q, k, v, workers: int, *, causal, window, layout, chunks, key_lengths,
              scale, modifiers: dict) -> tuple[Plan, dict, Scores]:
    sc, stand_kw = _check_scores(q, *(a.shape[-2] if len(a.shape) >= 2 else 0 for a in (q, k)),
                                 **modifiers)
    scale, kl, B, H, Hkv, dk, dv, n, m = _call_shape(q, k, v, scale=scale, causal=causal,
                                                     window=window, key_lengths=key_lengths,
                                                     stand_kw=stand_kw)
    pl = make_plan(n, m, workers, causal=causal, layout=layout, chunks=chunks, window=window,
                   batch=B, heads=H, kv_heads=Hkv, head_dim=dk, value_dim=dv,
                   itemsize=np.dtype(q.dtype).itemsize, kv_itemsize=np.dtype(k.dtype).itemsize,
                   key_lengths=kl)
    geo = dict(n=n, m=m, causal=bool(causal), window=window, scale=scale, key_lengths=kl,
               **sc.geo())
    return pl, geo, sc


def _assemble(run: _Run, futures: dict[int, Any], bounds: tuple[int, ...], shape: tuple, dtype,
              lazy: bool, fill: float = 0.0, axis: int = -2):
    """The per-chunk results (chunk -> future of an array, or the array) as one
    array, the chunks along ``axis`` cut at ``bounds``: NumPy, or a dask array
    of the futures for dask inputs.  A chunk with no future is ``fill`` (rows
    that see no key, keys that no row sees)."""
    axis %= len(shape)
    chunks = len(bounds) - 1

    def chunk_shape(c):
        s = list(shape)
        s[axis] = bounds[c + 1] - bounds[c]
        return tuple(s)

    if lazy:
        import dask.array as da

        parts = [da.from_delayed(futures[c], chunk_shape(c), dtype=dtype) if c in futures
                 else da.full(chunk_shape(c), fill, dtype=dtype) for c in range(chunks)]
        return da.concatenate(parts, axis=axis)
    result = np.full(shape, fill, dtype)
    got = [futures[c] for c in sorted(futures)]
    if got and not isinstance(got[0], np.ndarray):  # futures: gather them now
        got = gather(run.client, got, run.addrs, f"attncore.distributed.{run.what}")
    for c, a in zip(sorted(futures), got):
        index = [slice(None)] * len(shape)
        index[axis] = slice(bounds[c], bounds[c + 1])
        result[tuple(index)] = a
    return result


# A call this small runs as one task on one worker (the scheduler's choice), its
# arrays inside the task: spreading it costs more than computing it (on a
# 2-worker LocalCluster a spread call costs about 0.1 s before any arithmetic;
# one task, a few ms), and Dask retries the task on another worker if its
# worker dies, since the task itself holds the inputs.
_ONE_TASK_BYTES = 1 << 20   # the call's arrays together
_ONE_TASK_FLOPS = 1 << 30   # about 10-30 ms on one core


def _one_task(pl: Plan, arrays, workers, chunks, lazy: bool) -> bool:
    return (not lazy and workers is None and chunks is None
            and sum(np.asarray(a).nbytes for a in arrays if a is not None) <= _ONE_TASK_BYTES
            and sum(pl.flops) <= _ONE_TASK_FLOPS)


def _in_one_task(client, addrs: list[str], what: str, fn, *args):
    """fn(*args) as one task on any of the call's workers, the arrays inside it."""
    run = _Run(client, addrs, what)
    f = client.submit(fn, *args, key=run.key("whole"), pure=False)
    [got] = gather(client, [f], [], f"attncore.distributed.{what}")
    return got


def attention(q: Any, k: Any, v: Any, *, client, causal: bool = False,
              window: int | None = None, scale: float | None = None, layout: str = "zigzag",
              chunks: int | None = None, return_lse: bool = False,
              key_lengths: Any | None = None, mask: Any | None = None, bias: Any | None = None,
              alibi_slopes: Any | None = None, softcap: float | None = None,
              sinks: Any | None = None, workers: list[str] | int | None = None):
    """:func:`attncore.attention` over the workers of a Dask cluster.

    q (..., H, n, d_k), k (..., H_kv, m, d_k), v (..., H_kv, m, d_v) as in
    :func:`attncore.attention` (float32 or float64; GQA; ``key_lengths``;
    bottom-right ``causal`` and ``window``; ``mask``, ``bias``,
    ``alibi_slopes``, ``softcap`` and ``sinks``), NumPy arrays or dask arrays
    (``mask`` and ``bias``: NumPy; each pair's cut of them is sent to where
    the pair runs, never the whole).  The
    sequence is cut as :func:`attncore.distributed.plan` says (``layout``,
    ``chunks``) over the cluster's workers (or ``workers``: addresses or a
    count); NumPy chunks are scattered straight to their owners, dask arrays
    rechunked and computed there.  Each visible (query chunk, key chunk) pair
    is one task on the query chunk's owner calling
    ``attncore.attention(..., return_lse=True)`` on its slices, so only K/V
    chunks cross the network; the pairs of a query chunk merge there by
    :func:`attncore.merge`.

    Returns ``out`` (and ``lse`` if ``return_lse``) like attncore.attention:
    NumPy for NumPy inputs, dask arrays (backed by the results on the workers)
    for dask inputs.  Equal to attncore.attention to rounding (the keys are
    summed in another order).  Raises :class:`WorkerLostError` if a worker
    leaves mid-computation.
    """
    addrs = workers_of(client, workers)
    lazy = any(_is_dask(a) for a in (q, k, v))
    if not lazy:
        q, k, v = (np.asarray(a) for a in (q, k, v))
    pl, geo, sc = _plan_for(q, k, v, len(addrs), causal=causal, window=window, layout=layout,
                            chunks=chunks, key_lengths=key_lengths, scale=scale,
                            modifiers=dict(mask=mask, bias=bias, alibi_slopes=alibi_slopes,
                                           softcap=softcap, sinks=sinks))
    if _one_task(pl, (q, k, v, mask, bias), workers, chunks, lazy):
        kw = dict(causal=causal, window=window, scale=scale, key_lengths=key_lengths, mask=mask,
                  bias=bias, alibi_slopes=alibi_slopes, softcap=softcap, sinks=sinks)
        out, lse = _in_one_task(client, addrs, "attention", W.whole_forward, q, k, v, kw)
        return (out, lse) if return_lse else out
    run = _Run(client, addrs, "attention")
    if lazy:
        qf = run.place("q", q, pl.q_bounds, pl.owner)
        kf = run.place("k", k, pl.k_bounds, pl.owner)
        vf = run.place("v", v, pl.k_bounds, pl.owner)
    else:
        qf, kf, vf = run.place_all([("q", q, pl.q_bounds), ("k", k, pl.k_bounds),
                                    ("v", v, pl.k_bounds)], pl.owner)
    pieces = run.place_pairs(pl, sc)
    kv = run.kv_where_needed(pl, kf, vf)
    merged: dict[int, Any] = {}
    for i in range(pl.chunks):
        parts = [run.submit(W.forward, qf[i], *kv[pl.owner[i], j], pl.q_bounds[i],
                            pl.k_bounds[j], geo, at=pl.owner[i], name=("pair", i, j),
                            **pieces.get((i, j), {}))
                 for ii, j in pl.pairs if ii == i]
        if parts:
            merged[i] = run.submit(W.merge, *parts, at=pl.owner[i], name=("merged", i))
    lead = tuple(q.shape[:-1])
    shapes = (lead + (v.shape[-1],), lead)
    if lazy:  # the two arrays of each merged chunk as futures of their own, for dask arrays
        parts = [{i: run.submit(W.out_of, f, index, at=pl.owner[i], name=(what, i))
                  for i, f in merged.items()} for index, what in ((0, "out"), (1, "lse"))]
        run.wait([f for part in parts for f in part.values()])
    else:  # NumPy: the merged (o, lse) pairs gathered straight from their workers
        got = dict(zip(merged, gather(client, list(merged.values()), addrs,
                                      "attncore.distributed.attention")))
        parts = [{i: pair[index] for i, pair in got.items()} for index in (0, 1)]
    out = _assemble(run, parts[0], pl.q_bounds, shapes[0], q.dtype, lazy)
    if not return_lse and sc.sinks is None:
        return out
    lse = _assemble(run, parts[1], pl.q_bounds, shapes[1], q.dtype, lazy, -np.inf, axis=-1)
    out, lse = _fold_sinks(out, lse, sc.sinks)
    return (out, lse) if return_lse else out


def attention_backward(q: Any, k: Any, v: Any, out: Any, lse: Any,
                       dout: Any, *, client, causal: bool = False,
                       window: int | None = None, scale: float | None = None,
                       layout: str = "zigzag", chunks: int | None = None,
                       key_lengths: Any | None = None, mask: Any | None = None,
                       bias: Any | None = None, alibi_slopes: Any | None = None,
                       softcap: float | None = None, sinks: Any | None = None,
                       return_dbias: bool = False, return_dsinks: bool = False,
                       workers: list[str] | int | None = None):
    """:func:`attncore.attention_backward` over a Dask cluster, on the plan
    :func:`attention` uses: ``(dq, dk, dv)``, then ``dbias`` if
    ``return_dbias`` (NumPy, shaped like ``bias``: each pair's share comes
    back and is summed here) and ``dsinks`` if ``return_dsinks``, as
    :func:`attncore.attention_backward` returns them.

    ``out``, ``lse`` and ``dout`` (rows of q) are placed with q.  Each pair
    runs ``attncore.attention_backward`` on its slices on the query chunk's
    owner, given the whole attention's out and lse; dQ sums there, each
    worker sums its partial dK, dV of a key chunk and only that sum goes back
    to the key chunk's owner (so the bytes moved are twice the forward's).
    NumPy or dask arrays in, the same kind out.
    """
    addrs = workers_of(client, workers)
    arrays = (q, k, v, out, lse, dout)
    lazy = any(_is_dask(a) for a in arrays)
    if not lazy:
        q, k, v, out, lse, dout = (np.asarray(a) for a in arrays)
    pl, geo, sc = _plan_for(q, k, v, len(addrs), causal=causal, window=window, layout=layout,
                            chunks=chunks, key_lengths=key_lengths, scale=scale,
                            modifiers=dict(mask=mask, bias=bias, alibi_slopes=alibi_slopes,
                                           softcap=softcap, sinks=sinks))
    if return_dbias and sc.bias is None:
        raise ValueError("return_dbias=True needs a bias")
    if return_dsinks and sc.sinks is None:
        raise ValueError("return_dsinks=True needs sinks")
    for name, a, want in (("out", out, tuple(q.shape[:-1]) + (v.shape[-1],)),
                          ("lse", lse, tuple(q.shape[:-1])), ("dout", dout, None)):
        want = want or tuple(out.shape)
        if tuple(a.shape) != want or np.dtype(a.dtype) != np.dtype(q.dtype):
            raise ValueError(f"{name} must have shape {want} and dtype {np.dtype(q.dtype)}, got "
                             f"{tuple(a.shape)} {np.dtype(a.dtype)}")
    if _one_task(pl, (q, k, v, out, lse, dout, mask, bias), workers, chunks, lazy):
        kw = dict(causal=causal, window=window, scale=scale, key_lengths=key_lengths, mask=mask,
                  bias=bias, alibi_slopes=alibi_slopes, softcap=softcap, sinks=sinks,
                  return_dbias=return_dbias, return_dsinks=return_dsinks)
        return _in_one_task(client, addrs, "backward", W.whole_backward, q, k, v, out, lse, dout,
                            kw)
    run = _Run(client, addrs, "backward")
    qf = run.place("q", q, pl.q_bounds, pl.owner)
    kf = run.place("k", k, pl.k_bounds, pl.owner)
    vf = run.place("v", v, pl.k_bounds, pl.owner)
    of = run.place("o", out, pl.q_bounds, pl.owner)
    lf = run.place("l", lse[..., None], pl.q_bounds, pl.owner)
    df = run.place("do", dout, pl.q_bounds, pl.owner)
    pieces = run.place_pairs(pl, sc)
    kv = run.kv_where_needed(pl, kf, vf)
    grads = {}
    for i, j in pl.pairs:
        grads[i, j] = run.submit(W.backward, qf[i], *kv[pl.owner[i], j], of[i], lf[i], df[i],
                                 pl.q_bounds[i], pl.k_bounds[j], geo, at=pl.owner[i],
                                 name=("pair", i, j), return_dbias=return_dbias,
                                 **pieces.get((i, j), {}))
    dq = {i: run.submit(W.total, 0, *[g for (ii, _), g in grads.items() if ii == i],
                        at=pl.owner[i], name=("dq", i))
          for i in sorted({i for i, _ in pl.pairs})}
    dk: dict[int, Any] = {}
    dv: dict[int, Any] = {}
    for j in sorted({j for _, j in pl.pairs}):
        for index, name, into in ((1, "dk", dk), (2, "dv", dv)):
            # each worker sums its own pairs' partials of key chunk j; the sums move
            local = [run.submit(W.total, index, *[g for (i, jj), g in grads.items()
                                                  if jj == j and pl.owner[i] == w],
                                at=w, name=(name + "-part", j, w))
                     for w in sorted({pl.owner[i] for i, jj in pl.pairs if jj == j})]
            into[j] = run.submit(W.total, -1, *local, at=pl.owner[j], name=(name, j))
    dbias = {pair: run.submit(W.out_of, g, 3, at=pl.owner[pair[0]], name=("dbias",) + pair)
             for pair, g in grads.items()} if return_dbias else {}
    run.wait(list(dq.values()) + list(dk.values()) + list(dv.values()) + list(dbias.values()))
    result = (_assemble(run, dq, pl.q_bounds, tuple(q.shape), q.dtype, lazy),
              _assemble(run, dk, pl.k_bounds, tuple(k.shape), k.dtype, lazy),
              _assemble(run, dv, pl.k_bounds, tuple(v.shape), v.dtype, lazy))
    if return_dbias:
        result += (_whole_dbias(run, pl, sc, dbias, tuple(q.shape[:-3]), q.dtype),)
    if return_dsinks:
        result += (_sink_gradient(sc.sinks, out, lse, dout),)
    return result


def _whole_dbias(run: _Run, pl: Plan, sc: Scores, futures: dict, lead: tuple, dtype):
    """Each pair's d(bias) block gathered and summed into the bias's own shape."""
    pairs = list(futures)
    got = gather(run.client, [futures[p] for p in pairs], run.addrs,
                 "attncore.distributed.attention_backward")
    acc = np.zeros(sc.bias.shape, np.float64)
    for (i, j), part in zip(pairs, got):
        rows = slice(pl.q_bounds[i], pl.q_bounds[i + 1]) if acc.shape[-2] > 1 else slice(None)
        keys = slice(pl.k_bounds[j], pl.k_bounds[j + 1]) if acc.shape[-1] > 1 else slice(None)
        acc[..., rows, keys] += part
    batch = (1,) * len(lead) if acc.shape[0] == 1 else lead
    return sum_to_shape(acc.reshape(batch + acc.shape[1:]), sc.bias_shape).astype(dtype)


# --- the sharded KV cache --------------------------------------------------

async def _settled(futures: list) -> list:
    """Every actor future's result, or its exception, in order."""
    return await asyncio.gather(*futures, return_exceptions=True)


def _actor_results(client, calls: list[tuple[Any, str]], what: str) -> list:
    """The results of actor calls [(ActorFuture, its worker's address)], in
    order: ``(True, value)`` or ``(False, exception)`` for a call that raised.
    All are awaited at once on the client's event loop (one hand-over from
    this thread to it and back, not one a call), in slices of 0.5 s, asking
    the scheduler between them whether each unfinished call's worker is
    still there (a call to a worker that has died would wait for ever): if
    not, WorkerLostError."""
    futures = [fut for fut, _ in calls]
    while True:
        try:
            outs = client.sync(_settled, futures, callback_timeout=0.5)
            break
        except TimeoutError as e:
            _forget_frames(e)
            alive = alive_workers(client)
            for fut, addr in calls:
                if not fut.done() and addr not in alive:
                    raise WorkerLostError(f"{what}: worker {addr} left the cluster with its "
                                          f"shard of the cache") from None
    got = []
    for (_, addr), out in zip(calls, outs):
        if isinstance(out, BaseException):
            _forget_frames(out)
        if isinstance(out, OSError):  # "Unable to contact Actor's worker"
            raise WorkerLostError(f"{what}: worker {addr} cannot be reached ({out})") from None
        got.append((not isinstance(out, BaseException), out))
    return got


class KVCache:
    """A KV cache split over the workers of a Dask cluster: one
    :class:`attncore.KVCache` per shard, each held by a Dask actor on its own
    worker, never moved.

    ``append(k, v)`` writes to the tail shard, filling it to ``shard_tokens``
    before moving on to the next (an append that does not fit is split); the
    last shard takes whatever comes after every shard is full.
    ``attend(q)`` sends q to each shard holding tokens, which returns the
    partial ``(o, lse)`` of q against its part, and the partials merge here by
    :func:`attncore.merge`: per step a few KiB cross the network, whatever the
    cache's length.  Calls go from the client straight to the shards' actors,
    not through the scheduler (a step costs a round trip to the workers, not
    a task graph), and each actor runs its calls one at a time, in order.

    Parameters are :class:`attncore.KVCache`'s, plus ``client``, ``shards``
    (default: one per worker, at most the number of workers) and ``workers``
    (addresses).  Use as a context manager, or call :meth:`close`, to free
    the shards.
    """

    def __init__(self, client, kv_heads: int, head_dim: int, *, shards: int | None = None,
                 shard_tokens: int = 65536, batch: tuple[int, ...] = (),
                 value_dim: int | None = None, dtype: DTypeLike = np.float32,
                 workers: list[str] | None = None) -> None:
        addrs = workers_of(client, workers)
        shards = len(addrs) if shards is None else attncore._problem.positive_int(shards, "shards")
        if shards > len(addrs):
            raise ValueError(f"shards ({shards}) must not exceed the workers ({len(addrs)})")
        self.client, self.addrs = client, addrs[:shards]
        self.shard_tokens = attncore._problem.positive_int(shard_tokens, "shard_tokens")
        kwargs: dict[str, Any] = dict(kv_heads=kv_heads, head_dim=head_dim, batch=tuple(batch),
                      value_dim=value_dim, dtype=dtype)
        local = attncore.KVCache(**kwargs)  # checks the arguments here, before any worker does
        self.kv_heads, self.head_dim = local.kv_heads, local.head_dim
        self.value_dim, self.batch, self.dtype = local.value_dim, local.batch, local.dtype
        run = _Run(client, self.addrs, "kvcache")
        self._lengths = [0] * shards
        self._lock = threading.Lock()
        self._closed = False
        self._futures = [client.submit(W.Shard, kwargs, actor=True, workers=[a],
                                       allow_other_workers=False, pure=False,
                                       key=run.key("shard", s))
                         for s, a in enumerate(self.addrs)]
        wait_for(client, self._futures, self.addrs, "KVCache")
        self._actors = [f.result() for f in self._futures]

    @property
    def shards(self) -> int:
        return len(self.addrs)

    def __len__(self) -> int:
        return sum(self._lengths)

    @property
    def lengths(self) -> list[int]:
        """Tokens held by each shard."""
        return list(self._lengths)

    def _call(self, s: int, method: str, *args, what: str):
        """Call an actor method of shard s.  Where the scheduler already knows
        that the shard's worker is gone, Dask refuses the call itself, with a
        RuntimeError ("Worker holding Actor was lost"): WorkerLostError, as
        when the loss shows only while the call waits."""
        try:
            return getattr(self._actors[s], method)(*args)
        except RuntimeError as e:
            if self._futures[s].status in ("finished", "pending"):
                raise
            raise WorkerLostError(f"{what}: worker {self.addrs[s]} left the cluster with its "
                                  f"shard of the cache") from e

    def append(self, k: Any, v: Any) -> None:
        """Add t tokens: k (*batch, kv_heads, t, head_dim), v (..., t, value_dim).
        Each shard's part goes straight to its actor.  If a shard fails, the
        others keep what they took: ``lengths`` says what each holds."""
        self._check_open()
        k, v = np.asarray(k), np.asarray(v)
        for name, a, last, what in (("k", k, self.head_dim, "head_dim"),
                                    ("v", v, self.value_dim, "value_dim")):
            want = (*self.batch, self.kv_heads)
            if a.ndim != len(want) + 2 or a.shape[:-2] != want or a.shape[-1] != last:
                raise ValueError(f"{name} must have shape (*batch, kv_heads, t, {what}) = "
                                 f"{(*want, 't', last)}, got {a.shape}")
        t = k.shape[-2]
        checker = attncore.KVCache(self.kv_heads, self.head_dim, batch=self.batch,
                                   value_dim=self.value_dim, dtype=self.dtype, capacity=1)
        checker.append(k[..., :0, :] if t else k, v[..., :0, :] if t else v)  # its checks
        if v.shape[-2] != t:
            raise ValueError(f"k has {t} tokens but v has {v.shape[-2]}")
        with self._lock:
            lengths = list(self._lengths)  # counted here, kept only where the shard took them
            done, calls, refused = 0, [], None
            while done < t:  # the first shard with room is the tail; the last takes the rest
                s = next((s for s in range(self.shards) if lengths[s] < self.shard_tokens),
                         self.shards - 1)
                take = t - done if s == self.shards - 1 else \
                    min(self.shard_tokens - lengths[s], t - done)
                try:
                    calls.append((s, self._call(s, "append", k[..., done:done + take, :],
                                                v[..., done:done + take, :],
                                                what="KVCache.append")))
                except WorkerLostError as e:  # the calls already sent still count
                    refused = e
                    break
                lengths[s] += take
                done += take
            got = _actor_results(self.client, [(f, self.addrs[s]) for s, f in calls],
                                 "KVCache.append")
            for (s, _), (ok, value) in zip(calls, got):
                if ok:  # the shard's length as its actor reports it
                    self._lengths[s] = value
            for ok, value in got:
                if not ok:
                    raise value
            if refused is not None:
                raise refused

    def attend(self, q: Any, causal: bool = True, *, window: int | None = None,
               scale: float | None = None, return_lse: bool = False, mask: Any | None = None,
               bias: Any | None = None, alibi_slopes: Any | None = None,
               softcap: float | None = None, sinks: Any | None = None):
        """attention(q, keys, values, causal=causal, ...) over the whole cache,
        as :meth:`attncore.KVCache.attend`: q (*batch, H, n, head_dim) holds the
        n newest tokens' queries; bottom-right causal.  ``mask`` and ``bias``
        (..., H, n, len(cache)) travel cut per shard with its call."""
        self._check_open()
        q = np.asarray(q)
        with self._lock:
            m = len(self)
            if m == 0:
                raise ValueError("the cache is empty: append keys and values before attend")
            stand_k = np.zeros(self.batch + (self.kv_heads, 1, self.head_dim), self.dtype)
            stand_v = np.zeros(self.batch + (self.kv_heads, 1, self.value_dim), self.dtype)
            n = q.shape[-2] if q.ndim >= 2 else 0
            sc, stand_kw = _check_scores(q, n, m, mask=mask, bias=bias, alibi_slopes=alibi_slopes,
                                         softcap=softcap, sinks=sinks)
            scale, *_ = _call_shape(q, stand_k, stand_v, scale=scale, causal=causal, window=window,
                                    key_lengths=None, stand_kw=stand_kw)
            geo = dict(qa=0, n=n, m=m, causal=bool(causal), window=window, scale=scale,
                       key_lengths=None, **sc.geo())
            calls, start = [], 0
            for s, length in enumerate(self._lengths):
                if length:
                    cuts = {name: cut(a, 0, n, start, start + length)
                            for name, a in (("mask", sc.mask), ("bias", sc.bias))
                            if a is not None}
                    packed = pickle.dumps((q, length, start, geo, cuts), protocol=5)
                    calls.append((self._call(s, "attend", packed, what="KVCache.attend"),
                                  self.addrs[s]))
                start += length
            got = _actor_results(self.client, calls, "KVCache.attend")
        for ok, value in got:
            if not ok:
                raise value
        o, lse = merge_all([pickle.loads(value) for _, value in got])
        o, lse = _fold_sinks(o, lse, sc.sinks)
        return (o, lse) if return_lse else o

    def close(self) -> None:
        """Free the shards (a lost worker's shard went with it).  A closed cache
        takes no more calls."""
        if self._closed:
            return
        self._closed = True
        self._actors = []
        if self.client.status == "running":
            self.client.cancel(self._futures)
        self._futures = []

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the KV cache is closed")

    def __enter__(self) -> KVCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"attncore.distributed.KVCache(shards={self.shards}, lengths={self._lengths}, "
                f"kv_heads={self.kv_heads}, head_dim={self.head_dim}, dtype={self.dtype})")


# --- the link ---------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    """What :func:`ping` measured between two workers."""
    latency_s: float  # a small array from a to b: the transfer's own time
    bytes_per_s: float  # a large array from a to b
    call_s: float  # the round trip of an empty task from this client to b and back


def ping(client, a: str | None = None, b: str | None = None, *, nbytes: int = 16 << 20,
         repeats: int = 5) -> Link:
    """Measure the link from worker a to worker b (default: the first two):
    the best of ``repeats`` transfers of 8 bytes (latency) and of ``nbytes``
    (bandwidth), from b's transfer log, and the empty-call round trip."""
    addrs = workers_of(client)
    if len(addrs) < 2 and (a is None or b is None):
        raise ValueError("ping needs two workers")
    a = addrs[0] if a is None else a
    b = addrs[1] if b is None else b
    run = _Run(client, [a, b], "ping")
    best: dict[int, float] = {}
    for rep in range(repeats):
        for size in (8, int(nbytes)):
            key = run.key("x", size, rep)
            [src] = client.scatter({key: np.zeros(size, np.uint8)}, workers=[a],
                                   direct=True).values()
            run.submit(W.nbytes, src, at=1, name=("touch", size, rep)).result()
            got = client.run(W.transfer_of, key, workers=[b])[b]
            if got is None:
                raise RuntimeError("the transfer was not logged by the receiving worker")
            best[size] = min(best.get(size, math.inf), got[1])
            del src
    call = math.inf
    for rep in range(repeats):
        t0 = time.perf_counter()
        run.submit(W.nothing, rep, at=1, name=("call", rep)).result()
        call = min(call, time.perf_counter() - t0)
    return Link(best[8], nbytes / best[int(nbytes)], call)
