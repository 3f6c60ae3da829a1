"""The functions Dask runs on the workers.  They are module-level, so a task
names them by reference, and import no more than attncore and NumPy (Dask
itself only to learn the worker's thread count)."""

from __future__ import annotations

import pickle
import threading

import numpy as np

import attncore
from attncore.distributed._blocks import block_backward, block_forward, merge_all

# One attncore call at a time in a worker process, on all the worker's
# threads: a worker with T threads runs T tasks at once, and T calls of T
# OpenMP threads each would put T² threads on T cores.
_one_call = threading.Lock()

_threads_set = False


def _use_worker_threads() -> None:
    """attncore runs on the threads this worker was given (not on every core of
    its host): set once per worker process, on its first task.  A worker
    living in the client's own process (``processes=False``) leaves the
    process's setting alone: it is the user's, and shared by every worker there."""
    global _threads_set
    if _threads_set:
        return
    from distributed import default_client, get_worker

    try:
        n = get_worker().state.nthreads
    except ValueError:  # not on a worker (a local test calling the function)
        return
    try:
        default_client()
    except ValueError:  # no client here: a worker process of its own
        attncore.set_num_threads(n)
    _threads_set = True


def forward(q, k, v, qa: int, ka: int, geo: dict, mask=None, bias=None):
    with _one_call:
        _use_worker_threads()
        return block_forward(q, k, v, qa, ka, mask=mask, bias=bias, **geo)


def backward(q, k, v, out, lse, dout, qa: int, ka: int, geo: dict, mask=None, bias=None,
             return_dbias: bool = False):
    with _one_call:
        _use_worker_threads()
        return block_backward(q, k, v, out, lse, dout, qa, ka, mask=mask, bias=bias,
                              return_dbias=return_dbias, **geo)


def whole_forward(q, k, v, kw: dict):
    """A whole (small) call in one task: attncore.attention(..., return_lse=True)."""
    with _one_call:
        _use_worker_threads()
        return attncore.attention(q, k, v, return_lse=True, **kw)


def whole_backward(q, k, v, out, lse, dout, kw: dict):
    with _one_call:
        _use_worker_threads()
        return attncore.attention_backward(q, k, v, out, lse, dout, **kw)


def merge(*parts):
    with _one_call:
        _use_worker_threads()
        return merge_all(list(parts))


def out_of(pair, index: int) -> np.ndarray:
    """The index-th array of a task's tuple, as its own piece of data (a key of
    its own moves on its own, and is counted exactly in the transfer logs)."""
    return pair[index]


def total(index: int, *parts) -> np.ndarray:
    """The sum of the index-th array of each part (index -1: the parts themselves)."""
    arrays = [p if index < 0 else p[index] for p in parts]
    acc = arrays[0].copy()
    for a in arrays[1:]:
        acc += a
    return acc


def same(a):
    return a


def nothing(*_args) -> None:
    return None


def attention_seconds(n: int, heads: int, d: int, causal: bool, min_time: float = 0.3) -> float:
    """The best time of attncore.attention on this worker's own threads, on
    inputs made here (attncore.bench's timer, repeating for ``min_time`` s)."""
    from attncore.bench.timing import best_time

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
    with _one_call:
        _use_worker_threads()
        return best_time(lambda: attncore.attention(q, k, v, causal=causal), min_time=min_time)


def nbytes(a: np.ndarray) -> int:
    return int(a.nbytes)


# --- the transfer logs -----------------------------------------------------

def incoming(prefixes: list[str], dask_worker=None) -> tuple[int, bool]:
    """Bytes this worker received from other workers, of the keys that start
    with a prefix; and whether its log is full (older transfers dropped)."""
    log = dask_worker.transfer_incoming_log
    got = 0
    for entry in log:
        for key, size in entry["keys"].items():
            if isinstance(key, str) and key.startswith(tuple(prefixes)):
                got += size
    return got, log.maxlen is not None and len(log) >= log.maxlen


def transfer_of(key: str, dask_worker=None) -> tuple[int, float] | None:
    """(bytes, seconds) of the transfer that brought key here, if one did."""
    for entry in dask_worker.transfer_incoming_log:
        if key in entry["keys"]:
            return int(entry["total"]), float(entry["duration"])
    return None


# --- the shards of a distributed KV cache ----------------------------------

class Shard:
    """One shard of a distributed KV cache: a Dask actor living on its worker
    (``client.submit(Shard, kwargs, actor=True)``), holding an
    :class:`attncore.KVCache`.  Its methods are called straight from the
    client, without the scheduler, one at a time and in order."""

    def __init__(self, kwargs: dict) -> None:
        self.cache = attncore.KVCache(**kwargs)

    def append(self, k, v) -> int:
        self.cache.append(k, v)
        return len(self.cache)

    def nothing(self) -> None:
        """An empty call: a decode step's floor, the round trip to the actor."""
        return None

    def attend(self, packed: bytes) -> bytes:
        """:meth:`attend_block` of the pickled ``(q, length, ka, geo, cuts)``,
        its result pickled: a step's arguments and its result cross as one
        frame each, where Dask would serialise each array of an actor call
        on its own (a decode step on 2 shards: 6.2 ms before, 4.2 after)."""
        q, length, ka, geo, cuts = pickle.loads(packed)
        return pickle.dumps(self.attend_block(q, length, ka, geo, **cuts), protocol=5)

    def attend_block(self, q, length: int, ka: int, geo: dict, mask=None, bias=None):
        """(o, lse) of the queries against this shard's first ``length`` tokens,
        which are the global keys ka, ka+1, ...: the later appends are not seen
        (``mask`` and ``bias``: this shard's cut of the call's)."""
        keys, values = self.cache.keys, self.cache.values
        with _one_call:
            _use_worker_threads()
            return block_forward(q, keys[..., :length, :], values[..., :length, :], geo["qa"],
                                 ka, mask=mask, bias=bias,
                                 **{k: val for k, val in geo.items() if k != "qa"})
