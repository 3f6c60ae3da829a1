"""The fixed costs of attncore.distributed on a 2-worker LocalCluster (one
thread each): a tiny call (as one task, and spread), and a decode step of the
sharded KVCache, small and 2 x 65536 float16 tokens; milliseconds, median
(min) of 30 calls (15 for the large step), as Markdown table rows.

    python tools/distributed_overhead.py
    PYTHONPATH=/path/to/another/tree python tools/distributed_overhead.py   # another version

The workers inherit PYTHONPATH, so both sides run the same attncore."""
import time, sys, numpy as np, distributed
import attncore, attncore.distributed as ad

def med(fn, n=30):
    for _ in range(5): fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return f"{np.median(ts)*1e3:.1f} ({min(ts)*1e3:.1f})"

if __name__ == "__main__":
    print("attncore.distributed from", ad.__file__)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        rng = np.random.default_rng(0)
        q = k = v = rng.standard_normal((2, 64, 16), np.float32)
        print("| tiny call (2 heads × 64 tokens, d 16), default |", med(lambda: ad.attention(q, k, v, client=client, causal=True)), "|")
        print("| tiny call, spread (workers=2) |", med(lambda: ad.attention(q, k, v, client=client, causal=True, workers=2)), "|")
        with ad.KVCache(client, 2, 16, batch=(1,), shard_tokens=512) as cache:
            kk = rng.standard_normal((1, 2, 1024, 16)).astype(np.float32)
            cache.append(kk, kk)
            qq = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
            print("| decode step, 2 × 512 tokens, H 4/2, d 16 |", med(lambda: cache.attend(qq)), "|")
        with ad.KVCache(client, 8, 128, dtype=np.float16, shard_tokens=65536) as cache:
            kk = rng.standard_normal((8, 131072, 128)).astype(np.float16)
            cache.append(kk, kk)
            qq = rng.standard_normal((32, 1, 128)).astype(np.float32)
            print("| decode step, 2 × 65536 float16 tokens, H 32/8, d 128 |", med(lambda: cache.attend(qq), 15), "|")
