"""Experiments on what attention costs, measured on this machine with the one
timer of attncore.bench.timing (medians of paired, interleaved rounds, with
their spread): memory (why n²), the causal mask's skipped blocks (counted by
the kernel), naive against blockwise, the bytes each moves, the two regimes on
the roofline, decode as a process, the family of variants, and MHA → GQA → MQA."""

from __future__ import annotations

import numpy as np

import attncore
from attncore._api import _attention  # the kernel's own tile counts (block_counts)
from attncore.bench.timing import best_time, measure, rounds_of
from attncore.teach.result import Result

ROUNDS = 7  # interleaved rounds behind every time these experiments print


def _best_time(fn):
    """The fastest of a warm-up and three timed calls."""
    return best_time(fn, min_time=0.0, min_reps=3)


def _rounds(fns: dict, rounds: int = ROUNDS) -> dict:
    """Each of ``fns`` (name -> callable) warmed up, then timed in ``rounds``
    interleaved rounds (one call of each per round, so a slow moment of the
    machine falls on all of them): name -> the list of its times."""
    for fn in fns.values():
        fn()
    return rounds_of(fns, min_time=0.0, min_rounds=rounds, max_rounds=rounds)


def _caches_fact(caches: dict | None = None) -> dict:
    """This machine's data caches (``cache_sizes()`` unless given), as facts:
    {"L1_bytes": ..., "L2_bytes": ..., "L3_bytes": ...}."""
    from attncore.bench.roofs import cache_sizes

    return {f"{level}_bytes": size
            for level, size in (cache_sizes() if caches is None else caches).items()}


def _legend_of_both(ax, twin, **kw) -> None:
    """One legend for a plot and its twin axis."""
    lines, labels = ax.get_legend_handles_labels()
    more, more_labels = twin.get_legend_handles_labels()
    ax.legend(lines + more, labels + more_labels, **kw)


def _median(xs) -> float:
    return float(np.median(xs))


def _ratio(times: dict, a: str, b: str) -> tuple[float, float, float]:
    """The per-round ratio a ÷ b of paired times: (median, lowest, highest)."""
    r = np.asarray(times[a]) / np.asarray(times[b])
    return float(np.median(r)), float(r.min()), float(r.max())


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
    times = _rounds({mask: (lambda c=(mask == "causal"): attncore.attention(
        q, k, v, causal=c, block_q=block, block_k=block)) for mask in ("full", "causal")})
    rows = []
    for is_causal in (False, True):
        counts = np.zeros(2, np.int64)  # the kernel adds (tiles computed, tiles masked)
        _attention(q, k, v, causal=is_causal, block_q=block, block_k=block, block_counts=counts)
        computed, masked = int(counts[0]), int(counts[1])
        ts = times["causal" if is_causal else "full"]
        rows.append({"mask": "causal" if is_causal else "full",
                     "cells_working": n * (n + 1) // 2 if is_causal else n * n,
                     "cells_total": n * n,
                     "blocks_computed": computed // heads, "blocks_masked": masked // heads,
                     "blocks_skipped": nb * nb - computed // heads, "blocks_total": nb * nb,
                     "seconds_median": _median(ts), "seconds_min": min(ts),
                     "seconds_max": max(ts)})
    ratio, lo, hi = _ratio(times, "full", "causal")
    facts = {"rows_sum_to_one_max_error": float(np.abs(weights.sum(-1) - 1).max()),
             "weights_above_diagonal": int((np.triu(weights, 1) != 0).sum()),
             "block_ratio_full_over_causal": rows[0]["blocks_computed"] / rows[1]["blocks_computed"],
             "time_ratio_full_over_causal": ratio,
             "time_ratio_lowest": lo, "time_ratio_highest": hi, "rounds": ROUNDS}

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
        times = _rounds({method: (lambda m=method: attncore.attention(q, k, v, method=m))
                         for method in ("naive", "flash")})
        for method in ("naive", "flash"):
            row[f"{method}_seconds"] = _median(times[method])
            row[f"{method}_peak_bytes"] = measure(attncore.attention, q, k, v, method=method,
                                                  repeat=0).peak_bytes
        row["naive_over_flash"], row["ratio_lowest"], row["ratio_highest"] = _ratio(
            times, "naive", "flash")
        rows.append(row)

    def draw(ax):
        n = [r["n"] for r in rows]
        ax.semilogx(n, [r["naive_over_flash"] for r in rows], "o-", color="C3",
                    label=f"naive time ÷ blockwise time (median of {ROUNDS} paired rounds)")
        ax.fill_between(n, [r["ratio_lowest"] for r in rows], [r["ratio_highest"] for r in rows],
                        color="C3", alpha=0.2, label="lowest to highest round")
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
        _legend_of_both(ax, mem, fontsize=9, loc="upper left")

    return Result("crossover", "naive vs blockwise on this machine", rows,
                  {"heads": heads, "d": d, "rounds": ROUNDS}, draw)


# ---- bytes moved -------------------------------------------------------------------

# A datacenter GPU's published figures, for the ridge point against this CPU's:
# NVIDIA H100 SXM5 datasheet, dense BF16 tensor-core FLOP/s and HBM3 bandwidth.
GPU_PUBLISHED = {"name": "NVIDIA H100 SXM5 (datasheet: dense BF16, HBM3)",
                 "tflops": 989.0, "tbs": 3.35}


def traffic(ns=(512, 1024, 2048, 4096, 8192, 16384), d=64, seed=0, quick=False):
    """Bytes moved, counted, against time measured: one head of float32
    attention at each n (m = n), naive against blockwise.

    Both read Q, K and V and write O (16·n·d bytes).  Naive also writes the
    n×m table and reads it back in each pass over it (pass 1 writes S, pass 3's
    softmax reads and rewrites it, pass 4 reads it: 4·n·m·4 bytes); the
    blockwise kernel never writes it, but reads K and V once per query tile
    (n / block_q times).  Which memory those bytes come from depends on where
    the table fits: beside each row the table's size against this machine's
    caches (sysfs), and the read roof and FMA roof measured now.  The times are
    medians of paired, interleaved rounds, with the ratio's lowest and highest
    round."""
    from attncore import bench
    from attncore.bench.roofs import cache_sizes

    caches = cache_sizes()
    roofs = bench.measure_roofs(attncore.get_num_threads(), quick=True)
    bq = attncore.info()["default_blocks"]["float32"][0]
    it = 4
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        q, k, v = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
        table = n * n * it
        io = it * 4 * n * d
        naive_bytes = io + 4 * table
        tiles = -(-n // bq)
        flash_bytes = it * 2 * n * d + tiles * it * 2 * n * d
        where = next((lvl for lvl in ("L2", "L3") if lvl in caches and table <= caches[lvl]),
                     "DRAM")
        times = _rounds({m: (lambda m=m: attncore.attention(q, k, v, method=m))
                         for m in ("naive", "flash")}, rounds=3 if quick or n >= 8192 else 5)
        ratio, lo, hi = _ratio(times, "naive", "flash")
        t_naive, t_flash = _median(times["naive"]), _median(times["flash"])
        rows.append({"n": n, "table_bytes": table, "table_fits": where,
                     "naive_bytes": naive_bytes, "blockwise_bytes": flash_bytes,
                     "naive_seconds": t_naive, "blockwise_seconds": t_flash,
                     "naive_over_blockwise": ratio, "ratio_lowest": lo, "ratio_highest": hi,
                     "naive_gbs": naive_bytes / t_naive / 1e9,
                     "naive_bytes_at_read_roof_seconds": naive_bytes / (roofs["read_gbs"] * 1e9),
                     "flops": 4 * n * n * d})
    ridge = roofs["fma_gflops"] / roofs["read_gbs"]
    gpu_ridge = GPU_PUBLISHED["tflops"] * 1e12 / (GPU_PUBLISHED["tbs"] * 1e12)
    facts = {"d": d, "block_q": bq, "read_gbs": roofs["read_gbs"],
             "fma_gflops": roofs["fma_gflops"], "ridge_flop_per_byte": ridge,
             "blockwise_intensity_flop_per_byte": bq / 2,
             "naive_intensity_flop_per_byte": d / 4,
             "gpu": GPU_PUBLISHED["name"], "gpu_ridge_flop_per_byte": gpu_ridge,
             **_caches_fact(caches)}

    def draw(ax):
        n = [r["n"] for r in rows]
        ax.loglog(n, [r["naive_bytes"] for r in rows], "o-", color="C3",
                  label="naive: bytes moved (the n×n table 4 times)")
        ax.loglog(n, [r["blockwise_bytes"] for r in rows], "s-", color="C0",
                  label=f"blockwise: bytes moved (K, V once per {bq}-row tile)")
        ax.loglog(n, [r["table_bytes"] for r in rows], ":", color="0.4",
                  label="the n×n table (float32)")
        for lvl, ls in (("L2", "--"), ("L3", "-.")):
            if lvl in caches:
                ax.axhline(caches[lvl], color="0.6", ls=ls, lw=1,
                           label=f"{lvl} cache: {caches[lvl] / 2**20:g} MiB")
        ax.set_xticks(n, [str(t) for t in n])
        ax.minorticks_off()
        ax.set(xlabel="n (= m; one head, d = 64, float32)", ylabel="bytes")
        tw = ax.twinx()
        tw.semilogx(n, [r["naive_over_blockwise"] for r in rows], "^--", color="C2",
                    label="measured: naive time ÷ blockwise time")
        tw.axhline(1, color="C2", lw=0.8)
        tw.set_ylabel("naive time ÷ blockwise time (green)")
        _legend_of_both(ax, tw, fontsize=8, loc="upper left")

    return Result("traffic", "bytes moved: the naive table against blockwise tiles", rows,
                  facts, draw)


# ---- compute-bound and bandwidth-bound ---------------------------------------------


def regimes(n_prefill=2048, m_decode=16384, heads=8, d=128, quick=True, precisions=True):
    """A prefill and a decode step placed on this machine's roofline, measured
    now.  Counting the compulsory traffic (Q, K, V read and O written once),
    a float32 prefill of n against n does n/4 FLOPs per byte and is bound by
    the FMA units; a decode step ½ FLOP per byte of K and V (1 with a 16-bit
    cache), bound by the memory.  (:func:`traffic` counts what a tiled kernel
    really moves: K and V once per query tile.)

    With ``precisions`` each regime is measured in every precision the kernels
    take: prefill with float32 and bfloat16 q, k, v; decode against float32,
    float16, bfloat16 and int8 caches.  Halving the bytes moves a decode step
    right along the bandwidth roof (twice the FLOPs per byte); a bfloat16
    prefill's roof is the bfloat16 dot products' where the kernels use them
    (the probe's ``bf16dot_gflops``, measured where the CPU has them), else the
    FMA roof, since its arithmetic is float32."""
    from attncore import _core, bench

    roofs = bench.measure_roofs(attncore.get_num_threads(), quick=quick)
    ridge = roofs["fma_gflops"] / roofs["read_gbs"]
    dot = roofs.get("bf16dot_gflops") if _core.bf16dot_supported() else None
    prefill = ("float32", "bfloat16") if precisions else ("float32",)
    caches = ("float32", "float16", "bfloat16", "int8") if precisions else ("float32",)
    cases = [("prefill", p, bench.Case(n_prefill, d, False, H=heads, dtype=p)) for p in prefill]
    cases += [("decode", c, bench.Case(1, d, False, H=heads, regime="decode", keys=m_decode,
                                       kv_dtype=c)) for c in caches]
    rows = []
    for name, precision, case in cases:
        inputs = bench.make_inputs(case)
        seconds = _best_time(bench.runner("attncore-flash", case, inputs))
        ai = case.flops / case.bytes("attncore-flash")
        bf16_prefill = name == "prefill" and precision == "bfloat16"
        compute = dot if bf16_prefill and dot is not None else roofs["fma_gflops"]
        rows.append({"regime": name, "precision": precision, "n": case.n, "m": case.m,
                     "intensity": ai, "gflops": case.flops / seconds / 1e9,
                     "gbs": case.bytes("attncore-flash") / seconds / 1e9,
                     "bound": "compute" if ai > compute / roofs["read_gbs"] else "bandwidth",
                     "roof_gflops": min(compute, ai * roofs["read_gbs"])})

    def draw(ax):
        ai = np.logspace(-1, 4, 200)
        ax.loglog(ai, np.minimum(roofs["fma_gflops"], ai * roofs["read_gbs"]), "k-",
                  label="roof (FMA, read)")
        if dot is not None:
            ax.loglog(ai, np.minimum(dot, ai * roofs["read_gbs"]), "k--",
                      label="roof (bfloat16 dot products)")
        for r in rows:
            ax.scatter([r["intensity"]], [r["gflops"]], s=60,
                       marker="o" if r["regime"] == "prefill" else "s",
                       label=f"{r['regime']} {r['precision']} (measured)")
        ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="GFLOP/s")
        ax.legend(fontsize=8)

    facts = {"fma_gflops": roofs["fma_gflops"], "read_gbs": roofs["read_gbs"],
             "ridge_flop_per_byte": ridge}
    if dot is not None:
        facts["bf16dot_gflops"] = dot
    return Result("regimes", "prefill is compute-bound, decode bandwidth-bound", rows, facts,
                  draw)


# ---- decode as a process -------------------------------------------------------------

# A model of Llama-3-8B's shape (its published configuration): 32 layers, 32 query
# heads sharing 8 key/value heads of 128 dimensions.
MODEL = {"name": "32 layers, 32 query / 8 KV heads, d_head 128 (Llama-3-8B's shape)",
         "layers": 32, "heads": 32, "kv_heads": 8, "d_head": 128}


def decode(prompt=512, steps=64, heads=8, kv_heads=2, d_head=64, batch=4, context=8192,
           generate=1024, seed=0):
    """Decoding as a process, on ``attncore.KVCache``: a prompt's keys and
    values appended at once, then one token at a time, each step attending its
    one query to everything cached; per step the cache length and the K/V bytes
    that step read, and their running total.  Beside it, the arithmetic of a
    whole model (``MODEL``): the cache per token (2 · layers · kv_heads ·
    d_head values) and at ``context`` tokens per dtype, and the K/V bytes read
    over a generation of ``generate`` tokens after ``context`` — Σ of the
    lengths, which grows as the square of the generation.  And batching,
    measured: a step for ``batch`` sequences reads each sequence's own cache,
    so its time grows with the batch where weights (shared) would not."""
    rng = np.random.default_rng(seed)
    cache = attncore.KVCache(kv_heads, d_head)
    per_token = 2 * kv_heads * d_head * 4  # float32

    def token(t):
        return (rng.standard_normal((kv_heads, t, d_head), dtype=np.float32),
                rng.standard_normal((kv_heads, t, d_head), dtype=np.float32))

    cache.append(*token(prompt))
    rows, total = [], 0
    show = {1, 2, 3, steps // 2, steps}
    for step in range(1, steps + 1):
        k, v = token(1)
        cache.append(k, v)
        q = rng.standard_normal((heads, 1, d_head), dtype=np.float32)
        out = cache.attend(q)
        read = len(cache) * per_token
        total += read
        if step in show:
            ref = attncore.attention(q, cache.keys, cache.values)
            rows.append({"step": step, "cache_tokens": len(cache), "kv_bytes_read": read,
                         "kv_bytes_read_so_far": total,
                         "max_diff_vs_attention": float(np.abs(out - ref).max())})
    # a whole model's cache, per dtype
    mdl = MODEL
    per_tok = {name: 2 * mdl["layers"] * mdl["kv_heads"] * mdl["d_head"] * size
               for name, size in (("float32", 4), ("float16", 2), ("bfloat16", 2))}
    lengths = context * generate + generate * (generate - 1) // 2  # Σ of the cache lengths
    # batching: B sequences, each with its own cache of the same length
    m = 32768  # 32 MiB of float32 K/V per sequence at these sizes: past the L2 caches
    one = [token(m) for _ in range(batch)]
    q1 = rng.standard_normal((1, heads, 1, d_head), dtype=np.float32)
    kb = np.stack([k for k, _ in one])
    vb = np.stack([v for _, v in one])
    qb = np.repeat(q1, batch, axis=0)
    times = _rounds({"1": lambda: attncore.attention(q1, kb[:1], vb[:1]),
                     "B": lambda: attncore.attention(qb, kb, vb)})
    ratio, lo, hi = _ratio(times, "B", "1")
    facts = {"model": mdl["name"],
             **{f"model_cache_per_token_{k}": v for k, v in per_tok.items()},
             **{f"model_cache_at_{context}_{k}": v * context for k, v in per_tok.items()},
             "generate": generate, "context": context,
             "model_kv_bytes_read_generating_bfloat16": lengths * per_tok["bfloat16"],
             "batch": batch, "batch_step_time_ratio": ratio, "batch_ratio_lowest": lo,
             "batch_ratio_highest": hi, "batch_kv_bytes_per_sequence": m * per_token,
             "rounds": ROUNDS}

    def draw(ax):
        t = np.arange(0, generate + 1)
        for name, ls in (("float32", "-"), ("bfloat16", "--")):
            cum = per_tok[name] * (context * t + t * (t - 1) / 2)
            ax.plot(t, cum / 2**30, ls, label=f"K/V read so far, {name} cache")
        ax.plot(t, per_tok["bfloat16"] * (context + t) / 2**30, ":", color="0.4",
                label="the cache itself, bfloat16")
        ax.set(xlabel=f"tokens generated after a {context}-token context",
               ylabel="GiB (one sequence, the whole model)")
        ax.set_title(mdl["name"], fontsize=9)
        ax.legend(fontsize=9)

    return Result("decode", "decode as a process: every step reads the whole cache", rows, facts,
                  draw)


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
        times = _rounds({name: fn for name, (fn, _) in members.items()})
        for name, (fn, pairs) in members.items():
            rows.append({"n": n, "member": name, "pairs": pairs,
                         "seconds": _median(times[name]), "spread": float(
                             np.max(times[name]) / np.min(times[name]) - 1)})

    def draw(ax):
        for name in dict.fromkeys(r["member"] for r in rows):
            pts = [(r["n"], r["seconds"]) for r in rows if r["member"] == name]
            ax.loglog(*zip(*pts), "o-", label=name)
        ax.set_xticks(list(ns), [str(t) for t in ns])
        ax.minorticks_off()
        ax.set(xlabel="n", ylabel=f"seconds (median of {ROUNDS} interleaved rounds)")
        ax.legend(fontsize=9)

    return Result("family", "the attention family: what each member costs as n grows", rows,
                  {"d": d, "heads": heads, "window": window, "rounds": ROUNDS}, draw)


# ---- sharing keys and values: MHA, GQA, MQA -----------------------------------------


def kv_sharing(heads=32, kv_heads=(32, 8, 4, 1), d_head=128, m=8192, d_model=4096, seed=0):
    """Query heads sharing key/value heads (k and v with fewer heads than q in
    :func:`attncore.attention`; ``kv_heads`` in :func:`attncore.multi_head_attention`):
    MHA when every query head has its own, GQA when groups share one, MQA when
    all share a single one.  Per layer: the parameters of W_K and W_V, the KV
    cache bytes per token (float32), one decode step over ``m`` cached keys
    measured now, and the output checked against MHA on the shared heads
    repeated (``np.repeat``), which is what sharing means.  The bytes a step
    reads shrink with the K/V heads; its arithmetic (4·d_head FLOPs per query
    head and key) does not, so each layout's intensity is beside its time, and
    the roofs measured in the same call."""
    from attncore import bench

    rng = np.random.default_rng(seed)
    roofs = bench.measure_roofs(attncore.get_num_threads(), quick=True)
    flops = 4 * heads * m * d_head
    q = rng.standard_normal((heads, 1, d_head)).astype(np.float32)
    kvs = {kv: (rng.standard_normal((kv, m, d_head)).astype(np.float32),
                rng.standard_normal((kv, m, d_head)).astype(np.float32)) for kv in kv_heads}
    times = _rounds({kv: (lambda k=k, v=v: attncore.attention(q, k, v))
                     for kv, (k, v) in kvs.items()})
    rows = []
    for kv, (k, v) in kvs.items():
        out = attncore.attention(q, k, v)
        group = heads // kv
        ref = attncore.attention(q, np.repeat(k, group, axis=0), np.repeat(v, group, axis=0))
        speedup, lo, hi = _ratio(times, kv_heads[0], kv)
        rows.append({"kind": "MHA" if kv == heads else "MQA" if kv == 1 else "GQA",
                     "kv_heads": kv, "query_heads_per_kv_head": group,
                     "W_K_W_V_params": 2 * d_model * kv * d_head,
                     "kv_cache_bytes_per_token": 2 * kv * d_head * 4,
                     "kv_cache_bytes": 2 * kv * d_head * 4 * m,
                     "decode_seconds": _median(times[kv]),
                     "intensity": flops / (2 * kv * d_head * 4 * m),
                     "gflops": flops / _median(times[kv]) / 1e9,
                     "gbs": 2 * kv * d_head * 4 * m / _median(times[kv]) / 1e9,
                     "speedup_vs_mha": speedup, "speedup_lowest": lo, "speedup_highest": hi,
                     "max_diff_vs_repeated": float(np.abs(out - ref).max())})

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
                  rows, {"heads": heads, "d_head": d_head, "m": m, "d_model": d_model,
                         "rounds": ROUNDS, "flops": flops, "fma_gflops": roofs["fma_gflops"],
                         "read_gbs": roofs["read_gbs"],
                         "ridge_flop_per_byte": roofs["fma_gflops"] / roofs["read_gbs"],
                         **_caches_fact()}, draw)
