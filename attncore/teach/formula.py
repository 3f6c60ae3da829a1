"""Experiments on why the formula is what it is: the √d_k scale, softmax among
normalisers, one cell's journey, permutation equivariance, scoring functions,
saturation without the scale, and many heads — all on the C kernels."""

from __future__ import annotations

import math

import numpy as np

import attncore
from attncore.teach.result import Result, _entropy


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


NORMALISERS = ("softmax", "divide by sum", "clip negatives, divide", "subtract min, divide")
MIN_EPS = 0.1  # "subtract min, divide": (s − min + ε) / Σ (s − min + ε), so no weight is 0


def normalise_one(method: str, x) -> tuple[np.ndarray | None, str]:
    """(weights, "") or (None, why the method is undefined for these scores)."""
    x = np.asarray(x, dtype=np.float64)
    if method == "softmax":
        return attncore.softmax(x), ""  # the C core's
    if method == "divide by sum":
        total = x.sum()
        if total == 0:
            return None, "undefined: the scores sum to 0, and dividing by 0 is not a weighting"
        return x / total, ""
    if method == "clip negatives, divide":
        kept = np.clip(x, 0, None)
        if kept.sum() == 0:
            return None, "undefined: every score is ≤ 0, so nothing is left after clipping"
        return kept / kept.sum(), ""
    if method == "subtract min, divide":
        lifted = x - x.min() + MIN_EPS
        return lifted / lifted.sum(), ""
    raise ValueError(f"method must be one of {NORMALISERS}, got {method!r}")


def normalizers(scores=(2.0, 0.5, -1.0, 1.5, -0.5, 0.8), shift=10.0, extra=-5.0):
    """Why softmax.  Four ways to turn scores into weights, one row each: the
    weights before and after adding ``shift`` to every score, whether they are
    all ≥ 0 and sum to 1, whether the shift moved them, and whether the odds
    of the first two keys (w₁/w₂) move when a seventh key scoring ``extra``
    joins the row.  Softmax is not alone in the first three: subtracting the
    minimum, (s − min + ε)/Σ, is positive, sums to 1 and ignores the shift too.
    What softmax adds is that the odds of two keys, exp(s₁ − s₂), depend on
    those two scores alone (a key joining the row leaves them be), that it is
    smooth everywhere (the min and the clip have kinks) with a gradient for
    every key, and that exp(a + b) = exp(a)·exp(b) turns a new reference point
    into one factor — the rescale the blockwise kernel and ``merge`` apply.  A
    method undefined for the scores says why instead of giving NaN weights."""
    s = np.asarray(scores, dtype=np.float64)
    more = np.append(s, extra)
    rows = []
    for name in NORMALISERS:
        (w, why), (w_shift, why_shift) = normalise_one(name, s), normalise_one(name, s + shift)
        w_more, why_more = normalise_one(name, more)
        nan = np.full(len(s), np.nan)
        if why or why_shift:
            rows.append({"method": name, "weights": nan if w is None else w,
                         "weights after the shift": nan if w_shift is None else w_shift,
                         "all ≥ 0": None, "sum": None, "moved by the shift": None,
                         "odds w1/w2 moved by a 7th key": None,
                         "verdict": why or f"{why_shift} (after the shift)"})
            continue
        negative = bool((w < 0).any())
        moved = bool(np.max(np.abs(w - w_shift)) > 1e-12)
        odds = None if why_more or w[1] == 0 or w_more[1] == 0 else bool(
            abs(w[0] / w[1] - w_more[0] / w_more[1]) > 1e-12 * abs(w[0] / w[1]))
        zeros = bool((w == 0).any())
        bad = [v for v, is_bad in (("negative weights", negative),
                                   ("keys at weight 0 get no gradient", zeros),
                                   ("moved by the shift", moved),
                                   ("odds moved by another key", odds)) if is_bad]
        rows.append({"method": name, "weights": w, "weights after the shift": w_shift,
                     "all ≥ 0": not negative, "sum": float(w.sum()),
                     "moved by the shift": moved, "odds w1/w2 moved by a 7th key": odds,
                     "verdict": ", ".join(bad) if bad else "a weighting, shift-blind, odds kept"})

    def draw(ax):
        width = 0.1
        x = np.arange(len(s))
        bars = [(r["method"], r["weights"]) for r in rows] + [
            (f"{r['method']} +shift", r["weights after the shift"]) for r in rows]
        for idx, (label, weights) in enumerate(bars):
            ax.bar(x + (idx - len(bars) / 2) * width, weights, width, label=label,
                   color=f"C{idx % len(rows)}", hatch="//" if idx >= len(rows) else None)
        ax.set(xlabel="position", ylabel="weight")
        ax.axhline(0, color="k", lw=0.8)
        ax.legend(fontsize=8, ncol=2)

    return Result("normalizers", f"why softmax: four normalisers, before and after a +{shift} "
                  "shift", rows, {"scores": list(s), "shift": shift, "seventh_key_score": extra,
                                  "min_epsilon": MIN_EPS}, draw)


# ---- one cell's journey ----------------------------------------------------------

_TRACE_Q = [[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [0.5, -1.0, 2.0]]
_TRACE_K = [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [-1.0, 0.5, 0.5]]
_TRACE_V = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]]


def trace(q=None, k=None, v=None, i=3, j=1):
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
        def vec(x):
            return "[" + ", ".join(f"{t:.3g}" for t in np.atleast_1d(x)) + "]"

        boxes = [
            (f"q_{i} = {vec(q[i])}\nk_{j} = {vec(k[j])}", "the query row and the key row"),
            (f"products {vec(products)}", f"q_{i},t · k_{j},t for t = 0 … {dk - 1}"),
            (f"dot = {products.sum():.4g}", "their sum"),
            (f"score = {products.sum() * scale:.4g}", f"× 1/√{dk}"),
            (f"row {i}: scores {vec(row_scores)}", "every key, by attncore.scores"),
            (f"exp(score − max) {vec(exps)}", f"denominator Σ = {exps.sum():.4g}"),
            (f"weight p_{i}{j} = {weights[j]:.4g}", f"exp / Σ; the row: {vec(weights)}"),
            (f"p_{i}{j}·v_{j} = {vec(contributions[j])}", f"v_{j} = {vec(v[j])}"),
            (f"output row {i} = Σ_j p_{i}j·v_j = {vec(contributions.sum(0))}",
             f"attncore.attention: {vec(out[i])}"),
        ]
        ax.set_xlim(0, 1)
        ax.set_ylim(0, len(boxes))
        for t, (main, side) in enumerate(boxes):
            y = len(boxes) - t - 0.5
            ax.text(0.03, y, main, ha="left", va="center", fontsize=10, family="monospace",
                    bbox={"boxstyle": "round", "fc": "C1" if t == 6 else "C0", "alpha": 0.2})
            ax.text(0.97, y, side, ha="right", va="center", fontsize=9, color="0.3")
            if t:
                ax.annotate("", xy=(0.015, y + 0.2), xytext=(0.015, y + 0.8),
                            arrowprops={"arrowstyle": "->", "color": "0.4"})
        ax.axis("off")

    return Result("trace", f"the journey of cell ({i}, {j}), from products to output row {i}", rows,
                  {"i": i, "j": j, "weight": float(weights[j]),
                   "max_abs_diff_sum_vs_output": float(np.abs(contributions.sum(0) - out[i]).max())},
                  draw, figsize=(10, 7.5))


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
        both = np.concatenate([out, out_rev[::-1]], axis=1)
        lim = float(np.abs(both).max())
        im = ax.imshow(both, aspect="auto", cmap="RdBu", vmin=-lim, vmax=lim)
        ax.figure.colorbar(im, ax=ax, label="output value")
        ax.axvline(d - 0.5, color="k", lw=2)
        ax.set(xlabel=f"output features: original | reversed-then-flipped back (d={d} each)",
               ylabel="token")

    return Result("permutation", "reversing the input reverses the output", rows,
                  {"max_abs_diff": float(diff.max())}, draw)


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
        ax.set_xticks(x, [f"{t:g}" for t in x])
        ax.minorticks_off()
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


# ---- many heads, one layer -----------------------------------------------------------


def multihead(tokens=6, heads=4, d_model=16, seed=0):
    """Several heads with fixed seeded projections look at the same sentence
    in different ways — each has its own weight map — while the layer's
    parameter count, 3·d² for W_Q, W_K, W_V plus d² for W_O, is the same for
    any number of heads (they split d_model, they do not add to it)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, d_model))
    d_head = d_model // heads
    w_q, w_k, w_v, w_o = (rng.standard_normal((d_model, d_model)) / math.sqrt(d_model)
                          for _ in range(4))

    def split(t):
        return np.swapaxes(t.reshape(tokens, heads, d_head), 0, 1)  # (heads, tokens, d_head)

    def project(w):  # x·w on the core's score kernel: the rows of x against the columns of w
        return attncore.scores(x, w.T, scale=1.0)

    q, k, v = split(project(w_q)), split(project(w_k)), split(project(w_v))
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
        im = ax.imshow(np.concatenate(list(weights), axis=1), cmap="viridis", vmin=0)
        ax.figure.colorbar(im, ax=ax, label="weight", fraction=0.02, pad=0.02)
        for h in range(1, heads):
            ax.axvline(h * tokens - 0.5, color="white", lw=3)
        ax.set_xticks(range(heads * tokens), [f"t{t}" for _ in range(heads) for t in range(tokens)],
                      fontsize=8)
        ax.set_yticks(range(tokens), [f"t{t}" for t in range(tokens)])
        top = ax.secondary_xaxis("top")
        top.set_xticks([h * tokens + (tokens - 1) / 2 for h in range(heads)],
                       [f"head {h}" for h in range(heads)])
        top.tick_params(length=0)
        ax.set(xlabel=f"key token, per head ({heads} heads × {tokens} tokens)",
               ylabel="query token")

    return Result("multihead", f"{heads} heads, {heads} different maps of the same tokens",
                  rows, facts, draw, figsize=(12, 4.8))
