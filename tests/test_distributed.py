"""attncore.distributed on a real Dask cluster: two worker processes of one
thread (spawned, Dask's default), started once for the module.

Skipped without the extra (``pip install 'attncore[distributed]'``); CI
installs it and runs them.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import attncore  # noqa: E402
import attncore.distributed as ad  # noqa: E402
from attncore.distributed._dask import alive_workers  # noqa: E402

TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _cluster(**kwargs):
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", **kwargs)
    return cluster, distributed.Client(cluster)


@pytest.fixture(scope="module")
def client():
    cluster, client = _cluster()
    yield client
    client.close()
    cluster.close()


def _qkv(rng, dtype=np.float32, B=2, H=4, Hkv=2, n=300, m=300, dk=32, dv=32):
    return (rng.standard_normal((B, H, n, dk)).astype(dtype),
            rng.standard_normal((B, Hkv, m, dk)).astype(dtype),
            rng.standard_normal((B, Hkv, m, dv)).astype(dtype))


CASES = {
    "full": dict(),
    "causal": dict(causal=True),
    "window": dict(causal=True, window=70),
    "key_lengths": dict(causal=True, key_lengths=[300, 123]),
    "contiguous": dict(causal=True, layout="contiguous"),
    "eight chunks": dict(causal=True, chunks=8),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_forward_equals_one_process(client, rng, case, dtype):
    q, k, v = _qkv(rng, dtype)
    out, lse = ad.attention(q, k, v, client=client, return_lse=True, workers=2, **CASES[case])
    mask = {a: b for a, b in CASES[case].items() if a not in ("layout", "chunks")}
    want, want_lse = attncore.attention(q, k, v, return_lse=True, **mask)
    assert out.dtype == lse.dtype == dtype
    np.testing.assert_allclose(out, want, atol=TOL[dtype], rtol=TOL[dtype])
    np.testing.assert_allclose(lse, want_lse, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("shape", ["n < m", "n > m", "2-d", "3-d", "d_v != d_k", "tiny"])
def test_forward_shapes(client, rng, shape):
    if shape == "2-d":
        q, k, v = (a[0, 0] for a in _qkv(rng, H=1, Hkv=1))
    elif shape == "3-d":
        q, k, v = (a[0] for a in _qkv(rng, H=2, Hkv=1))
    else:
        n, m, dv = {"n < m": (100, 300, 32), "n > m": (300, 100, 32), "d_v != d_k": (300, 300, 8),
                    "tiny": (3, 2, 32)}[shape]
        q, k, v = _qkv(rng, n=n, m=m, dv=dv)
    out = ad.attention(q, k, v, client=client, causal=True, workers=2)
    np.testing.assert_allclose(out, attncore.attention(q, k, v, causal=True), atol=2e-5)


@pytest.mark.parametrize("case", ["full", "causal", "window", "key_lengths"])
def test_backward_equals_one_process(client, rng, case):
    q, k, v = _qkv(rng, np.float64)
    out, lse = attncore.attention(q, k, v, return_lse=True, **CASES[case])
    dout = rng.standard_normal(out.shape)
    got = ad.attention_backward(q, k, v, out, lse, dout, client=client, workers=2,
                                **CASES[case])
    want = attncore.attention_backward(q, k, v, out, lse, dout, **CASES[case])
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-11, rtol=1e-11)


def _modifiers(rng, case, B=2, H=4, n=300, m=300):
    """The score modifiers of a case, as attncore.attention takes them."""
    slopes = 2.0 ** -np.arange(1, H + 1)
    return {
        "bias": dict(bias=rng.standard_normal((B, H, n, m))),
        "broadcast bias": dict(causal=True, bias=rng.standard_normal((n, 1))),
        "key bias": dict(bias=np.where(rng.random(m) < 0.2, -np.inf, rng.standard_normal(m))),
        "mask": dict(causal=True, mask=rng.random((B, 1, n, m)) < 0.7),
        "alibi": dict(alibi_slopes=slopes, key_lengths=[300, 123]),
        "causal alibi": dict(causal=True, window=90, alibi_slopes=slopes),
        "softcap": dict(causal=True, softcap=2.5),
        "sinks": dict(causal=True, window=40, sinks=rng.standard_normal(H)),
        "everything": dict(causal=True, key_lengths=[300, 200], bias=rng.standard_normal((H, n, m)),
                           mask=rng.random((n, m)) < 0.9, alibi_slopes=slopes, softcap=4.0,
                           sinks=rng.standard_normal(H)),
    }[case]


MODIFIED = ["bias", "broadcast bias", "key bias", "mask", "alibi", "causal alibi", "softcap",
            "sinks", "everything"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", MODIFIED)
def test_modifiers_forward_equal_one_process(client, rng, case, dtype):
    q, k, v = _qkv(rng, dtype)
    kwargs = _modifiers(rng, case)
    out, lse = ad.attention(q, k, v, client=client, return_lse=True, chunks=4, **kwargs)
    want, want_lse = attncore.attention(q, k, v, return_lse=True, **kwargs)
    assert out.dtype == lse.dtype == dtype
    np.testing.assert_allclose(out, want, atol=TOL[dtype], rtol=TOL[dtype])
    np.testing.assert_allclose(lse, want_lse, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("case", ["bias", "broadcast bias", "causal alibi", "softcap",
                                  "everything"])
def test_modifiers_backward_equal_one_process(client, rng, case):
    q, k, v = _qkv(rng, np.float64)
    kwargs = _modifiers(rng, case)
    extra = {"return_dbias": "bias" in kwargs, "return_dsinks": "sinks" in kwargs}
    out, lse = attncore.attention(q, k, v, return_lse=True, **kwargs)
    dout = rng.standard_normal(out.shape)
    got = ad.attention_backward(q, k, v, out, lse, dout, client=client, chunks=4, **kwargs,
                                **extra)
    want = attncore.attention_backward(q, k, v, out, lse, dout, **kwargs, **extra)
    assert len(got) == len(want) == 3 + sum(extra.values())
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-10, rtol=1e-10)


def test_sinks_with_dask_arrays(client, rng):
    da = pytest.importorskip("dask.array")
    q, k, v = _qkv(rng)
    sinks = rng.standard_normal(4)
    lazy = [da.from_array(a, chunks=a.shape[:-2] + (128, a.shape[-1])) for a in (q, k, v)]
    out, lse = ad.attention(*lazy, client=client, causal=True, window=50, sinks=sinks,
                            return_lse=True)
    assert isinstance(out, da.Array)
    want, want_lse = attncore.attention(q, k, v, causal=True, window=50, sinks=sinks,
                                        return_lse=True)
    np.testing.assert_allclose(out.compute(), want, atol=2e-5)
    np.testing.assert_allclose(lse.compute(), want_lse, atol=2e-5)


def test_kvcache_attend_takes_the_modifiers(client, rng):
    H, Hkv, d, m = 4, 2, 16, 90
    k = rng.standard_normal((Hkv, m, d)).astype(np.float32)
    v = rng.standard_normal((Hkv, m, d)).astype(np.float32)
    q = rng.standard_normal((H, 2, d)).astype(np.float32)
    kwargs = dict(bias=rng.standard_normal((H, 1, m)), mask=rng.random((2, m)) < 0.8,
                  alibi_slopes=[0.5, 0.25, 0.125, 0.0625], softcap=3.0,
                  sinks=rng.standard_normal(H))
    with ad.KVCache(client, Hkv, d, shard_tokens=40) as cache:
        cache.append(k, v)
        got, got_lse = cache.attend(q, return_lse=True, **kwargs)
    local = attncore.KVCache(Hkv, d)
    local.append(k, v)
    want, want_lse = local.attend(q, return_lse=True, **kwargs)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(got_lse, want_lse, atol=2e-5)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(bias=np.zeros((3, 300, 300))), ValueError, "does not broadcast"),
    (dict(bias=np.zeros((300, 300), bool)), TypeError, "bias must be a float"),
    (dict(mask=np.ones((300, 299), bool)), ValueError, "does not broadcast"),
    (dict(alibi_slopes=[1.0, 2.0]), ValueError, "one value per query head"),
    (dict(softcap=-1.0), ValueError, "softcap must be positive"),
    (dict(sinks=[np.nan] * 4), ValueError, "sinks must not be NaN"),
])
def test_modifiers_are_checked_before_submitting(client, rng, kwargs, error, match):
    with pytest.raises(error, match=match):
        ad.attention(*_qkv(rng), client=client, **kwargs)


def test_backward_asks_for_what_it_can_return(client, rng):
    q, k, v = _qkv(rng, n=64, m=64)
    out, lse = attncore.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="needs a bias"):
        ad.attention_backward(q, k, v, out, lse, out, client=client, return_dbias=True)
    with pytest.raises(ValueError, match="needs sinks"):
        ad.attention_backward(q, k, v, out, lse, out, client=client, return_dsinks=True)


def test_dask_arrays_in_dask_arrays_out(client, rng):
    da = pytest.importorskip("dask.array")
    q, k, v = _qkv(rng)
    lazy = [da.from_array(a, chunks=a.shape[:-2] + (128, a.shape[-1])) for a in (q, k, v)]
    out, lse = ad.attention(*lazy, client=client, causal=True, return_lse=True)
    assert isinstance(out, da.Array) and isinstance(lse, da.Array)
    want, want_lse = attncore.attention(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(out.compute(), want, atol=2e-5)
    np.testing.assert_allclose(lse.compute(), want_lse, atol=2e-5)
    dout = rng.standard_normal(want.shape).astype(np.float32)
    grads = ad.attention_backward(*lazy, da.from_array(want), da.from_array(want_lse),
                                  da.from_array(dout), client=client, causal=True)
    for g, w in zip(grads, attncore.attention_backward(q, k, v, want, want_lse, dout,
                                                       causal=True)):
        np.testing.assert_allclose(g.compute(), w, atol=1e-4)


@pytest.mark.parametrize("case", ["full", "causal", "window", "contiguous"])
def test_bytes_moved_are_the_plans_prediction(client, rng, case):
    q, k, v = _qkv(rng, n=512, m=512)
    kwargs = CASES[case]
    p = ad.plan(512, 512, 2, batch=2, heads=4, kv_heads=2, head_dim=32,
                **{a: b for a, b in kwargs.items()})
    with ad.transfers(client) as moved:
        out, lse = ad.attention(q, k, v, client=client, return_lse=True, workers=2, **kwargs)
    assert moved.bytes == p.bytes_moved() > 0 or (moved.bytes == p.bytes_moved() == 0)
    assert sorted(moved.per_worker.values()) == sorted(p.bytes_in)
    with ad.transfers(client) as moved:
        ad.attention_backward(q, k, v, out, lse, np.ones_like(out), client=client, workers=2,
                              **kwargs)
    assert moved.bytes == p.bytes_moved(backward=True)


def test_workers_run_attncore_on_their_own_threads(client, rng):
    ad.attention(*_qkv(rng, n=64, m=64), client=client)
    assert set(client.run(attncore.get_num_threads).values()) == {1}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"])
def test_kvcache_append_and_attend_equal_one_process(client, rng, dtype):
    B, Hkv, H, d = 2, 2, 4, 16
    local = attncore.KVCache(Hkv, d, batch=(B,), dtype=dtype)
    with ad.KVCache(client, Hkv, d, batch=(B,), dtype=dtype, shard_tokens=40) as cache:
        assert cache.shards == 2
        for t in (25, 1, 30, 1, 1, 20, 3):  # crosses the first shard's 40 tokens mid-append
            k = rng.standard_normal((B, Hkv, t, d)).astype(np.float32)
            v = rng.standard_normal((B, Hkv, t, d)).astype(np.float32)
            if dtype == "bfloat16":
                k, v = attncore.to_bfloat16(k), attncore.to_bfloat16(v)
            else:
                k, v = k.astype(dtype), v.astype(dtype)
            cache.append(k, v)
            local.append(k, v)
            q = rng.standard_normal((B, H, t, d)).astype(np.float32)
            got, lse = cache.attend(q, return_lse=True)
            want, want_lse = local.attend(q, return_lse=True)
            np.testing.assert_allclose(got, want, atol=2e-5)
            np.testing.assert_allclose(lse, want_lse, atol=2e-5)
            win = cache.attend(q, window=7)
            np.testing.assert_allclose(win, local.attend(q, window=7), atol=2e-5)
        assert len(cache) == len(local) == 81
        assert cache.lengths == [40, 41]  # the last shard takes what comes after


def test_kvcache_step_moves_a_few_kib_and_never_the_cache(client, rng):
    with ad.KVCache(client, 8, 64, shard_tokens=4096) as cache:
        k = rng.standard_normal((8, 8192, 64)).astype(np.float32)
        cache.append(k, k)  # 32 MiB: scattered to the shards, not sent through the scheduler
        assert cache.lengths == [4096, 4096]
        q = rng.standard_normal((32, 1, 64)).astype(np.float32)
        with ad.transfers(client) as moved:
            for _ in range(3):
                cache.attend(q)
        # each shard's partial (o and lse of 32 heads) comes to the client, which merges
        # them: nothing moves between workers
        assert moved.bytes == 0


def test_kvcache_refuses_bad_input(client, rng):
    with ad.KVCache(client, 2, 8) as cache:
        with pytest.raises(ValueError, match="empty"):
            cache.attend(np.zeros((2, 1, 8), np.float32))
        with pytest.raises(ValueError, match="shape"):
            cache.append(np.zeros((3, 1, 8), np.float32), np.zeros((3, 1, 8), np.float32))
        with pytest.raises(TypeError, match="dtype"):
            cache.append(np.zeros((2, 1, 8)), np.zeros((2, 1, 8)))
        assert len(cache) == 0
    with pytest.raises(ValueError, match="shards"):
        ad.KVCache(client, 2, 8, shards=3)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(window=8), ValueError, "window needs causal"),
    (dict(scale=-1.0), ValueError, "scale"),
    (dict(layout="ring"), ValueError, "layout"),
    (dict(chunks=6), ValueError, "multiple of 4"),
    (dict(key_lengths=[1, 2, 3]), ValueError, "key_lengths"),
    (dict(key_lengths=[1.5, 2]), TypeError, "key_lengths"),
    (dict(workers=3), ValueError, "workers"),
])
def test_attention_refuses_bad_arguments_before_submitting(client, rng, kwargs, error, match):
    q, k, v = _qkv(rng, n=16, m=16)
    with pytest.raises(error, match=match):
        ad.attention(q, k, v, client=client, **kwargs)


def test_attention_refuses_bad_shapes(client, rng):
    q, k, v = _qkv(rng, n=16, m=16)
    with pytest.raises(ValueError):
        ad.attention(q, k[..., :8], v, client=client)
    with pytest.raises(ValueError):
        ad.attention(q, k, v[..., :8, :], client=client)
    with pytest.raises(TypeError):
        ad.attention(q, k.astype(np.float64), v, client=client)
    with pytest.raises(ValueError, match="out must have shape"):
        ad.attention_backward(q, k, v, q[..., :3], q[..., 0], q, client=client)


def test_ping_measures_the_link(client):
    link = ad.ping(client, nbytes=1 << 20, repeats=2)
    assert link.latency_s > 0 and link.bytes_per_s > 0 and link.call_s > 0


def test_a_worker_killed_mid_computation_gives_an_error_not_a_hang():
    cluster, client = _cluster()
    try:
        rng = np.random.default_rng(0)
        q, k, v = _qkv(rng, B=1, H=8, Hkv=8, n=8192, m=8192, dk=64, dv=64)
        result = {}

        def run():
            try:
                result["out"] = ad.attention(q, k, v, client=client, chunks=8)
            except Exception as e:  # noqa: BLE001 - the test inspects it
                result["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        victim = sorted(client.scheduler_info(n_workers=-1)["workers"])[1]
        pid = client.run(os.getpid, workers=[victim])[victim]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(  # until the victim holds a pair task
                key.startswith("attncore-attention") and "pair" in key
                for key in client.processing(workers=[victim]).get(victim, ())):
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        t.join(120)
        assert not t.is_alive(), "attncore.distributed.attention hung after a worker died"
        assert "out" not in result, "a result came back from a computation that lost a worker"
        assert isinstance(result["error"], ad.WorkerLostError), repr(result["error"])
    finally:
        client.close()
        cluster.close()


def test_forked_workers(rng):
    """Workers made by fork() from this process, which has already run attncore's
    thread team: their attncore runs (on one thread, the worker's) and agrees."""
    attncore.attention(*_qkv(rng, n=256, m=256))  # the parent's team has run
    import dask

    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        cluster, client = _cluster()
    try:
        q, k, v = _qkv(rng)
        out = ad.attention(q, k, v, client=client, causal=True, workers=2)
        np.testing.assert_allclose(out, attncore.attention(q, k, v, causal=True), atol=2e-5)
        assert set(client.run(attncore.get_num_threads).values()) == {1}
    finally:
        client.close()
        cluster.close()


def test_a_kvcache_whose_worker_died_gives_an_error_not_a_hang(rng):
    cluster, client = _cluster()
    try:
        with ad.KVCache(client, 2, 8, shard_tokens=4) as cache:
            k = rng.standard_normal((2, 8, 8)).astype(np.float32)
            cache.append(k, k)
            assert cache.lengths == [4, 4]
            victim = cache.addrs[1]
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
            with pytest.raises(ad.WorkerLostError):
                cache.attend(np.zeros((2, 1, 8), np.float32))
    finally:
        client.close()
        cluster.close()


# --- dependability: each test reproduced its defect before the fix ----------

def test_a_kvcache_shard_the_scheduler_knows_is_lost_gives_a_worker_lost_error(rng):
    """Once the scheduler has marked a shard's actor lost, Dask refuses a call
    to it with a RuntimeError before anything is sent: still WorkerLostError,
    for attend and append, and an append counts only what the live shards took."""
    cluster, client = _cluster()
    try:
        with ad.KVCache(client, 2, 8, shard_tokens=4) as cache:
            k = rng.standard_normal((2, 8, 8)).astype(np.float32)
            cache.append(k, k)
            victim = cache.addrs[1]
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
            assert _until(lambda: cache._futures[1].status not in ("finished", "pending"), 30)
            with pytest.raises(ad.WorkerLostError, match="left the cluster"):
                cache.attend(np.zeros((2, 1, 8), np.float32))
            with pytest.raises(ad.WorkerLostError, match="left the cluster"):
                cache.append(k[:, :2], k[:, :2])  # to the last shard, the lost one
            assert cache.lengths == [4, 4]
    finally:
        client.close()
        cluster.close()


def _keys_held(client) -> dict:
    """The attncore keys each worker holds in memory now."""
    return client.run(lambda dask_worker: sorted(str(k) for k in dask_worker.data
                                                 if str(k).startswith("attncore-")))


def _until(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _soak(client, rng, calls: int) -> list:
    """Small attention calls on a client whose scheduler summary refreshes every
    5 ms (2 s by default): the refresh overwrote the cached summary that
    alive_workers read, so a healthy cluster looked empty (5 of 15 calls failed)."""
    import dask

    q, k, v = _qkv(rng, B=1, H=2, Hkv=2, n=64, m=64, dk=16, dv=16)
    want = attncore.attention(q, k, v, causal=True)
    failures = []
    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}):
        fast = distributed.Client(client.scheduler.address)
    try:
        for _ in range(calls // 10):
            assert len(alive_workers(fast)) == 2
        for call in range(calls):  # one task, and spread over both workers, in turn
            try:
                out = ad.attention(q, k, v, client=fast, causal=True,
                                   workers=2 if call % 2 else None)
                np.testing.assert_allclose(out, want, atol=2e-5)
            except Exception as e:  # noqa: BLE001 - counted, then reported
                failures.append(f"{type(e).__name__}: {e}")
    finally:
        fast.close()
    return failures


def test_a_healthy_cluster_fails_no_call(client, rng):
    assert _soak(client, rng, 60) == []


@pytest.mark.slow
def test_a_healthy_cluster_fails_no_call_in_a_thousand(client, rng):
    failures = _soak(client, rng, 1000)
    assert failures == [], f"{len(failures)} of 1000 calls failed: {failures[:3]}"


def test_worker_memory_is_freed_when_a_call_returns(client, rng):
    """A call longer than wait_for's 0.5 s poll: the TimeoutError caught on each
    poll held a reference cycle through the call's frames and futures, so its
    chunks stayed on the workers until the cyclic collector ran (here: never)."""
    import gc

    q, k, v = _qkv(rng, B=1, H=4, Hkv=4, n=8192, m=8192, dk=64, dv=64)
    assert _until(lambda: not any(_keys_held(client).values()), 5)
    gc.collect()
    gc.disable()
    try:
        t0 = time.monotonic()
        ad.attention(q, k, v, client=client)
        assert time.monotonic() - t0 > 0.5, "the call must outlast one poll to test anything"
        assert _until(lambda: not any(_keys_held(client).values()), 2), _keys_held(client)
    finally:
        gc.enable()


@pytest.mark.parametrize("bad, error, match", [
    (None, TypeError, "distributed.Client, got NoneType"),
    ("tcp://127.0.0.1:1", TypeError, "distributed.Client, got str"),
    ("cluster", TypeError, "got a cluster"),
    ("closed", ValueError, "closed"),
])
def test_the_client_argument_is_checked(rng, bad, error, match):
    q, k, v = _qkv(rng, n=16, m=16)
    cluster = client = None
    if bad in ("cluster", "closed"):
        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                           dashboard_address=":0")
        client = distributed.Client(cluster)
        if bad == "closed":
            client.close()
        bad = cluster if bad == "cluster" else client
    try:
        with pytest.raises(error, match=match):
            ad.attention(q, k, v, client=bad)
        with pytest.raises(error, match=match):
            ad.KVCache(bad, 2, 32)
    finally:
        if client is not None:
            client.close()
            cluster.close()


def test_kvcache_counts_only_what_its_shards_took(client, rng):
    a = np.zeros((1, 2, 4), np.float32)
    with ad.KVCache(client, 1, 4) as cache:
        with pytest.raises(ValueError, match=r"got \(1, 3, 7\)"):
            cache.append(np.zeros((1, 3, 7), np.float32), np.zeros((1, 3, 7), np.float32))
        with pytest.raises(ValueError, match=r"v must have shape .* got \(1, 3\)"):
            cache.append(np.zeros((1, 3, 4), np.float32), np.zeros((1, 3), np.float32))
        assert len(cache) == 0
    cache = ad.KVCache(client, 1, 4)
    cache.append(a, a)
    cache.close()
    for _ in range(2):
        with pytest.raises(ValueError, match="closed"):
            cache.append(a, a)
    with pytest.raises(ValueError, match="closed"):
        cache.attend(np.zeros((1, 1, 4), np.float32))
    assert len(cache) == 2 and cache.lengths == [2, 0]


def test_a_failed_append_leaves_the_lengths_and_the_shard_usable(client, rng):
    """A shard that raises (its actor's append made to fail on its worker): its
    tokens are not counted, the error reaches the caller, and the shard's next
    call runs as usual."""
    k = rng.standard_normal((1, 3, 4)).astype(np.float32)

    def break_append(dask_worker=None):
        from attncore.distributed import _worker as W

        def refuse(self, k, v):
            raise MemoryError("no room on this worker")

        W.Shard._real_append, W.Shard.append = W.Shard.append, refuse

    def mend_append(dask_worker=None):
        from attncore.distributed import _worker as W

        W.Shard.append = W.Shard._real_append

    with ad.KVCache(client, 1, 4, shards=1) as cache:
        cache.append(k, k)
        client.run(break_append, workers=[cache.addrs[0]])
        try:
            with pytest.raises(MemoryError, match="no room"):
                cache.append(k, k)
        finally:
            client.run(mend_append, workers=[cache.addrs[0]])
        assert cache.lengths == [3]
        cache.append(k, k)
        assert cache.lengths == [6]
        q = rng.standard_normal((1, 1, 4)).astype(np.float32)
        kk = np.concatenate([k, k], axis=-2)
        np.testing.assert_allclose(cache.attend(q), attncore.attention(q, kk, kk, causal=True),
                                   atol=2e-6)


def test_a_worker_killed_while_inputs_are_placed_is_a_worker_lost_error(rng, monkeypatch):
    """Killed as the first chunk is scattered to it: Dask's scatter waited its
    30 s connect timeout and raised a bare TimeoutError or CommClosedError."""
    from attncore.distributed import _dask as D

    cluster, client = _cluster()
    try:
        victim = sorted(alive_workers(client))[1]
        pid = client.run(os.getpid, workers=[victim])[victim]
        real = D.scatter_to

        def kill_first(c, data, addr, what):
            if addr == victim and pid is not None:
                os.kill(pid, signal.SIGKILL)
                assert _until(lambda: victim not in alive_workers(c), 30)
            return real(c, data, addr, what)

        monkeypatch.setattr(D, "scatter_to", kill_first)
        q, k, v = _qkv(rng, B=1, H=2, Hkv=2, n=256, m=256)
        t0 = time.monotonic()
        with pytest.raises(ad.WorkerLostError, match="placed"):
            ad.attention(q, k, v, client=client, workers=2)
        assert time.monotonic() - t0 < 20, "a hang until Dask's timeout, not a prompt error"
    finally:
        client.close()
        cluster.close()


@pytest.mark.parametrize("kwargs", [dict(), dict(causal=True, window=40, key_lengths=[200, 123]),
                                    dict(bias=True, sinks=True, softcap=20.0)])
def test_a_small_call_runs_as_one_task(client, rng, kwargs):
    """Below 1 MiB of arrays and 2**30 FLOPs a call is one task with its arrays
    inside (a spread call costs ~0.1 s before any arithmetic); workers= or
    chunks= spreads it anyway.  Forward and backward equal one process."""
    q, k, v = _qkv(rng, n=200, m=200)  # with out and dout, 0.8 MiB
    if kwargs.pop("bias", False):
        kwargs["bias"] = rng.standard_normal((4, 1, 200)).astype(np.float32)
    if kwargs.pop("sinks", False):
        kwargs["sinks"] = rng.standard_normal(4).astype(np.float32)
    dout = rng.standard_normal((2, 4, 200, 32)).astype(np.float32)
    back = dict(kwargs, return_dbias="bias" in kwargs, return_dsinks="sinks" in kwargs)
    with distributed.get_task_stream(client) as ts:
        out, lse = ad.attention(q, k, v, client=client, return_lse=True, **kwargs)
        grads = ad.attention_backward(q, k, v, out, lse, dout, client=client, **back)
    keys = [t["key"] for t in ts.data if str(t["key"]).startswith("attncore-")]
    assert len(keys) == 2 and all(str(k_).endswith("whole") for k_ in keys), keys
    want, want_lse = attncore.attention(q, k, v, return_lse=True, **kwargs)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(lse, want_lse)
    for g, w in zip(grads, attncore.attention_backward(q, k, v, want, want_lse, dout, **back)):
        np.testing.assert_array_equal(g, w)
    with distributed.get_task_stream(client) as ts:
        ad.attention(q, k, v, client=client, workers=2, **kwargs)
    assert len([t for t in ts.data if str(t["key"]).startswith("attncore-")]) > 2


def _kill_when(client, victim: str, pred, seconds: float = 60) -> float:
    """SIGKILL the victim worker once pred(keys it is processing) holds; the
    monotonic time of the kill."""
    pid = client.run(os.getpid, workers=[victim])[victim]
    assert _until(lambda: pred(client.processing(workers=[victim]).get(victim, ())), seconds), \
        "the victim never got the task to be killed in"
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    """fn() run in a thread; the dict gets its "error" and the monotonic time "at"
    it was raised (fn may fill in more)."""
    result: dict = {}

    def run():
        try:
            fn(result)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            result["error"], result["at"] = e, time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _assert_a_prompt_worker_lost_error(t, result: dict, killed: float, what: str) -> None:
    t.join(60)
    assert not t.is_alive(), f"{what} hung after a worker died"
    assert isinstance(result.get("error"), ad.WorkerLostError), repr(result)
    assert result["at"] - killed < 10, "a prompt error, not a timeout"


def test_a_worker_killed_during_the_merges_gives_a_worker_lost_error(rng):
    """The merges made slow on the victim (2 s each), so that it dies in one."""
    cluster, client = _cluster()
    try:
        victim = sorted(alive_workers(client))[1]

        def slow_merges(dask_worker=None):
            from attncore.distributed import _worker as W

            real = W.merge

            def merge(*parts):
                time.sleep(2)
                return real(*parts)

            W.merge = merge

        client.run(slow_merges, workers=[victim])
        q, k, v = _qkv(rng, B=1, H=2, Hkv=2, n=512, m=512)
        t, result = _in_thread(lambda r: r.update(
            out=ad.attention(q, k, v, client=client, workers=2)))
        killed = _kill_when(client, victim, lambda keys: any("merged" in str(key) for key in keys))
        _assert_a_prompt_worker_lost_error(t, result, killed, "attncore.distributed.attention")
    finally:
        client.close()
        cluster.close()


def test_a_worker_killed_during_a_decode_step_gives_a_worker_lost_error(rng):
    """Steps over a 2 × 65536-token cache in a loop; a shard's worker killed
    while they run: the step in flight (or the next) raises WorkerLostError."""
    cluster, client = _cluster()
    try:
        with ad.KVCache(client, 8, 64, dtype=np.float16, shard_tokens=65536) as cache:
            k = rng.standard_normal((8, 131072, 64)).astype(np.float16)
            cache.append(k, k)
            q = rng.standard_normal((32, 1, 64)).astype(np.float32)
            cache.attend(q)

            def steps(result):
                result["steps"] = 0
                while True:
                    cache.attend(q)
                    result["steps"] += 1

            t, result = _in_thread(steps)
            assert _until(lambda: result.get("steps", 0) >= 3, 30)
            victim = cache.addrs[1]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            _assert_a_prompt_worker_lost_error(t, result, killed, "KVCache.attend")
    finally:
        client.close()
        cluster.close()
