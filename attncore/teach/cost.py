"""Experiments on what attention costs, measured on this machine with the one
timer of attncore.bench.timing: memory (why n²), the causal mask's skipped
blocks (counted by the kernel), naive against blockwise, the two regimes on
the roofline, and the family of variants."""

from __future__ import annotations

import numpy as np

import attncore
from attncore._api import _attention  # the kernel's own tile counts (block_counts)
from attncore.bench.timing import best_time, measure
from attncore.teach.result import Result


def _best_time(fn):
    """The fastest of a warm-up and three timed calls."""
    return best_time(fn, min_time=0.0, min_reps=3)


# ---- why n² ----------------------------------------------------------------------


def memory(ns=(512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072), heads=32,
           d_head=128, bytes_per_value=2, measured=False):
    """Why n²: the score table of one layer (n²·heads values) against the KV
    cache that produced it (2·n·heads·d_head values); with ``measured`` also
    the peak memory of real naive and blockwise calls (one head, d = 64,
    float32) at the sizes that fit."""
    from attncore._runtime import memory_limit

    rows = []
    rng = np.random.default_rng(0)
    for n in ns:
        row = {"n": n,
               "scores_bytes_head": n * n * bytes_per_value,
               "scores_bytes_layer": n * n * bytes_per_value * heads,
               "kv_cache_bytes": 2 * n * heads * d_head * bytes_per_value}
        row["ratio"] = row["scores_bytes_layer"] / row["kv_cache_bytes"]
        if measured:
            fits = 3 * n * n * 4 < memory_limit() // 4 and n <= 16384
            for method in ("naive", "flash"):
                peak = None
                if fits or method == "flash":
                    x = rng.standard_normal((n, 64), dtype=np.float32)
                    peak = measure(attncore.attention, x, x, x, method=method, repeat=0).peak_bytes
                row[f"measured_{method}_bytes"] = peak
        rows.append(row)

    def draw(ax):
        n = [r["n"] for r in rows]
        setup = f"{heads} heads, d_head = {d_head}, {bytes_per_value} B a value"
        ax.loglog(n, [r["scores_bytes_layer"] for r in rows], "o-",
                  label=f"score table, one layer ({setup})")
        ax.loglog(n, [r["kv_cache_bytes"] for r in rows], "s-", label=f"KV cache, one layer ({setup})")
        if measured:
            for method, mk in (("naive", "^"), ("flash", "v")):
                pts = [(r["n"], r[f"measured_{method}_bytes"]) for r in rows
                       if r[f"measured_{method}_bytes"] is not None]
                if pts:
                    name = "blockwise" if method == "flash" else method
                    ax.loglog(*zip(*pts), mk + ":",
                              label=f"measured peak, {name} (1 head, d = 64, float32)")
        ax.set(xlabel="n (tokens)", ylabel="bytes")
        ax.legend(fontsize=9)

    return Result("memory", "why n²: the score table outgrows the KV cache", rows,
                  {"heads": heads, "d_head": d_head, "bytes_per_value": bytes_per_value}, draw)


# ---- what the causal mask does ---------------------------------------------------


def causal(n=2048, d=64, heads=4, block=128, seed=0):
    """The causal mask: each row still sums to 1, only n(n+1)/2 of the n² cells
    do any work, and the blockwise kernel really skips the blocks above the
    diagonal — counted by the kernel itself — which shows in the time."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
    small = rng.standard_normal((8, 4))
    _, weights = attncore.attention(small, small, small, causal=True, method="naive",
                                    return_weights=True)
    nb = -(-n // block)
    rows = []
    for is_causal in (False, True):
        counts = np.zeros(2, np.int64)  # the kernel adds (tiles computed, tiles masked)
        _attention(q, k, v, causal=is_causal, block_q=block, block_k=block, block_counts=counts)
        computed, masked = int(counts[0]), int(counts[1])
        seconds = _best_time(lambda: attncore.attention(q, k, v, causal=is_causal,
                                                        block_q=block, block_k=block))
        rows.append({"mask": "causal" if is_causal else "full",
                     "cells_working": n * (n + 1) // 2 if is_causal else n * n,
                     "cells_total": n * n,
                     "blocks_computed": computed // heads, "blocks_masked": masked // heads,
                     "blocks_skipped": nb * nb - computed // heads, "blocks_total": nb * nb,
                     "seconds": seconds})
    facts = {"rows_sum_to_one_max_error": float(np.abs(weights.sum(-1) - 1).max()),
             "weights_above_diagonal": int((np.triu(weights, 1) != 0).sum()),
             "time_ratio_full_over_causal": rows[0]["seconds"] / rows[1]["seconds"]}

    def draw(ax):
        from matplotlib.colors import ListedColormap
        from matplotlib.patches import Patch

        from attncore.teach.live import causal_blocks

        grid = causal_blocks(n, block)["grid"]
        colours = ["0.92", "C1", "C0"]  # skipped, masked (diagonal), whole
        ax.imshow(grid, cmap=ListedColormap(colours), vmin=0, vmax=2)
        ax.set_xticks(np.arange(-0.5, nb), [], minor=True)
        ax.set_yticks(np.arange(-0.5, nb), [], minor=True)
        ax.grid(which="minor", color="white", lw=1)
        ax.tick_params(which="minor", length=0)
        labels = [f"whole: {int((grid == 2).sum())}", f"masked (diagonal): {int((grid == 1).sum())}",
                  f"skipped: {int((grid == 0).sum())}"]
        ax.legend(handles=[Patch(color=c, label=t) for c, t in zip(colours[::-1], labels)],
                  loc="upper right", fontsize=9)
        ax.set(xlabel=f"key block ({block} keys each)", ylabel=f"query block ({block} rows each)")

    return Result("causal", f"the causal mask: {rows[1]['blocks_skipped']} of {nb * nb} blocks "
                  f"skipped at n={n}", rows, facts, draw, figsize=(7.5, 7.5))


# ---- where the materialised table wins and loses ----------------------------------


def crossover(ns=(64, 128, 256, 512, 1024, 2048, 4096), d=64, heads=4, seed=0):
    """Naive (materialised) against blockwise attention on this machine: time
    and peak memory vs n.  While the n×m table fits in cache the naive passes
    are cheap; as it grows, its memory grows as n² and its time falls behind."""

    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
        row = {"n": n}
        for method in ("naive", "flash"):
            row[f"{method}_seconds"] = _best_time(
                lambda: attncore.attention(q, k, v, method=method))
            row[f"{method}_peak_bytes"] = measure(attncore.attention, q, k, v, method=method,
                                                  repeat=0).peak_bytes
        row["naive_over_flash"] = row["naive_seconds"] / row["flash_seconds"]
        rows.append(row)

    def draw(ax):
        n = [r["n"] for r in rows]
        ax.semilogx(n, [r["naive_over_flash"] for r in rows], "o-", color="C3",
                    label="naive time ÷ blockwise time")
        ax.axhline(1, color="k", lw=1, ls="--", label="equal time")
        ax.set_xticks(n, [str(t) for t in n])
        ax.minorticks_off()
        ax.set(xlabel="n", ylabel="naive time ÷ blockwise time (> 1: blockwise faster)")
        mem = ax.twinx()
        mem.plot(n, [r["naive_peak_bytes"] for r in rows], "s:", color="C0",
                 label="peak bytes, naive")
        mem.plot(n, [r["flash_peak_bytes"] for r in rows], "^:", color="C2",
                 label="peak bytes, blockwise")
        mem.set_yscale("log")
        mem.set_ylabel("peak bytes (dotted)")
        lines = ax.get_legend_handles_labels()
        more = mem.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=9, loc="upper left")

    return Result("crossover", "naive vs blockwise on this machine", rows,
                  {"heads": heads, "d": d}, draw)


# ---- compute-bound and bandwidth-bound ---------------------------------------------


def regimes(n_prefill=2048, m_decode=16384, heads=8, d=128, quick=True):
    """A prefill and a decode step placed on this machine's roofline, measured
    now: prefill does ~n FLOPs per byte and is bound by the FMA units, decode
    ~1 FLOP per byte and by the memory."""
    from attncore import bench

    roofs = bench.measure_roofs(attncore.get_num_threads(), quick=quick)
    ridge = roofs["fma_gflops"] / roofs["read_gbs"]
    cases = {"prefill": bench.Case(n_prefill, d, False, H=heads),
             "decode": bench.Case(1, d, False, H=heads, regime="decode", keys=m_decode)}
    rows = []
    for name, case in cases.items():
        inputs = bench.make_inputs(case)
        seconds = _best_time(bench.runner("attncore-flash", case, inputs))
        ai = case.flops / case.bytes("attncore-flash")
        rows.append({"regime": name, "n": case.n, "m": case.m, "intensity": ai,
                     "gflops": case.flops / seconds / 1e9,
                     "gbs": case.bytes("attncore-flash") / seconds / 1e9,
                     "bound": "compute" if ai > ridge else "bandwidth",
                     "roof_gflops": min(roofs["fma_gflops"], ai * roofs["read_gbs"])})

    def draw(ax):
        ai = np.logspace(-1, 4, 200)
        ax.loglog(ai, np.minimum(roofs["fma_gflops"], ai * roofs["read_gbs"]), "k-", label="roof")
        for r in rows:
            ax.scatter([r["intensity"]], [r["gflops"]], s=60, label=f"{r['regime']} (measured)")
        ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="GFLOP/s")
        ax.legend(fontsize=9)

    return Result("regimes", "prefill is compute-bound, decode bandwidth-bound", rows,
                  {"fma_gflops": roofs["fma_gflops"], "read_gbs": roofs["read_gbs"],
                   "ridge_flop_per_byte": ridge}, draw)


# ---- the family -------------------------------------------------------------------


def family(ns=(256, 512, 1024, 2048, 4096), d=64, heads=4, window=256, seed=0):
    """The members of the attention family on the same data, with their cost
    measured against n: full (n² pairs), causal (n(n+1)/2), sliding window
    (about n·w: the band), and linear attention (n·d² — no pairs at all, at the
    price of replacing the softmax by a feature map)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
        members = {
            "full": (lambda: attncore.attention(q, k, v), n * n),
            "causal": (lambda: attncore.attention(q, k, v, causal=True), n * (n + 1) // 2),
            f"window {window}": (lambda: attncore.attention(q, k, v, causal=True, window=window),
                                 sum(min(i + 1, window) for i in range(n))),
            "linear": (lambda: attncore.linear_attention(q, k, v, causal=True), 0),
        }
        for name, (fn, pairs) in members.items():
            rows.append({"n": n, "member": name, "pairs": pairs, "seconds": _best_time(fn)})

    def draw(ax):
        for name in dict.fromkeys(r["member"] for r in rows):
            pts = [(r["n"], r["seconds"]) for r in rows if r["member"] == name]
            ax.loglog(*zip(*pts), "o-", label=name)
        ax.set_xticks(list(ns), [str(t) for t in ns])
        ax.minorticks_off()
        ax.set(xlabel="n", ylabel="seconds (best of 3)")
        ax.legend(fontsize=9)

    return Result("family", "the attention family: what each member costs as n grows", rows,
                  {"d": d, "heads": heads, "window": window}, draw)


# ---- sharing keys and values: MHA, GQA, MQA -----------------------------------------


def kv_sharing(heads=32, kv_heads=(32, 8, 4, 1), d_head=128, m=8192, d_model=4096, seed=0):
    """Query heads sharing key/value heads (k and v with fewer heads than q in
    :func:`attncore.attention`; ``kv_heads`` in :func:`attncore.multi_head_attention`):
    MHA when every query head has its own, GQA when groups share one, MQA when
    all share a single one.  Per layer: the parameters of W_K and W_V, the KV
    cache bytes per token (float32), one decode step over ``m`` cached keys
    measured now, and the output checked against MHA on the shared heads
    repeated (``np.repeat``), which is what sharing means."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, 1, d_head)).astype(np.float32)
    rows = []
    for kv in kv_heads:
        k = rng.standard_normal((kv, m, d_head)).astype(np.float32)
        v = rng.standard_normal((kv, m, d_head)).astype(np.float32)
        out = attncore.attention(q, k, v)
        group = heads // kv
        ref = attncore.attention(q, np.repeat(k, group, axis=0), np.repeat(v, group, axis=0))
        rows.append({"kind": "MHA" if kv == heads else "MQA" if kv == 1 else "GQA",
                     "kv_heads": kv, "query_heads_per_kv_head": group,
                     "W_K_W_V_params": 2 * d_model * kv * d_head,
                     "kv_cache_bytes_per_token": 2 * kv * d_head * 4,
                     "decode_seconds": _best_time(lambda: attncore.attention(q, k, v)),
                     "max_diff_vs_repeated": float(np.abs(out - ref).max())})
    for r in rows:
        r["speedup_vs_mha"] = rows[0]["decode_seconds"] / r["decode_seconds"]

    def draw(ax):
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["kv_cache_bytes_per_token"] / rows[0]["kv_cache_bytes_per_token"]
                         for r in rows], 0.4, label="KV cache per token (÷ MHA)")
        ax.bar(x + 0.2, [r["decode_seconds"] / rows[0]["decode_seconds"] for r in rows], 0.4,
               label="decode step time, measured (÷ MHA)")
        ax.set_xticks(x, [f"{r['kind']}\n{heads}/{r['kv_heads']}" for r in rows])
        ax.set(xlabel="query heads / key-value heads", ylabel="relative to MHA")
        ax.legend(fontsize=9)

    return Result("kv_sharing", f"MHA → GQA → MQA: {heads} query heads, fewer key/value heads",
                  rows, {"heads": heads, "d_head": d_head, "m": m, "d_model": d_model}, draw)
