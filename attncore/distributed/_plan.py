"""The plan of a sequence-parallel attention: who owns which chunks, which
(query chunk, key chunk) pairs must be computed, and what that costs.

Pure Python and NumPy, no cluster and no engine: the Dask executor in this
package reads a plan, and another engine (an MPI ring) could read the same one.

Visibility, as in :func:`attncore.attention` (bottom-right causal): query row r
sees key c iff ``c <= r + off`` with ``off = m - n`` (``off = L - n`` for a batch
with ``key_lengths`` L, whose keys from L on are padding), and with a window
also ``c > r + off - window``.  Everything below is written in those global
indices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from attncore._problem import positive_int

LAYOUTS = ("zigzag", "contiguous")


def visible_cells(qa: int, qb: int, ka: int, kb: int, *, causal: bool, window: int | None,
                  off: int, limit: int) -> int:
    """How many (row, key) cells of rows [qa, qb) x keys [ka, kb) are visible:
    keys below ``limit`` (the batch's key length), and with ``causal`` the
    band ``r + off - window < c <= r + off``.  Summed in closed form over the
    pieces of :func:`segments`: a row's count grows by one a row ("causal"
    from the chunk's start), stays at the window, or shrinks ("reversed")."""
    total = 0
    for r0, r1, c0, c1, kind in segments(qa, qb, ka, kb, causal=causal, window=window, off=off,
                                         limit=limit):
        rows, first_plus_last = r1 - r0, r0 + r1 - 1
        if kind == "full":
            total += rows * (c1 - c0)
        elif kind == "reversed":  # row r sees [r + off - window + 1, c1)
            total += (rows * (2 * (c1 - off + window - 1) - first_plus_last)) // 2
        elif window and c0 > ka:  # the whole window, inside the chunk
            total += rows * window
        else:  # row r sees [c0, r + off + 1)
            total += (rows * (2 * (off + 1 - c0) + first_plus_last)) // 2
    return total


def segments(qa: int, qb: int, ka: int, kb: int, *, causal: bool, window: int | None, off: int,
             limit: int) -> list[tuple[int, int, int, int, str]]:
    """How to compute rows [qa, qb) against keys [ka, kb) with attncore's own
    masks, each piece one :func:`attncore.attention` call on a slice:
    ``(r0, r1, c0, c1, kind)``, global rows [r0, r1) against keys [c0, c1).

    * ``"full"``: every row sees all of [c0, c1) (``causal=False``);
    * ``"causal"``: bottom-right causal (with the window) on the slice.  Keys
      trimmed on the left keep the alignment; on the right the slice ends at
      the last row's diagonal, so the slice's own bottom-right corner is it;
    * ``"reversed"``: each row sees from its window's start to the end of the
      slice, a band that grows the other way; rows and keys reversed, it is a
      bottom-right causal band again (attention does not depend on the order
      of the keys, and the rows come back in order).

    Rows left out see no key of the chunk.
    """
    kend = min(kb, limit)
    if qb <= qa or kend <= ka:
        return []
    if not causal:
        return [(qa, qb, ka, kend, "full")]
    # the rows where a row's band starts to reach the chunk (r + off >= ka), to
    # reach past its end (r + off >= kend), and with a window where the band's
    # start enters the chunk (r + off - window + 1 > ka) and leaves it (>= kend)
    at = [ka - off, kend - off] + ([ka - off + window, kend - off + window - 1] if window else [])
    bounds = sorted({qa, qb} | {min(max(r, qa), qb) for r in at})
    out = []
    for r0, r1 in zip(bounds, bounds[1:]):
        if r1 <= r0:
            continue
        start = r0 + off - window + 1 if window else ka  # where row r0's band starts
        clipped_right = r0 + off + 1 >= kend
        clipped_left = start <= ka
        if not clipped_right:
            c0 = ka if clipped_left else start
            c1 = min(r1 + off, kend)
            if c1 > c0 and c1 > ka:
                out.append((r0, r1, max(c0, ka), c1, "causal"))
        elif clipped_left:
            out.append((r0, r1, ka, kend, "full"))
        elif start < kend:
            out.append((r0, r1, start, kend, "reversed"))
    return out


def _chunk_bounds(length: int, chunks: int) -> tuple[int, ...]:
    return tuple(c * length // chunks for c in range(chunks + 1))


def _owners(layout: str, chunks: int, workers: int) -> tuple[int, ...]:
    if layout == "zigzag":
        # with 2P chunks worker r holds chunks r and 2P-1-r: an early chunk (few
        # causal pairs) beside a late one (many), so every worker gets the same work
        return tuple(t if t < workers else 2 * workers - 1 - t
                     for t in (c % (2 * workers) for c in range(chunks)))
    per = chunks // workers
    return tuple(c // per for c in range(chunks))


@dataclass(frozen=True)
class Simulation:
    """What :meth:`Plan.simulate` predicts, phase by phase as the executor
    (:func:`attncore.distributed.attention`) runs them:

    ``place_s``   the client scatters each worker's q, k, v chunks, one worker
                  after another (a round trip and the bytes, each);
    ``copies_s``  each worker makes its own copy of every K/V chunk another
                  worker reads (one round of tasks, waited for);
    ``pairs_s``   the slowest worker, which runs its pairs one at a time as
                  their K/V are there: its own chunks at once, the others'
                  as they arrive one after another over the link (Dask runs a
                  task when its inputs are in), each task with its fixed cost
                  (``workers``: per worker ``(compute s, transfer s, waiting
                  s, tasks s, busy s)``, waiting: idle for a chunk);
    ``gather_s``  the merged outputs back to the client;

    and the whole against a perfectly balanced run of the same FLOPs without
    any of these costs (``ideal_s``) and one worker's compute (``serial_s``)."""
    place_s: float
    copies_s: float
    pairs_s: float
    gather_s: float
    workers: tuple[tuple[float, float, float, float, float], ...]
    ideal_s: float
    serial_s: float

    @property
    def time_s(self) -> float:
        return self.place_s + self.copies_s + self.pairs_s + self.gather_s

    @property
    def efficiency(self) -> float:
        """ideal / predicted: 1 when the work is balanced, every transfer hides
        and nothing costs but the arithmetic."""
        return self.ideal_s / self.time_s if self.time_s else 1.0

    @property
    def speedup(self) -> float:
        """One worker's compute / the predicted time."""
        return self.serial_s / self.time_s if self.time_s else 1.0

    @property
    def hidden(self) -> bool:
        """Does every transfer hide: no worker ever waits for a K/V chunk?"""
        return all(waiting == 0 for _, _, waiting, _, _ in self.workers)


@dataclass(frozen=True)
class Plan:
    """A plan made by :func:`plan`; read its fields, :meth:`pairs_of`,
    :meth:`simulate` and :meth:`table`."""
    n: int
    m: int
    workers: int
    causal: bool
    window: int | None
    layout: str
    chunks: int
    q_bounds: tuple[int, ...]  # query chunk c is rows [q_bounds[c], q_bounds[c+1])
    k_bounds: tuple[int, ...]  # key chunk c is keys [k_bounds[c], k_bounds[c+1])
    owner: tuple[int, ...]  # the worker of query chunk c and of key chunk c
    pairs: tuple[tuple[int, int], ...]  # (query chunk, key chunk): computed on owner[query chunk]
    cells: tuple[int, ...]  # visible (row, key) cells of each pair, summed over batch and heads
    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    itemsize: int
    kv_itemsize: int
    key_lengths: tuple[int, ...] | None = None

    # the bytes of a chunk of each array, all batches and heads
    def q_bytes(self, c: int) -> int:
        rows = self.q_bounds[c + 1] - self.q_bounds[c]
        return self.batch * self.heads * rows * self.head_dim * self.itemsize

    def kv_bytes(self, c: int) -> int:
        keys = self.k_bounds[c + 1] - self.k_bounds[c]
        width = self.head_dim + self.value_dim
        return self.batch * self.kv_heads * keys * width * self.kv_itemsize

    def out_bytes(self, c: int) -> int:
        rows = self.q_bounds[c + 1] - self.q_bounds[c]
        return self.batch * self.heads * rows * (self.value_dim + 1) * self.itemsize

    @cached_property
    def _by_worker(self) -> list[list[tuple[int, int]]]:
        per: list[list[tuple[int, int]]] = [[] for _ in range(self.workers)]
        for i, j in self.pairs:
            per[self.owner[i]].append((i, j))
        return per

    def pairs_of(self, worker: int) -> list[tuple[int, int]]:
        """The pairs worker computes: those whose query chunk it owns."""
        return list(self._by_worker[worker])

    def fetched(self, worker: int) -> list[int]:
        """The key chunks worker must receive: another worker's, that one of its pairs reads."""
        return sorted({j for _, j in self._by_worker[worker] if self.owner[j] != worker})

    @property
    def flops(self) -> list[int]:
        """Predicted FLOPs per worker: 2·(d_k + d_v) per visible cell."""
        per = [0] * self.workers
        for (i, _), cells in zip(self.pairs, self.cells):
            per[self.owner[i]] += 2 * (self.head_dim + self.value_dim) * cells
        return per

    @property
    def bytes_in(self) -> list[int]:
        """Predicted bytes each worker receives from the others in the forward
        (each foreign K/V chunk once, however many of its pairs read it)."""
        return [sum(self.kv_bytes(j) for j in self.fetched(w)) for w in range(self.workers)]

    def bytes_moved(self, backward: bool = False) -> int:
        """Worker-to-worker bytes of the forward, or of the backward: there each
        foreign K/V chunk comes in and one partial dK, dV per chunk goes back."""
        return sum(self.bytes_in) * (2 if backward else 1)

    @property
    def ring_bytes(self) -> int:
        """What a ring passing every K/V chunk to every worker would move: (P-1)·KV."""
        return (self.workers - 1) * sum(self.kv_bytes(c) for c in range(self.chunks))

    @property
    def peak_bytes(self) -> list[int]:
        """Predicted bytes a worker holds when all of one call's data is resident:
        its own q, k, v and output chunks, the K/V chunks it fetched, and one
        partial output (o, lse) per pair until they are merged."""
        per = []
        for w in range(self.workers):
            own = [c for c in range(self.chunks) if self.owner[c] == w]
            held = sum(self.q_bytes(c) + self.kv_bytes(c) + self.out_bytes(c) for c in own)
            held += sum(self.kv_bytes(j) for j in self.fetched(w))
            held += sum(self.out_bytes(i) for i, _ in self.pairs_of(w))
            per.append(held)
        return per

    def simulate(self, flops_per_s: float, link_bytes_per_s: float, latency_s: float = 0.0,
                 read_bytes_per_s: float | None = None, *, round_trip_s: float = 0.0,
                 task_s: float = 0.0, client_bytes_per_s: float | None = None) -> Simulation:
        """Predict the time of the plan as the executor runs it, on workers of
        ``flops_per_s`` attention FLOP/s each (one thread's rate in a worker
        process, as ``attncore bench --distributed`` measures it), linked at
        ``link_bytes_per_s`` with ``latency_s`` per message (see :func:`ping`);
        ``round_trip_s``: a task submitted and waited for from the client (the
        empty call); ``task_s``: a task's fixed cost on its worker;
        ``client_bytes_per_s``: the client's scatter and gather rate (default:
        as fast as the link).  A pair's compute is ``max(flops / flops_per_s,
        bytes read / read_bytes_per_s)`` (the roofline; reads ignored if no rate
        is given).  The phases are :class:`Simulation`'s."""
        P = self.workers
        client = client_bytes_per_s or link_bytes_per_s
        flops = 2 * (self.head_dim + self.value_dim)
        compute: dict[tuple[int, int], float] = {}
        for (i, j), cells in zip(self.pairs, self.cells):
            t = flops * cells / flops_per_s
            if read_bytes_per_s:
                t = max(t, (self.q_bytes(i) + self.kv_bytes(j)) / read_bytes_per_s)
            compute[i, j] = t
        merged = {i for i, _ in self.pairs}
        readers: dict[int, set[int]] = {}
        for i, j in self.pairs:
            readers.setdefault(j, set()).add(self.owner[i])
        own_copies = [0] * P
        for j in readers:  # the owner's copy of k and of v (kv_where_needed)
            own_copies[self.owner[j]] += 2
        place = sum(round_trip_s + sum(self.q_bytes(c) + self.kv_bytes(c) for c in range(
            self.chunks) if self.owner[c] == w) / client for w in sorted(set(self.owner)))
        copies = round_trip_s + max(own_copies) * task_s
        workers = []
        for w in range(P):
            arrive, t = {}, latency_s
            for j in self.fetched(w):  # one after another over the link
                t += self.kv_bytes(j) / link_bytes_per_s
                arrive[j] = t
            clock = waiting = 0.0
            pairs = sorted(self.pairs_of(w), key=lambda pair: arrive.get(pair[1], 0.0))
            for pair in pairs:
                start = max(clock, arrive.get(pair[1], 0.0))
                waiting += start - clock
                clock = start + compute[pair] + task_s
            n_tasks = len(pairs) + 2 * len(arrive) + sum(1 for i in merged if self.owner[i] == w)
            busy = clock + (n_tasks - len(pairs)) * task_s
            workers.append((sum(compute[p] for p in pairs), max(arrive.values(), default=0.0),
                            waiting, n_tasks * task_s, busy))
        gather = (round_trip_s + sum(self.out_bytes(i) for i in merged) / client) if merged \
            else 0.0
        serial = flops * sum(self.cells) / flops_per_s
        return Simulation(place, copies, max(b for *_, b in workers), gather, tuple(workers),
                          serial / P, serial)

    def table(self) -> list[dict]:
        """One row per worker: chunks, pairs, FLOPs, bytes in, peak bytes."""
        return [{"worker": w, "chunks": [c for c in range(self.chunks) if self.owner[c] == w],
                 "pairs": len(self.pairs_of(w)), "flops": self.flops[w],
                 "bytes_in": self.bytes_in[w], "peak_bytes": self.peak_bytes[w]}
                for w in range(self.workers)]


def plan(n: int, m: int, workers: int, *, causal: bool = False, layout: str = "zigzag",
         chunks: int | None = None, window: int | None = None, batch: int = 1, heads: int = 1,
         kv_heads: int | None = None, head_dim: int = 64, value_dim: int | None = None,
         itemsize: int = 4, kv_itemsize: int | None = None,
         key_lengths: list[int] | tuple[int, ...] | np.ndarray | None = None) -> Plan:
    """Plan attention of n queries against m keys on ``workers`` workers.

    The queries and the keys are each cut into ``chunks`` equal chunks along
    the sequence, chunk c of both owned by one worker: ``layout="zigzag"``
    (default ``chunks = 2·workers``, a multiple of it) gives worker r chunks r
    and 2P-1-r of every 2P, balancing causal work; ``"contiguous"`` (default
    ``chunks = workers``) gives each worker one run.  Every pair (query chunk
    i, key chunk j) with a visible cell is computed on the owner of i, which
    receives key chunk j if it is another's; pairs that ``causal`` /
    ``window`` (or every batch's ``key_lengths``) hide wholly are never
    computed nor sent.  ``causal`` and ``window`` are :func:`attncore.attention`'s.

    ``batch`` (the product of the batch dims), ``heads``, ``kv_heads``
    (default ``heads``), ``head_dim``, ``value_dim`` (default ``head_dim``),
    ``itemsize`` (of q and the output) and ``kv_itemsize`` (default
    ``itemsize``) size the predicted FLOPs, bytes and memory.
    """
    n = positive_int(n, "n")
    m = positive_int(m, "m")
    workers = positive_int(workers, "workers")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    unit = 2 * workers if layout == "zigzag" else workers
    chunks = unit if chunks is None else positive_int(chunks, "chunks")
    if chunks % unit:
        raise ValueError(f"layout={layout!r} on {workers} workers needs chunks to be a multiple "
                         f"of {unit}, got {chunks}")
    if window is not None:
        window = positive_int(window, "window")
        if not causal:
            raise ValueError("window needs causal=True: it is the band of w keys ending at the "
                             "causal diagonal")
    kv_heads = heads if kv_heads is None else positive_int(kv_heads, "kv_heads")
    if positive_int(heads, "heads") % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    head_dim = positive_int(head_dim, "head_dim")
    value_dim = head_dim if value_dim is None else positive_int(value_dim, "value_dim")
    batch = positive_int(batch, "batch")
    if key_lengths is None:
        lengths = {m: batch}
        kl = None
    else:
        kl = tuple(int(x) for x in np.asarray(key_lengths).reshape(-1))
        if len(kl) != batch or min(kl, default=0) < 0 or max(kl, default=0) > m:
            raise ValueError(f"key_lengths must be {batch} values in [0, m={m}]")
        lengths = {}
        for L in kl:
            lengths[L] = lengths.get(L, 0) + 1
    qb, kb = _chunk_bounds(n, chunks), _chunk_bounds(m, chunks)
    pairs, cells = [], []
    for i in range(chunks):
        for j in range(chunks):
            c = sum(count * visible_cells(qb[i], qb[i + 1], kb[j], kb[j + 1], causal=causal,
                                          window=window, off=L - n, limit=L)
                    for L, count in lengths.items())
            if c:
                pairs.append((i, j))
                cells.append(c * heads)
    return Plan(n, m, workers, bool(causal), window, layout, chunks, qb, kb,
                _owners(layout, chunks, workers), tuple(pairs), tuple(cells), batch, heads,
                kv_heads, head_dim, value_dim, positive_int(itemsize, "itemsize"),
                itemsize if kv_itemsize is None else positive_int(kv_itemsize, "kv_itemsize"), kl)


def decode_step_time(m: int, shards: int, *, kv_heads: int, head_dim: int, itemsize: int,
                     read_bytes_per_s: float, latency_s: float, batch: int = 1,
                     value_dim: int | None = None) -> float:
    """Predicted time of one decode step over a cache of m tokens split into
    ``shards``: the query goes to every shard's actor at once, each streams
    its K and V once (the read roof), and the partials come back to the
    client, which merges them: one round trip (``latency_s``) and the longest
    shard's read."""
    dv = head_dim if value_dim is None else value_dim
    read = batch * kv_heads * math.ceil(m / shards) * (head_dim + dv) * itemsize
    return latency_s + read / read_bytes_per_s
