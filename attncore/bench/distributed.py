"""``attncore bench --distributed``: attncore.distributed measured on a Dask
cluster (a LocalCluster of one-thread worker processes, or ``--scheduler
ADDRESS``), next to what its plan predicts.

    strong   fixed n, P = 1, 2, ... workers: time, speed-up over one worker,
             and the ratio to attncore.attention in one process on P threads
    weak     causal prefill with n ∝ √P (equal work per worker) and decode
             with the cache ∝ P (equal tokens per shard)
    layout   zigzag against contiguous: each worker's busy time (Dask's task
             stream), measured and as the plan's FLOPs predict it
    bytes    worker-to-worker bytes, measured (the workers' transfer logs)
             against the plan's prediction and the ring's (P-1)·KV
    decode   a sharded KVCache's step time against tokens per shard, beside
             an empty call to the shards' actors (the step's round trip)
    costs    the executor's constants on this cluster: a worker's attention
             rate (every worker computing at once), the client's scatter rate,
             a task's fixed cost, the empty call's round trip (and the link,
             by ping)
    predict  Plan.simulate with those constants against the measured time
             of a causal prefill, n = 8192 and 16384 (quick: 2048 and 4096),
             in paired rounds (the workers' rate measured before each call)
    simulate Plan.simulate at n = 1M on 16 and 64 nodes, 10 and 100 Gb/s links,
             with this cluster's fixed costs; and a decode step of a 10M-token
             cache on 16 nodes
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

import attncore
import attncore.distributed as ad
from attncore.bench.timing import best_of

SIM_N = 1 << 20
SIM_SHAPE = dict(heads=32, kv_heads=32, head_dim=128, itemsize=4)  # the 1M-token layer
SIM_NODES = (2, 4, 8, 16, 32, 64, 128, 256)
SIM_LINKS = {"10 Gb/s": 10e9 / 8, "100 Gb/s": 100e9 / 8}
SIM_LATENCY_S = 50e-6
SIM_NODE_FLOPS = 3e12  # a 3 TFLOP/s node, beside this machine's measured rate
SIM_CACHE_TOKENS = 10_000_000  # a 10M-token cache, one layer: float16, 8 kv heads of 128
SIM_CACHE = dict(kv_heads=8, head_dim=128, itemsize=2)


def _inputs(rng, n, H, Hkv, d, dtype=np.float32):
    return (rng.standard_normal((H, n, d)).astype(dtype),
            rng.standard_normal((Hkv, n, d)).astype(dtype),
            rng.standard_normal((Hkv, n, d)).astype(dtype))


def _flops(n, H, d, causal):
    return 2 * 2 * d * H * (n * (n + 1) // 2 if causal else n * n)


def _cluster(scheduler, workers):
    from distributed import Client, LocalCluster

    if scheduler:
        return None, Client(scheduler)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0")
    return cluster, Client(cluster)


def _busy(stream, part: str) -> dict[str, float]:
    """Seconds each worker spent computing the tasks whose key holds ``part``."""
    busy: dict[str, float] = {}
    for task in stream:
        if part in str(task["key"]):
            for ss in task["startstops"]:
                if ss["action"] == "compute":
                    busy[task["worker"]] = busy.get(task["worker"], 0.0) + ss["stop"] - ss["start"]
    return busy


def run(*, scheduler: str | None = None, workers: int | None = None, quick: bool = False,
        progress=print) -> dict:
    """Measure everything the module docstring lists; returns a JSON-able dict."""
    from distributed import get_task_stream

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    P_max = workers or min(cores or 1, 4)
    cluster, client = _cluster(scheduler, P_max)
    try:
        addrs = ad.workers_of(client)
        P_max = len(addrs)
        Ps = sorted({1, *[p for p in (2, 4, 8, 16) if p <= P_max], P_max})
        rng = np.random.default_rng(0)
        H, d = 8, 64
        n = 2048 if quick else 8192
        reps = dict(min_time=0.2 if quick else 1.0, min_rounds=2 if quick else 3, max_rounds=10)
        result: dict = {"workers": P_max, "scheduler": scheduler or "LocalCluster",
                        "threads_per_worker": 1, "shape": dict(n=n, heads=H, head_dim=d),
                        "versions": _versions()}
        link = ad.ping(client, nbytes=(4 << 20) if quick else (32 << 20), repeats=3) \
            if P_max >= 2 else None
        result["link"] = None if link is None else dict(latency_s=link.latency_s,
                                                         bytes_per_s=link.bytes_per_s,
                                                         call_s=link.call_s)

        progress(f"strong scaling: causal prefill n={n}, H={H}, d={d}, P = {Ps}")
        q, k, v = _inputs(rng, n, H, H, d)
        strong = []
        for P in Ps:
            fns = {"dist": lambda: ad.attention(q, k, v, client=client, causal=True, workers=P)}
            before = attncore.get_num_threads()
            attncore.set_num_threads(P)
            try:
                attncore.attention(q, k, v, causal=True)
                fns["dist"]()
                fns["local"] = lambda: attncore.attention(q, k, v, causal=True)
                best = best_of(fns, **reps)
            finally:
                attncore.set_num_threads(before)
            strong.append(dict(P=P, seconds=best["dist"], local_seconds=best["local"]))
        t1 = strong[0]["seconds"]
        for row in strong:
            row["speedup"] = t1 / row["seconds"]
            row["efficiency"] = row["speedup"] / row["P"]
            row["vs_local"] = row["local_seconds"] / row["seconds"]
            row["gflops"] = _flops(n, H, d, True) / row["seconds"] / 1e9
        result["strong"] = strong
        # this machine as one node: one process on all the workers' threads
        result["node_gflops"] = _flops(n, H, d, True) / strong[-1]["local_seconds"] / 1e9

        n0 = 1024 if quick else 4096
        progress(f"weak scaling: causal prefill n = {n0}·√P; decode {n0 * 4} tokens per shard")
        weak = []
        for P in Ps:
            nP = int(round(n0 * math.sqrt(P) / 64)) * 64
            q, k, v = _inputs(rng, nP, H, H, d)
            fn = lambda: ad.attention(q, k, v, client=client, causal=True, workers=P)  # noqa: E731
            fn()
            t = best_of({"t": fn}, **reps)["t"]
            step = _decode_step(client, addrs[:P], n0 * 4 * P, rng, reps)
            weak.append(dict(P=P, n=nP, seconds=t, decode_tokens=n0 * 4 * P, decode_s=step))
        result["weak"] = weak

        P = P_max
        progress(f"layouts and bytes: P={P}, causal and full, zigzag and contiguous")
        q, k, v = _inputs(rng, n, H, H, d)
        layouts, moved = [], []
        for causal, layout in ((True, "zigzag"), (True, "contiguous"), (False, "zigzag")):
            pl = ad.plan(n, n, P, causal=causal, layout=layout, heads=H, head_dim=d)
            with ad.transfers(client) as tr, get_task_stream(client) as ts:
                ad.attention(q, k, v, client=client, causal=causal, layout=layout, workers=P)
            busy = _busy(ts.data, "-pair-")
            per = [busy.get(a, 0.0) for a in addrs[:P]]
            if causal:
                layouts.append(dict(layout=layout, busy_s=per,
                                    measured_ratio=max(per) / min(per) if min(per) else math.inf,
                                    predicted_ratio=max(pl.flops) / min(pl.flops)))
            moved.append(dict(causal=causal, layout=layout, measured=tr.bytes,
                              predicted=pl.bytes_moved(), ring=pl.ring_bytes,
                              complete=tr.complete))
            out, lse = ad.attention(q, k, v, client=client, causal=causal, layout=layout,
                                    workers=P, return_lse=True)
            with ad.transfers(client) as tr:
                ad.attention_backward(q, k, v, out, lse, np.ones_like(out), client=client,
                                      causal=causal, layout=layout, workers=P)
            moved.append(dict(causal=causal, layout=layout, backward=True, measured=tr.bytes,
                              predicted=pl.bytes_moved(backward=True), ring=2 * pl.ring_bytes,
                              complete=tr.complete))
        result["layouts"], result["bytes"] = layouts, moved

        progress(f"decode: a float16 KVCache on {P} shards, H=32, H_kv=8, d=128")
        decode = []
        for per_shard in ((1024, 4096, 16384) if quick else (4096, 16384, 65536)):
            step, floor = _decode_step(client, addrs[:P], per_shard * P, rng, reps, floor=True)
            decode.append(dict(tokens_per_shard=per_shard, shards=P, step_s=step,
                               floor_s=floor))
        result["decode"] = decode
        result["empty_call_s"] = _empty_call(client, addrs[0])

        progress("the executor's costs, and Plan.simulate against the measured time")
        costs = _costs(client, addrs, result, d=d, heads=H)
        result["costs"] = costs
        result["predict"] = [_predict(client, addrs, costs, nn, heads=H, d=d, rng=rng,
                                      rounds=3 if quick else 5)
                             for nn in ((2048, 4096) if quick else (8192, 16384))]
        result["simulate"] = simulate(result["node_gflops"] * 1e9, costs)
        from attncore.bench import measure_roofs

        read = measure_roofs(attncore.get_num_threads(), quick=True)["read_gbs"] * 1e9
        floor = min(r["floor_s"] for r in decode)  # a step's round trip to the actors
        result["decode_paper"] = [
            dict(tokens=SIM_CACHE_TOKENS, nodes=nodes, read_bytes_per_s=read,
                 round_trip_s=floor,
                 step_s=ad.decode_step_time(SIM_CACHE_TOKENS, nodes, read_bytes_per_s=read,
                                            latency_s=floor, **SIM_CACHE))
            for nodes in (1, 16)]
        return result
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _decode_step(client, addrs, tokens, rng, reps, floor: bool = False):
    """Best time of one decode step (a query token of 32 heads) on a float16
    cache of ``tokens`` tokens, 8 kv heads of d = 128, one shard per worker;
    with ``floor``, also the best time of an empty call to every shard's
    actor at once (the step's round trip, without its read)."""
    from attncore.distributed._dask import _actor_results

    P = len(addrs)
    with ad.KVCache(client, 8, 128, dtype=np.float16, workers=addrs,
                    shard_tokens=-(-tokens // P)) as cache:
        chunk = 1 << 14
        for start in range(0, tokens, chunk):
            t = min(chunk, tokens - start)
            kv = rng.standard_normal((8, t, 128)).astype(np.float16)
            cache.append(kv, kv)
        q = rng.standard_normal((32, 1, 128)).astype(np.float32)
        fns = {"step": lambda: cache.attend(q)}
        if floor:
            fns["floor"] = lambda: _actor_results(
                client, [(cache._call(s, "nothing", what="floor"), addr)
                         for s, addr in enumerate(cache.addrs)], "floor")
        for fn in fns.values():
            fn()
        best = best_of(fns, **reps)
        return (best["step"], best["floor"]) if floor else best["step"]


def _empty_call(client, addr) -> float:
    """Round trip of a task that does nothing, on one worker: a decode step's floor."""
    from attncore.distributed import _worker as W

    def call():
        client.submit(W.nothing, time.perf_counter(), workers=[addr], pure=False).result()

    call()
    return best_of({"call": call}, min_time=0.3, min_rounds=5, max_rounds=50)["call"]


def _worker_rate(client, addrs, *, d: int, heads: int, min_time: float = 0.3) -> float:
    """A worker's attention rate (FLOP/s of a causal n = 2048 call on its
    thread) while every worker computes at once, as they do in a call: the
    slowest worker's, since a balanced plan waits for it."""
    from attncore.distributed import _worker as W

    fs = [client.submit(W.attention_seconds, 2048, heads, d, True, min_time, workers=[a],
                        pure=False) for a in addrs]
    return _flops(2048, heads, d, True) / max(client.gather(fs))


def _costs(client, addrs, result: dict, *, d: int, heads: int) -> dict:
    """The executor's constants on this cluster, as Plan.simulate takes them."""
    from attncore.distributed import _worker as W

    rate = _worker_rate(client, addrs, d=d, heads=heads)
    blob = np.zeros(16 << 20, np.uint8)

    def scatter():
        [f] = client.scatter([blob], workers=[addrs[0]], direct=True, hash=False)
        f.release()

    scatter()
    client_s = best_of({"s": scatter}, min_time=0.3, min_rounds=3, max_rounds=10)["s"]
    round_trip = _empty_call(client, addrs[0])
    batch = 50

    def tasks():
        fs = [client.submit(W.nothing, i, workers=[addrs[0]], pure=False) for i in range(batch)]
        client.gather(fs)

    tasks()
    many = best_of({"t": tasks}, min_time=0.3, min_rounds=3, max_rounds=10)["t"]
    link = result.get("link") or {}
    return dict(worker_flops=rate, client_bytes_per_s=blob.nbytes / client_s,
                round_trip_s=round_trip, task_s=max(0.0, (many - round_trip) / (batch - 1)),
                link_bytes_per_s=link.get("bytes_per_s", math.inf),
                latency_s=link.get("latency_s", 0.0))


def _predict(client, addrs, costs: dict, n: int, *, heads: int, d: int, rng,
             rounds: int) -> dict:
    """Plan.simulate against the measured time of a causal prefill of n
    tokens on every worker, in paired rounds: each round measures the
    workers' rate (:func:`_worker_rate`) and then times one call, and
    predicts that call from that rate and the other measured costs, so that
    the machine's drift (its speed moves a lot from minute to minute) falls on
    both alike.  The median round's figures, and the spread of the ratio."""
    P = len(addrs)
    q, k, v = _inputs(rng, n, heads, heads, d)
    pl = ad.plan(n, n, P, causal=True, heads=heads, head_dim=d)
    fn = lambda: ad.attention(q, k, v, client=client, causal=True, workers=P)  # noqa: E731
    fn()
    rows = []
    for _ in range(rounds):
        rate = _worker_rate(client, addrs, d=d, heads=heads, min_time=0.1)
        sim = pl.simulate(**_sim_args(dict(costs, worker_flops=rate)))
        t0 = time.perf_counter()
        fn()
        t = time.perf_counter() - t0
        rows.append(dict(n=n, P=P, measured_s=t, predicted_s=sim.time_s, worker_flops=rate,
                         place_s=sim.place_s, copies_s=sim.copies_s, pairs_s=sim.pairs_s,
                         gather_s=sim.gather_s, ratio=sim.time_s / t))
    rows.sort(key=lambda r: r["ratio"])
    row = dict(rows[len(rows) // 2])
    row.update(rounds=rounds, ratio_min=rows[0]["ratio"], ratio_max=rows[-1]["ratio"])
    return row


def _sim_args(costs: dict) -> dict:
    """Plan.simulate's arguments for this cluster, from its measured costs."""
    return dict(flops_per_s=costs["worker_flops"], link_bytes_per_s=costs["link_bytes_per_s"],
                latency_s=costs["latency_s"], round_trip_s=costs["round_trip_s"],
                task_s=costs["task_s"], client_bytes_per_s=costs["client_bytes_per_s"])


def simulate(node_flops: float, costs: dict | None = None) -> list[dict]:
    """Plan.simulate at n = 1M (causal, zigzag, 2P chunks) for each node count,
    link and node rate (this machine's measured rate and a 3 TFLOP/s node),
    with this cluster's measured round trip and task cost (none if not given);
    the client scatters and gathers at the link's rate."""
    rows = []
    fixed = dict(round_trip_s=costs["round_trip_s"], task_s=costs["task_s"]) if costs else {}
    for P in SIM_NODES:
        pl = ad.plan(SIM_N, SIM_N, P, causal=True, **SIM_SHAPE)
        for rate_name, rate in (("this node", node_flops), ("3 TFLOP/s node", SIM_NODE_FLOPS)):
            for link_name, bw in SIM_LINKS.items():
                sim = pl.simulate(rate, bw, SIM_LATENCY_S, **fixed)
                rows.append(dict(nodes=P, node=rate_name, node_flops=rate, link=link_name,
                                 seconds=sim.time_s, ideal_s=sim.ideal_s,
                                 efficiency=sim.efficiency, speedup=sim.speedup,
                                 hidden=sim.hidden, chunk_tokens=SIM_N // (2 * P)))
    return rows


def _versions() -> dict:
    import dask
    import distributed

    return {"attncore": attncore.__version__, "dask": dask.__version__,
            "distributed": distributed.__version__, "numpy": np.__version__}


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f}"


def tables(result: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of each table of a run."""
    sh = result["shape"]
    out = []
    out.append((f"Strong scaling: causal prefill n={sh['n']}, H={sh['heads']}, d={sh['head_dim']}, "
                f"float32, one thread per worker ({result['scheduler']})",
                ["workers", "time ms", "GFLOP/s", "speed-up vs 1 worker", "efficiency",
                 "1 process on P threads ms", "1 process ÷ distributed time"],
                [[str(r["P"]), _ms(r["seconds"]), f"{r['gflops']:.1f}", f"{r['speedup']:.2f}×",
                  f"{r['efficiency']:.0%}", _ms(r["local_seconds"]), f"{r['vs_local']:.2f}×"]
                 for r in result["strong"]]))
    out.append(("Weak scaling: causal prefill with n ∝ √P (work per worker fixed); decode with "
                "the cache ∝ P (tokens per shard fixed)",
                ["workers", "n", "prefill ms", "decode cache tokens", "decode step ms"],
                [[str(r["P"]), str(r["n"]), _ms(r["seconds"]), str(r["decode_tokens"]),
                  _ms(r["decode_s"])] for r in result["weak"]]))
    out.append(("Layouts (causal): each worker's busy time in the pair tasks",
                ["layout", "busy s per worker", "slowest ÷ fastest measured",
                 "predicted (plan FLOPs)"],
                [[r["layout"], ", ".join(f"{b:.2f}" for b in r["busy_s"]),
                  f"{r['measured_ratio']:.2f}", f"{r['predicted_ratio']:.2f}"]
                 for r in result["layouts"]]))
    out.append(("Bytes moved between workers (MiB): measured in the workers' transfer logs, "
                "the plan's prediction, a ring passing every K/V chunk",
                ["call", "mask", "layout", "measured", "predicted", "ring (P-1)·KV"],
                [["backward" if r.get("backward") else "forward",
                  "causal" if r["causal"] else "full", r["layout"], _mib(r["measured"]),
                  _mib(r["predicted"]), _mib(r["ring"])] for r in result["bytes"]]))
    out.append(("Decode: float16 KVCache, H=32, H_kv=8, d=128, one shard per worker; a step "
                "against its floor, an empty call to every shard's actor at once (an empty "
                f"task, through the scheduler, takes {_ms(result['empty_call_s'])} ms)",
                ["tokens per shard", "shards", "step ms", "empty actor calls ms",
                 "step − empty ms"],
                [[str(r["tokens_per_shard"]), str(r["shards"]), _ms(r["step_s"]),
                  _ms(r["floor_s"]), _ms(r["step_s"] - r["floor_s"])]
                 for r in result["decode"]]))
    if result.get("costs"):
        c = result["costs"]
        out.append((f"Plan.simulate against the measurement: causal prefill, H={sh['heads']}, "
                    f"d={sh['head_dim']}, float32; constants measured here: a worker "
                    f"{c['worker_flops'] / 1e9:.1f} GFLOP/s, the client's scatter "
                    f"{c['client_bytes_per_s'] / 1e9:.2f} GB/s, a round trip "
                    f"{_ms(c['round_trip_s'])} ms, a task {_ms(c['task_s'])} ms, the link "
                    f"{c['link_bytes_per_s'] / 1e9:.2f} GB/s",
                    ["n", "workers", "rounds", "measured ms", "predicted ms",
                     "predicted ÷ measured, median (min–max)", "worker GFLOP/s",
                     "place / copies / pairs / gather ms"],
                    [[str(r["n"]), str(r["P"]), str(r["rounds"]), _ms(r["measured_s"]),
                      _ms(r["predicted_s"]),
                      f"{r['ratio']:.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})",
                      f"{r['worker_flops'] / 1e9:.1f}",
                      " / ".join(_ms(r[k]) for k in ("place_s", "copies_s", "pairs_s",
                                                     "gather_s"))]
                     for r in result["predict"]]))
    sims = [r for r in result["simulate"] if r["nodes"] in (16, 64)]
    fixed = (f", this cluster's round trip ({_ms(result['costs']['round_trip_s'])} ms) and task "
             f"cost ({_ms(result['costs']['task_s'])} ms)" if result.get("costs") else "")
    out.append((f"Plan.simulate: causal prefill n = 1M, H = H_kv = 32, d = 128, float32, zigzag, "
                f"{SIM_LATENCY_S * 1e6:.0f} µs latency{fixed}, the client at the link's rate",
                ["nodes", "node", "link", "predicted s", "ideal s", "efficiency",
                 "transfers hidden"],
                [[str(r["nodes"]), f"{r['node']} ({r['node_flops'] / 1e9:.0f} GFLOP/s)",
                  r["link"], f"{r['seconds']:.1f}", f"{r['ideal_s']:.1f}",
                  f"{r['efficiency']:.0%}", "yes" if r["hidden"] else "no"] for r in sims]))
    if result.get("decode_paper"):
        rows = result["decode_paper"]
        out.append((f"decode_step_time: one decode step over a {SIM_CACHE_TOKENS / 1e6:.0f}M-token "
                    f"float16 cache (H_kv = 8, d = 128, one layer), this node's read rate "
                    f"({rows[0]['read_bytes_per_s'] / 1e9:.1f} GB/s) and the round trip to "
                    f"the shards' actors measured here",
                    ["nodes", "step ms", "of which the round trip ms"],
                    [[str(r["nodes"]), _ms(r["step_s"]), _ms(r["round_trip_s"])]
                     for r in rows]))
    return out


def print_report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if Console().is_terminal else 200)
    for title, columns, rows in tables(result):
        t = Table(title=title, title_justify="left")
        for c in columns:
            t.add_column(c, justify="right")
        for r in rows:
            t.add_row(*r)
        con.print(t)
    if result.get("link"):
        lk = result["link"]
        con.print(f"link between two workers (ping): {lk['latency_s'] * 1e3:.2f} ms for 8 bytes, "
                  f"{lk['bytes_per_s'] / 1e9:.2f} GB/s; empty call {lk['call_s'] * 1e3:.1f} ms")


def markdown(result: dict) -> str:
    parts = []
    for title, columns, rows in tables(result):
        parts.append("\n".join([title + ".", "", "| " + " | ".join(columns) + " |",
                                "|" + "---|" * len(columns)]
                               + ["| " + " | ".join(r) + " |" for r in rows]))
    return "\n\n".join(parts)


def figure(result: dict, outdir) -> str:
    """Predicted time and efficiency of a 1M-token causal prefill against the
    number of nodes, per link and node rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = result["simulate"]
    for i, node in enumerate(dict.fromkeys(r["node"] for r in rows)):
        for style, link in zip(("-", "--"), SIM_LINKS):
            sel = [r for r in rows if r["node"] == node and r["link"] == link]
            label = f"{node} ({sel[0]['node_flops'] / 1e9:.0f} GFLOP/s), {link}"
            ax_t.plot([r["nodes"] for r in sel], [r["seconds"] for r in sel], style,
                      color=f"C{i}", marker="o", label=label)
            ax_e.plot([r["nodes"] for r in sel], [r["efficiency"] for r in sel], style,
                      color=f"C{i}", marker="o", label=label)
        ideal = [r for r in rows if r["node"] == node and r["link"] == next(iter(SIM_LINKS))]
        ax_t.plot([r["nodes"] for r in ideal], [r["ideal_s"] for r in ideal], ":", color=f"C{i}",
                  label=f"{node}: perfect scaling")
    for ax in (ax_t, ax_e):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        for P in (16, 64):
            ax.axvline(P, color="0.85", zorder=0)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("predicted seconds per layer")
    ax_t.set_title("causal prefill, n = 1M, H = 32, d = 128 (Plan.simulate)", fontsize=10)
    ax_e.set_ylabel("efficiency (ideal ÷ predicted)")
    ax_e.set_ylim(0, 1.05)
    ax_e.set_title("communication hides when a step's compute outlasts its transfer", fontsize=10)
    ax_e.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(outdir, "distributed-simulate.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
