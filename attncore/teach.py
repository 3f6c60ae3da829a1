"""Teaching experiments: the facts an attention course states, run on the real
kernels (scores, softmax and attention from the C core, never a second toy
implementation), reproducible by seed, tabulated and drawn.

Each function returns a :class:`Result` with ``.table()`` (a list of dict rows of
plain Python values), ``.plot(ax=None)`` (matplotlib, labelled) and a readable repr.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import attncore

__all__ = ["Result", "scaling", "normalizers", "memory", "trace", "permutation", "causal",
           "crossover", "scorers", "saturation", "regimes", "multihead", "family"]


def _plain(x):
    """NumPy scalars and arrays to plain Python values, for tables."""
    if isinstance(x, np.ndarray):
        return [_plain(v) for v in x.tolist()] if x.ndim else x.item()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


@dataclass
class Result:
    """What an experiment found: its rows, the facts they show, and a figure."""

    name: str
    title: str
    rows: list[dict]
    facts: dict = field(default_factory=dict)
    draw: Callable | None = field(default=None, repr=False)

    def table(self) -> list[dict]:
        return [{k: _plain(v) for k, v in r.items()} for r in self.rows]

    def plot(self, ax=None):
        import matplotlib

        if ax is None:
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(7, 4.2))
        self.draw(ax)
        ax.set_title(self.title)
        return ax

    def __repr__(self) -> str:
        rows = self.table()
        cols = list(rows[0]) if rows else []

        def fmt(v):
            if isinstance(v, float):
                return f"{v:.4g}"
            if isinstance(v, list):
                return "[" + ", ".join(fmt(x) for x in v) + "]"
            return str(v)

        cells = [[fmt(r[c]) for c in cols] for r in rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
        lines = [f"{self.name}: {self.title}"]
        lines += [f"  {k}: {fmt(_plain(v))}" for k, v in self.facts.items()]
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths)))
        lines += ["  " + "  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
        return "\n".join(lines)


def _entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) of each row of weights."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)


# ---- why √d_k ------------------------------------------------------------------


def scaling(dks=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), samples=300, positions=6, seed=0):
    """Why divide by √d_k: with N(0,1) components, q·k has variance d_k, so raw
    scores spread as √d_k and the softmax collapses onto one key; dividing by
    √d_k keeps the variance 1 and the entropy where it was, whatever d_k."""
    rng = np.random.default_rng(seed)
    rows = []
    for dk in dks:
        q = rng.standard_normal((samples, 1, dk))  # one query per sample, as (H, n=1, d)
        k = rng.standard_normal((samples, positions, dk))
        raw = attncore.scores(q, k, scale=1.0)[:, 0, :]  # (samples, positions), the C core
        scaled = raw / math.sqrt(dk)
        p_raw, p_scaled = attncore.softmax(raw), attncore.softmax(scaled)
        rows.append({
            "dk": dk,
            "var_measured": float(raw.var()),
            "var_theory": float(dk),
            "score_range": float(np.mean(raw.max(-1) - raw.min(-1))),
            "entropy_raw": float(_entropy(p_raw).mean()),
            "entropy_scaled": float(_entropy(p_scaled).mean()),
            "max_weight_raw": float(p_raw.max(-1).mean()),
            "max_weight_scaled": float(p_scaled.max(-1).mean()),
        })

    def draw(ax):
        d = [r["dk"] for r in rows]
        ax.semilogx(d, [r["entropy_raw"] for r in rows], "o-", label="entropy, raw q·k")
        ax.semilogx(d, [r["entropy_scaled"] for r in rows], "s-", label="entropy, q·k / √d_k")
        ax.axhline(math.log(positions), color="k", ls="--", lw=1,
                   label=f"maximum ln {positions} = {math.log(positions):.4f}")
        ax.set(xlabel="d_k", ylabel="mean softmax entropy (nats)")
        ax.legend(fontsize=8)

    return Result("scaling", "why √d_k: raw scores collapse the softmax, scaled ones do not",
                  rows, {"positions": positions, "max_entropy": math.log(positions)}, draw)


# ---- why softmax ----------------------------------------------------------------


def normalizers(scores=(2.0, 0.5, -1.0, 1.5, -0.5, 0.8), shift=10.0):
    """Why softmax: of the ways to turn scores into weights, softmax alone gives
    positive weights that sum to 1 *and* ignore adding a constant to every
    score (only differences between scores matter)."""
    s = np.asarray(scores, dtype=np.float64)
    methods = {
        "softmax": lambda x: attncore.softmax(x),  # the C core's
        "divide by sum": lambda x: x / x.sum(),
        "clip negatives, divide": lambda x: np.clip(x, 0, None) / np.clip(x, 0, None).sum(),
    }
    rows = []
    for name, fn in methods.items():
        w, w_shift = fn(s), fn(s + shift)
        changed = bool(np.max(np.abs(w - w_shift)) > 1e-12)
        negative = bool((w < 0).any())
        verdict = ("ok" if not (changed or negative) else
                   ", ".join(v for v, bad in (("negative weights", negative),
                                             ("changed by the shift", changed)) if bad))
        for shifted, weights in ((False, w), (True, w_shift)):
            rows.append({"method": name, "shifted": shifted, "weights": weights,
                         "sum": float(weights.sum()), "verdict": verdict})

    def draw(ax):
        width = 0.12
        x = np.arange(len(s))
        for idx, r in enumerate(rows):
            ax.bar(x + (idx - len(rows) / 2) * width, r["weights"], width,
                   label=f"{r['method']}{' +shift' if r['shifted'] else ''}")
        ax.set(xlabel="position", ylabel="weight")
        ax.axhline(0, color="k", lw=0.8)
        ax.legend(fontsize=6, ncol=2)

    return Result("normalizers", f"why softmax: three normalisers, before and after a +{shift} shift",
                  rows, {"scores": list(s), "shift": shift}, draw)


# ---- why n² ----------------------------------------------------------------------


def memory(ns=(512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072), heads=32,
           d_head=128, bytes_per_value=2, measured=False):
    """Why n²: the score table of one layer (n²·heads values) against the KV
    cache that produced it (2·n·heads·d_head values); with ``measured`` also
    the peak memory of real naive and blockwise calls (one head, d = 64,
    float32) at the sizes that fit."""
    from attncore._measure import measure
    from attncore._validate import memory_limit

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
        ax.loglog(n, [r["scores_bytes_layer"] for r in rows], "o-", label="score table, one layer")
        ax.loglog(n, [r["kv_cache_bytes"] for r in rows], "s-", label="KV cache, one layer")
        if measured:
            for method, mk in (("naive", "^"), ("flash", "v")):
                pts = [(r["n"], r[f"measured_{method}_bytes"]) for r in rows
                       if r[f"measured_{method}_bytes"] is not None]
                if pts:
                    ax.loglog(*zip(*pts), mk + ":", label=f"measured peak, {method} (1 head)")
        ax.set(xlabel="n (tokens)", ylabel="bytes")
        ax.legend(fontsize=8)

    return Result("memory", "why n²: the score table outgrows the KV cache", rows,
                  {"heads": heads, "d_head": d_head, "bytes_per_value": bytes_per_value}, draw)


# ---- one cell's journey ----------------------------------------------------------

_TRACE_Q = [[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [0.5, -1.0, 2.0]]
_TRACE_K = [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [-1.0, 0.5, 0.5]]
_TRACE_V = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]]


def trace(q=None, k=None, v=None, i=2, j=1):
    """One cell's whole journey: the products q_i,t·k_j,t, their sum, the scaled
    score, the row's exponentials and denominator, the weight of (i, j), its
    contribution to output row i, and that row as :func:`attncore.attention`
    computes it.  With no arrays: a 4-token, d_k = 3 example."""
    q = np.asarray(_TRACE_Q if q is None else q, dtype=np.float64)
    k = np.asarray(_TRACE_K if k is None else k, dtype=np.float64)
    v = np.asarray(_TRACE_V if v is None else v, dtype=np.float64)
    dk = q.shape[-1]
    scale = 1 / math.sqrt(dk)
    products = q[i] * k[j]
    row_scores = attncore.scores(q, k)[i]  # the C core's scaled row
    exps = np.exp(row_scores - row_scores.max())
    weights = attncore.softmax(row_scores)
    out = attncore.attention(q, k, v)
    contributions = weights[:, None] * v
    steps = [
        ("products q[i,t]·k[j,t]", products),
        ("dot product", float(products.sum())),
        (f"scaled score (× 1/√{dk})", float(products.sum() * scale)),
        ("row i's scores (C core)", row_scores),
        ("exp(score − max)", exps),
        ("denominator Σ exp", float(exps.sum())),
        ("weight of (i, j)", float(weights[j])),
        ("contribution weight·v_j", contributions[j]),
        ("Σ_j contributions", contributions.sum(axis=0)),
        ("output row i (attncore.attention)", out[i]),
    ]
    rows = [{"step": name, "value": val} for name, val in steps]

    def draw(ax):
        ax.bar(np.arange(len(weights)), weights, color=["C1" if t == j else "C0"
                                                        for t in range(len(weights))])
        ax.set(xlabel="key position", ylabel=f"weight of row {i}")

    return Result("trace", f"the journey of cell ({i}, {j})", rows,
                  {"i": i, "j": j, "weight": float(weights[j]),
                   "max_abs_diff_sum_vs_output": float(np.abs(contributions.sum(0) - out[i]).max())},
                  draw)


# ---- no positions, no order -----------------------------------------------------


def permutation(n=8, d=16, seed=0):
    """Without positional information attention is permutation-equivariant:
    reversing the tokens of self-attention reverses its output, to rounding."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    out = attncore.attention(x, x, x)
    out_rev = attncore.attention(x[::-1], x[::-1], x[::-1])
    diff = np.abs(out_rev - out[::-1]).max(axis=1)
    rows = [{"position": t, "max_abs_diff": float(diff[t])} for t in range(n)]

    def draw(ax):
        ax.imshow(np.concatenate([out, out_rev[::-1]], axis=1), aspect="auto", cmap="RdBu")
        ax.set(xlabel=f"output features: original | reversed-then-flipped back (d={d} each)",
               ylabel="token")

    return Result("permutation", "reversing the input reverses the output", rows,
                  {"max_abs_diff": float(diff.max())}, draw)


def _best_time(fn):
    """The fastest of a warm-up and three timed calls (the benchmarks' timer)."""
    from attncore.bench import best_time

    return best_time(fn, min_time=0.0, min_reps=3)


# ---- what the causal mask does ---------------------------------------------------


def causal(n=2048, d=64, heads=4, block=128, seed=0):
    """The causal mask: each row still sums to 1, only n(n+1)/2 of the n² cells
    do any work, and the blockwise kernel really skips the blocks above the
    diagonal — counted by the kernel itself — which shows in the time."""
    from attncore._api import _flash_counted

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
    small = rng.standard_normal((8, 4))
    _, weights = attncore.attention(small, small, small, causal=True, method="naive",
                                    return_weights=True)
    nb = -(-n // block)
    rows = []
    for is_causal in (False, True):
        _, computed, masked = _flash_counted(q, k, v, causal=is_causal, block_q=block,
                                             block_k=block)
        seconds = _best_time(lambda: attncore.attention(q, k, v, causal=is_causal,
                                                        block_q=block, block_k=block))
        rows.append({"mask": "causal" if is_causal else "full",
                     "cells_working": n * (n + 1) // 2 if is_causal else n * n,
                     "cells_total": n * n,
                     "blocks_computed": computed // heads, "blocks_masked": masked // heads,
                     "blocks_skipped": nb * nb - computed // heads, "blocks_total": nb * nb,
                     "seconds": seconds})
    facts = {"rows_sum_to_one_max_error": float(np.abs(weights.sum(-1) - 1).max()),
             "mask_8x8": (weights > 0).astype(int),
             "time_ratio_full_over_causal": rows[0]["seconds"] / rows[1]["seconds"]}

    def draw(ax):
        ax.imshow(weights, cmap="viridis")
        ax.set(xlabel="key j", ylabel="query i")

    return Result("causal", f"the causal mask: {rows[1]['blocks_skipped']} of {nb * nb} blocks "
                  f"skipped at n={n}", rows, facts, draw)


# ---- where the materialised table wins and loses ----------------------------------


def crossover(ns=(64, 128, 256, 512, 1024, 2048, 4096), d=64, heads=4, seed=0):
    """Naive (materialised) against blockwise attention on this machine: time
    and peak memory vs n.  While the n×m table fits in cache the naive passes
    are cheap; as it grows, its memory grows as n² and its time falls behind."""
    from attncore._measure import measure

    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
        row = {"n": n}
        for method in ("naive", "flash"):
            row[f"{method}_seconds"] = _best_time(lambda: attncore.attention(q, k, v, method=method))
            row[f"{method}_peak_bytes"] = measure(attncore.attention, q, k, v, method=method,
                                                  repeat=0).peak_bytes
        row["naive_over_flash"] = row["naive_seconds"] / row["flash_seconds"]
        rows.append(row)

    def draw(ax):
        n = [r["n"] for r in rows]
        ax.loglog(n, [r["naive_seconds"] for r in rows], "s-", label="naive (materialised)")
        ax.loglog(n, [r["flash_seconds"] for r in rows], "o-", label="blockwise")
        ax.set(xlabel="n", ylabel="seconds")
        ax.legend(fontsize=8)

    return Result("crossover", "naive vs blockwise on this machine", rows,
                  {"heads": heads, "d": d}, draw)


# ---- scoring functions -------------------------------------------------------------


def scorers(d=16, lengths=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0), seed=0):
    """Three ways to score a query against a key, on the same vectors scaled
    to several lengths: the dot product grows with the length (so the softmax
    sharpens), cosine removes the length, additive (Bahdanau) scoring
    vᵀ·tanh(W_q q + W_k k) saturates."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, d))
    k = rng.standard_normal((6, d))
    w_q, w_k = rng.standard_normal((d, d)) / math.sqrt(d), rng.standard_normal((d, d)) / math.sqrt(d)
    w_v = rng.standard_normal(d) / math.sqrt(d)
    rows = []
    for length in lengths:
        qs, ks = q * length, k * length
        dot = attncore.scores(qs, ks, scale=1.0)[0]  # the C core's
        unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
        cosine = attncore.scores(unit(qs), unit(ks), scale=1.0)[0]
        additive = np.tanh(qs @ w_q.T + ks @ w_k.T) @ w_v  # (6,): a small MLP, not attention
        rows.append({"length": length, "dot": dot, "cosine": cosine, "additive": additive,
                     "max_weight_dot": float(attncore.softmax(dot).max()),
                     "max_weight_cosine": float(attncore.softmax(cosine).max()),
                     "max_weight_additive": float(attncore.softmax(additive).max())})

    def draw(ax):
        x = [r["length"] for r in rows]
        for name in ("dot", "cosine", "additive"):
            ax.semilogx(x, [r[f"max_weight_{name}"] for r in rows], "o-", label=name)
        ax.set(xlabel="length of q and k (× the original)", ylabel="largest softmax weight")
        ax.legend(fontsize=8)

    return Result("scorers", "what length does to each scoring function", rows, {"d": d}, draw)


# ---- vanishing gradients without the scale ------------------------------------------


def saturation(dks=(4, 16, 64, 256, 1024), samples=200, positions=6, seed=0):
    """Why the scale matters for training: the gradient that reaches the scores
    through the softmax shrinks towards 0 as the unscaled scores spread with
    d_k (the softmax saturates: gradients vanish), and stays put with ÷√d_k.

    The gradient comes from the real backward kernel: attention over the
    scores themselves (queries = score rows, keys = the identity, scale 1), so
    that ``dq`` of :func:`attncore.attention_backward` is ∂loss/∂scores, for a
    random loss ``Σ out·dout`` with random values."""
    rng = np.random.default_rng(seed)
    eye = np.eye(positions)[None]  # keys = identity: S = q exactly
    rows = []
    for dk in dks:
        q = rng.standard_normal((samples, 1, dk))
        k = rng.standard_normal((samples, positions, dk))
        v = rng.standard_normal((samples, positions, 4))
        dout = rng.standard_normal((samples, 1, 4))
        raw = attncore.scores(q, k, scale=1.0)  # (samples, 1, positions), the C core
        out = {"dk": dk}
        for name, logits in (("raw", raw), ("scaled", raw / math.sqrt(dk))):
            keys = np.broadcast_to(eye, (samples, positions, positions))
            o, lse = attncore.attention(logits, keys, v, scale=1.0, return_lse=True)
            dlogits, _, _ = attncore.attention_backward(logits, keys, v, o, lse, dout, scale=1.0)
            out[f"grad_norm_{name}"] = float(np.linalg.norm(dlogits, axis=-1).mean())
        rows.append(out)

    def draw(ax):
        d = [r["dk"] for r in rows]
        ax.loglog(d, [r["grad_norm_raw"] for r in rows], "o-", label="raw q·k")
        ax.loglog(d, [r["grad_norm_scaled"] for r in rows], "s-", label="q·k / √d_k")
        ax.set(xlabel="d_k", ylabel="mean ‖∂loss/∂scores‖ (from attention_backward)")
        ax.legend(fontsize=8)

    return Result("saturation", "the gradient through the softmax vanishes without the scale",
                  rows, {"positions": positions}, draw)


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
        ax.legend(fontsize=8)

    return Result("regimes", "prefill is compute-bound, decode bandwidth-bound", rows,
                  {"fma_gflops": roofs["fma_gflops"], "read_gbs": roofs["read_gbs"],
                   "ridge_flop_per_byte": ridge}, draw)


# ---- many heads, one layer -----------------------------------------------------------


def multihead(tokens=6, heads=4, d_model=16, seed=0):
    """Several heads with fixed seeded projections look at the same sentence
    in different ways — each has its own weight map — while the layer's
    parameter count, 3·d² for W_Q, W_K, W_V plus d² for W_O, is the same for
    any number of heads (they split d_model, they do not add to it)."""
    from attncore._api import _project

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, d_model))
    d_head = d_model // heads
    w_q, w_k, w_v, w_o = (rng.standard_normal((d_model, d_model)) / math.sqrt(d_model)
                          for _ in range(4))

    def split(t):
        return np.swapaxes(t.reshape(tokens, heads, d_head), 0, 1)  # (heads, tokens, d_head)

    q, k, v = split(_project(x, w_q)), split(_project(x, w_k)), split(_project(x, w_v))
    _, weights = attncore.attention(q, k, v, method="naive", return_weights=True)
    rows = [{"head": h, "weights": weights[h], "attends_most_to": weights[h].argmax(-1),
             "entropy": float(_entropy(weights[h]).mean())} for h in range(heads)]
    # the ledger, from the shapes of each layer: W_Q, W_K, W_V (d_model, h·d_head), W_O (h·d_head, d_model)
    ledger = {f"params_{h}_heads": 3 * d_model * (h * (d_model // h)) + (h * (d_model // h)) * d_model
              for h in (1, 2, 4, 8) if d_model % h == 0}
    out = attncore.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=heads)
    facts = {"d_model": d_model, "d_head": d_head, **ledger, "output_shape": list(out.shape),
             "distinct_maps": len({w.tobytes() for w in weights})}

    def draw(ax):
        ax.imshow(np.concatenate(list(weights), axis=1), cmap="viridis")
        ax.set(xlabel=f"key (heads side by side, {tokens} each)", ylabel="query token")

    return Result("multihead", f"{heads} heads, {heads} different maps of the same tokens",
                  rows, facts, draw)


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
        ax.set(xlabel="n", ylabel="seconds")
        ax.legend(fontsize=8)

    return Result("family", "the attention family: what each member costs as n grows", rows,
                  {"d": d, "heads": heads, "window": window}, draw)
