"""attncore.distributed's plan and its blocks: pure Python, no cluster, no Dask.

The plan must cover every visible (row, key) cell by exactly one computed
pair, and the blocks a worker computes must merge into attncore.attention
(and sum into attncore.attention_backward) whatever the chunking, mask,
window, key lengths or n != m.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attncore
from attncore.distributed import decode_step_time, plan
from attncore.distributed._blocks import block_backward, block_forward, merge_all


def _visible(n, m, causal, window, L):
    """(n, m) bool: may row i see key j (one batch of key length L)?"""
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    seen = np.broadcast_to(j < L, (n, m))
    if causal:
        seen = seen & (j <= i + (L - n))
        if window:
            seen = seen & (j > i + (L - n) - window)
    return seen


@st.composite
def problems(draw):
    n, m = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    workers = draw(st.integers(1, 4))
    layout = draw(st.sampled_from(["zigzag", "contiguous"]))
    unit = 2 * workers if layout == "zigzag" else workers
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), st.integers(1, 16))) if causal else None
    lengths = draw(st.one_of(st.none(), st.lists(st.integers(0, m), min_size=2, max_size=2)))
    return dict(n=n, m=m, workers=workers, layout=layout, chunks=unit * draw(st.integers(1, 3)),
                causal=causal, window=window, key_lengths=lengths)


@given(problems())
def test_every_visible_cell_is_in_exactly_one_computed_pair(pr):
    batch = 2 if pr["key_lengths"] is not None else 1
    p = plan(pr["n"], pr["m"], pr["workers"], causal=pr["causal"], window=pr["window"],
             layout=pr["layout"], chunks=pr["chunks"], batch=batch, key_lengths=pr["key_lengths"])
    assert len(set(p.pairs)) == len(p.pairs)
    lengths = pr["key_lengths"] or [pr["m"]]
    seen = np.zeros((pr["n"], pr["m"]), np.int64)  # visible cells, summed over the batches
    for L in lengths:
        seen += _visible(pr["n"], pr["m"], pr["causal"], pr["window"], L)
    chunk_q = np.searchsorted(p.q_bounds, np.arange(pr["n"]), side="right") - 1
    chunk_k = np.searchsorted(p.k_bounds, np.arange(pr["m"]), side="right") - 1
    want = {}
    for i, j in zip(*np.nonzero(seen)):
        pair = (int(chunk_q[i]), int(chunk_k[j]))
        want[pair] = want.get(pair, 0) + int(seen[i, j])
    assert dict(zip(p.pairs, p.cells)) == want  # the pairs with a visible cell, and their cells
    assert sum(p.cells) == seen.sum()
    assert sum(p.flops) == 2 * 128 * seen.sum()  # d_k = d_v = 64


def test_zigzag_gives_worker_r_chunks_r_and_2p_minus_1_minus_r():
    p = plan(4096, 4096, 4, causal=True)
    assert p.chunks == 8
    assert p.owner == (0, 1, 2, 3, 3, 2, 1, 0)
    assert plan(4096, 4096, 4, chunks=16).owner == (0, 1, 2, 3, 3, 2, 1, 0) * 2
    assert plan(4096, 4096, 4, layout="contiguous").owner == (0, 1, 2, 3)
    assert plan(4096, 4096, 2, layout="contiguous", chunks=4).owner == (0, 0, 1, 1)


def test_zigzag_balances_causal_work_and_contiguous_does_not():
    zig = plan(4096, 4096, 2, causal=True)
    con = plan(4096, 4096, 2, causal=True, layout="contiguous")
    assert zig.flops[0] == zig.flops[1]
    assert con.flops[1] / con.flops[0] == pytest.approx(3, rel=0.01)  # 3c² + c²/2 against c²/2
    assert sum(zig.flops) == sum(con.flops)


def test_bytes_moved_against_the_ring():
    # n = m = 8192, H = 4, d = 64, float32, 2 workers: a K/V chunk of 2048 tokens is 4 MiB
    zig = plan(8192, 8192, 2, causal=True, heads=4)
    con = plan(8192, 8192, 2, causal=True, heads=4, layout="contiguous", chunks=4)
    kv = 4 * 2048 * 128 * 4
    assert zig.fetched(0) == [1, 2] and zig.fetched(1) == [0]
    assert zig.bytes_moved() == 3 * kv  # 12 MiB
    assert con.bytes_moved() == 2 * kv  # 8 MiB: only the second worker reads the first's keys
    assert zig.ring_bytes == con.ring_bytes == 4 * kv  # (P-1)·KV = 16 MiB
    assert zig.bytes_moved(backward=True) == 2 * zig.bytes_moved()
    full = plan(8192, 8192, 2, heads=4)
    assert full.bytes_moved() == full.ring_bytes  # without a mask every worker reads every chunk


def test_window_pairs_outside_the_band_are_never_computed():
    p = plan(8192, 8192, 4, causal=True, window=512, chunks=16)  # chunks of 512 tokens
    assert all(0 <= i - j <= 1 for i, j in p.pairs)
    assert len(p.pairs) == 16 + 15
    assert sum(p.cells) == sum(min(i + 1, 512) for i in range(8192))


def test_gqa_and_dtypes_size_the_bytes():
    p = plan(1024, 1024, 2, heads=8, kv_heads=2, head_dim=64, value_dim=32, itemsize=4,
             kv_itemsize=2, batch=3)
    assert p.kv_bytes(0) == 3 * 2 * 256 * (64 + 32) * 2
    assert p.q_bytes(0) == 3 * 8 * 256 * 64 * 4
    assert p.out_bytes(0) == 3 * 8 * 256 * 33 * 4
    own = p.q_bytes(0) + p.kv_bytes(0) + p.out_bytes(0) + p.q_bytes(3) + p.kv_bytes(3) \
        + p.out_bytes(3)
    fetched = p.kv_bytes(1) + p.kv_bytes(2)
    partials = sum(p.out_bytes(i) for i, _ in p.pairs_of(0))
    assert p.peak_bytes[0] == own + fetched + partials


def test_simulate_balanced_full_attention_on_an_infinite_link_is_ideal():
    p = plan(4096, 4096, 2, layout="contiguous")
    sim = p.simulate(flops_per_s=1e11, link_bytes_per_s=math.inf)
    assert sim.efficiency == pytest.approx(1.0)
    assert sim.speedup == pytest.approx(2.0)
    assert sim.hidden
    pair = 2 * 128 * 2048 * 2048 / 1e11
    # each worker: its local pair, then the pair on the other's chunk, never waiting
    assert [w[0] for w in sim.workers] == pytest.approx([2 * pair, 2 * pair])
    assert [w[2] for w in sim.workers] == [0, 0]
    assert sim.time_s == pytest.approx(2 * pair)
    assert sim.place_s == sim.copies_s == sim.gather_s == 0


def test_simulate_a_slow_link_shows_the_transfer_not_hidden():
    p = plan(4096, 4096, 2, layout="contiguous")
    kv = 2048 * 128 * 4
    compute = 2 * 128 * 2048 * 2048 / 1e11
    slow = kv / (2 * compute)  # the transfer takes twice a pair's compute
    sim = p.simulate(flops_per_s=1e11, link_bytes_per_s=slow, latency_s=1e-3,
                     client_bytes_per_s=math.inf)
    assert not sim.hidden
    assert sim.workers[1][1] == pytest.approx(2 * compute + 1e-3)
    # the local pair runs under the transfer, the foreign one after it arrives
    assert sim.workers[1][2] == pytest.approx(compute + 1e-3)
    assert sim.time_s == pytest.approx(2 * compute + 1e-3 + compute)
    assert sim.efficiency < 1
    # the roofline: a read rate so low that reading the chunks bounds the pair
    read = p.simulate(flops_per_s=1e11, link_bytes_per_s=math.inf, read_bytes_per_s=1e3)
    assert read.workers[0][0] == pytest.approx(2 * (p.q_bytes(0) + p.kv_bytes(0)) / 1e3)


def test_simulate_counts_the_executors_fixed_costs():
    """The phases the executor runs: one scatter per worker, one round of the
    owners' copies, each task's cost on its worker, the gather."""
    p = plan(4096, 4096, 2, layout="contiguous")
    rt, task, client = 0.01, 0.002, 1e9
    sim = p.simulate(flops_per_s=1e11, link_bytes_per_s=math.inf, round_trip_s=rt, task_s=task,
                     client_bytes_per_s=client)
    moved_in = sum(p.q_bytes(c) + p.kv_bytes(c) for c in range(2))
    assert sim.place_s == pytest.approx(2 * rt + moved_in / client)
    assert sim.copies_s == pytest.approx(rt + 2 * task)  # each worker copies its k and v once
    # per worker: 2 pairs, the 2 copies of the chunk it fetches, 1 merge
    assert [w[3] for w in sim.workers] == pytest.approx([5 * task, 5 * task])
    assert sim.gather_s == pytest.approx(rt + sum(p.out_bytes(c) for c in range(2)) / client)
    assert sim.time_s == pytest.approx(sim.place_s + sim.copies_s + sim.pairs_s + sim.gather_s)
    # chunks arriving one by one: a worker starts on each as it comes
    many = plan(8192, 8192, 2, causal=True, chunks=8)
    kv = many.kv_bytes(0)
    piped = many.simulate(1e11, link_bytes_per_s=kv / 1e-3)  # 1 ms a chunk
    assert piped.hidden and piped.pairs_s == pytest.approx(piped.workers[0][0])
    # 20 ms a chunk: worker 0 fetches 4 and waits, its last pair starting after the last
    slow = many.simulate(1e11, link_bytes_per_s=kv / 20e-3)
    assert not slow.hidden and slow.workers[0][1] == pytest.approx(0.08)
    assert slow.workers[0][4] > 0.08
    zigzag = plan(4096, 4096, 2, causal=True)
    assert zigzag.simulate(1e11, 1e9, round_trip_s=rt, task_s=task).time_s > \
        zigzag.simulate(1e11, 1e9).time_s


def test_decode_step_time():
    t = decode_step_time(1 << 20, 8, kv_heads=8, head_dim=128, itemsize=2,
                         read_bytes_per_s=1e10, latency_s=1e-3)
    assert t == pytest.approx(1e-3 + 8 * (1 << 17) * 256 * 2 / 1e10)


@pytest.mark.parametrize("kwargs, match", [
    (dict(layout="striped"), "layout"),
    (dict(chunks=3), "multiple of 4"),
    (dict(layout="contiguous", chunks=3), "multiple of 2"),
    (dict(window=8), "window needs causal"),
    (dict(heads=6, kv_heads=4), "multiple of kv_heads"),
    (dict(key_lengths=[5000]), "key_lengths"),
    (dict(batch=2, key_lengths=[5]), "key_lengths"),
])
def test_plan_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan(4096, 4096, 2, **kwargs)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4"])
def test_plan_refuses_bad_sizes(bad):
    with pytest.raises((ValueError, TypeError)):
        plan(bad, 16, 2)
    with pytest.raises((ValueError, TypeError)):
        plan(16, 16, bad)


@given(problems(), st.sampled_from([np.float32, np.float64]), st.integers(0, 2**32 - 1))
def test_blocks_merge_into_attention_and_sum_into_its_backward(pr, dtype, seed):
    """What each worker computes, done here in one process: the merge of a
    query chunk's pairs is attncore.attention's rows, and the blocks'
    gradients sum to attncore.attention_backward's."""
    rng = np.random.default_rng(seed)
    n, m = pr["n"], pr["m"]
    lengths = pr["key_lengths"]
    B = 2 if lengths is not None else 1
    q = rng.standard_normal((B, 4, n, 8)).astype(dtype)
    k = rng.standard_normal((B, 2, m, 8)).astype(dtype)
    v = rng.standard_normal((B, 2, m, 5)).astype(dtype)
    mask = dict(causal=pr["causal"], window=pr["window"], key_lengths=lengths)
    p = plan(n, m, pr["workers"], layout=pr["layout"], chunks=pr["chunks"], batch=B,
             causal=pr["causal"], window=pr["window"], key_lengths=lengths)
    want, want_lse = attncore.attention(q, k, v, return_lse=True, **mask)
    geo = dict(n=n, m=m, causal=pr["causal"], window=pr["window"], scale=8 ** -0.5,
               key_lengths=None if lengths is None else np.asarray(lengths))
    out = np.zeros_like(want)
    lse = np.full_like(want_lse, -np.inf)
    dout = rng.standard_normal(want.shape).astype(dtype)
    grads = [np.zeros_like(a) for a in (q, k, v)]
    qs = lambda a, i: a[..., p.q_bounds[i]:p.q_bounds[i + 1], :]  # noqa: E731
    ks = lambda a, j: a[..., p.k_bounds[j]:p.k_bounds[j + 1], :]  # noqa: E731
    for i in range(p.chunks):
        mine = [j for ii, j in p.pairs if ii == i]
        if not mine:
            continue
        parts = [block_forward(qs(q, i), ks(k, j), ks(v, j), p.q_bounds[i], p.k_bounds[j], **geo)
                 for j in mine]
        qs(out, i)[...], lse[..., p.q_bounds[i]:p.q_bounds[i + 1]] = merge_all(parts)
        for j in mine:
            dq, dk, dv = block_backward(qs(q, i), ks(k, j), ks(v, j), qs(want, i),
                                        want_lse[..., p.q_bounds[i]:p.q_bounds[i + 1]],
                                        qs(dout, i), p.q_bounds[i], p.k_bounds[j], **geo)
            qs(grads[0], i)[...] += dq
            ks(grads[1], j)[...] += dk
            ks(grads[2], j)[...] += dv
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, atol=tol, rtol=tol)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
    np.testing.assert_allclose(lse, want_lse, atol=tol, rtol=tol)
    for got, ref in zip(grads, attncore.attention_backward(q, k, v, want, want_lse, dout,
                                                           **mask)):
        np.testing.assert_allclose(got, ref, atol=20 * tol, rtol=20 * tol)
