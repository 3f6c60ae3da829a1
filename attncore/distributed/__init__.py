"""attncore past one machine: sequence-parallel attention and a sharded KV cache
on a Dask cluster (``pip install 'attncore[distributed]'``).

    >>> from distributed import Client, LocalCluster
    >>> import attncore.distributed as ad
    >>> client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    >>> out = ad.attention(q, k, v, client=client, causal=True)   # == attncore.attention

:func:`attncore.merge` is what makes it work: attention over any split of the
keys is the merge of the parts' ``(o, lse)``.  So the sequence is cut into
chunks, each worker owns some query chunks and the same key chunks
(:func:`plan`, zigzag by default, which balances causal work), each visible
(query chunk, key chunk) pair is an ``attncore.attention`` call on the query
chunk's owner, and only K/V chunks move.

:func:`plan` and everything it returns are pure Python (no cluster, no Dask):
what each worker owns, computes, receives and holds, and
:meth:`Plan.simulate` predicts the time on a cluster of given speed and link.
The rest imports Dask when called.
"""

from attncore.distributed._plan import Plan, Simulation, decode_step_time, plan

_DASK_NAMES = ("attention", "attention_backward", "KVCache", "ping", "Link", "transfers",
               "Transfers", "WorkerLostError", "workers_of")


def __getattr__(name: str):
    """The Dask executor is imported on first use: plan() needs no Dask."""
    if name in _DASK_NAMES:
        from attncore.distributed import _dask

        return getattr(_dask, name)
    raise AttributeError(f"module 'attncore.distributed' has no attribute {name!r}")


__all__ = ["plan", "Plan", "Simulation", "decode_step_time", *_DASK_NAMES]
