"""The callbacks behind the live notebooks (``docs/notebooks/``): plain functions
of the values a widget holds, returning plain numbers, every one computed by
the C kernels.  The notebooks only wire widgets to them, so each can be
called and tested without a browser.

    sentence       the chapter's 6-word sentence: who looks at whom, Q edited live
    scaling        one sample of scores at width d_k, raw or ÷√d_k, and the entropy curve
    normalise      six scores through three normalisers, shifted by c, guarded
    trace          one cell's journey, from the products to the output row
    causal_row     a causal row: kept and dropped exponentials, the two denominators
    causal_blocks  the blockwise kernel's causal grid, and its own count
    online_softmax one row's keys in blocks: running max, sum, rescale, merge
    memory         the score table against the KV cache, and measured peaks
    heads          MHA → GQA → MQA: per-head maps and the parameter ledger
    permutation    reordering the words permutes the weights (equivariance)
    regimes        a prefill and a decode step on this machine's roofline
"""

from __future__ import annotations

import math

import numpy as np

import attncore
from attncore._api import _attention  # the kernel's own tile counts (block_counts)
from attncore.teach.formula import NORMALISERS, normalise_one
from attncore.teach.formula import scaling as scaling_table
from attncore.teach.result import _entropy

# "The cat was tired, so it slept" / 「猫很累，所以它睡了」: six words, each with
# a 4-number query (what it asks for) and key (what it offers).  Made by hand,
# not trained: "it" asks for an animate noun, and "cat" offers one, so row
# "it" looks back at "cat", as a reader's eye does.
SENTENCE = {"en": ("cat", "was", "tired", "so", "it", "slept"),
            "zh": ("猫", "很", "累", "所以", "它", "睡了")}
# components: animate noun, state / predicate, connective, pronoun reference
SENTENCE_K = np.array([[2.0, 0.2, 0.0, 0.5],    # cat: an animate noun, a referent
                       [0.0, 1.0, 0.2, 0.0],    # was
                       [0.3, 2.0, 0.0, 0.0],    # tired: a state
                       [0.0, 0.0, 2.0, 0.0],    # so: a connective
                       [0.5, 0.0, 0.0, 2.0],    # it: a pronoun
                       [0.2, 1.5, 0.3, 0.0]])   # slept
SENTENCE_Q = np.array([[0.0, 1.5, 0.0, 0.0],    # cat asks: what state am I in?
                       [1.0, 1.0, 0.0, 0.0],    # was: its subject and its complement
                       [1.5, 0.0, 0.0, 0.0],    # tired: who is tired?
                       [0.0, 1.0, 0.5, 0.0],    # so: the cause before it
                       [2.0, 0.0, 0.0, 0.2],    # it: which animate thing do I stand for?
                       [1.0, 0.5, 0.0, 1.0]])   # slept: who slept?


def sentence(query: int = 4, q: list[float] | None = None, v_equals_k: bool = True,
             v: list[list[float]] | None = None, language: str = "en") -> dict:
    """The 6-word sentence as the chapter draws it.

    ``query``: the word asking (its row); ``q``: its 4 numbers, replacing its
    own (a slider per component, or "use word X's key" buttons set it to
    ``SENTENCE_K[x]``); ``v_equals_k``: the values are the keys, as the
    chapter's small example has it, else ``v`` (6 rows of any width; one-hot
    rows make the output the weights themselves).

    Returns the tokens, Q, K, V, the 6×6 scores (``attncore.scores``) and
    weights (``attncore.softmax``), the asking row's weights, the word it
    looks at most, and its output (``attncore.attention``, checked against the
    weights' mix of V).
    """
    if language not in SENTENCE:
        raise ValueError(f"language must be one of {sorted(SENTENCE)}, got {language!r}")
    if not 0 <= int(query) < 6:
        raise ValueError(f"query must be a word index 0 … 5, got {query}")
    query = int(query)
    Q = SENTENCE_Q.copy()
    if q is not None:
        Q[query] = np.asarray(q, dtype=np.float64).reshape(4)
    K = SENTENCE_K
    V = K if v_equals_k else np.asarray(v, dtype=np.float64).reshape(6, -1)
    scores = attncore.scores(Q, K)  # (6, 6), ÷√4, from the C core
    weights = attncore.softmax(scores)
    out = attncore.attention(Q, K, V)
    row = weights[query]
    tokens = SENTENCE[language]
    return {"tokens": list(tokens), "query": query, "asker": tokens[query], "Q": Q, "K": K,
            "V": V, "scores": scores, "weights": weights, "row": row,
            "looks_at": tokens[int(np.argmax(row))], "row_sum": float(row.sum()),
            "output": out[query], "mix_of_v": row @ V}


def scaling(dk: int = 64, scaled: bool = True, seed: int = 0, positions: int = 6,
            samples: int = 300) -> dict:
    """One query against ``positions`` keys with N(0, 1) components of width
    ``dk``: its scores (raw q·k, or ÷√d_k) and softmax weights, and over
    ``samples`` such rows the score variance and the mean entropy, against the
    maximum ln(positions).  ``curve``: the same mean entropy for d_k = 2 …
    1024, raw and scaled (:func:`attncore.teach.scaling`)."""
    dk = int(dk)
    if dk < 1:
        raise ValueError(f"dk must be a positive integer, got {dk}")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((samples, 1, dk))
    k = rng.standard_normal((samples, positions, dk))
    scale = 1 / math.sqrt(dk) if scaled else 1.0
    s = attncore.scores(q, k, scale=scale)[:, 0, :]
    p = attncore.softmax(s)
    entropy = _entropy(p)
    table = scaling_table(samples=samples, positions=positions, seed=seed).table()
    return {"dk": dk, "scaled": scaled, "scores": s[0], "weights": p[0],
            "variance": float(s.var()), "variance_theory": dk * scale * scale,
            "entropy": float(entropy.mean()), "sample_entropy": float(entropy[0]),
            "max_entropy": math.log(positions), "max_weight": float(p.max(-1).mean()),
            "curve": [(r["dk"], r["entropy_raw"], r["entropy_scaled"]) for r in table]}


def normalise(scores=(2.0, 0.5, -1.0, 1.5, -0.5, 0.8), shift: float = 0.0) -> dict:
    """The scores and the scores + ``shift`` through each normaliser: the
    weights (None where the method is undefined, with the reason), whether
    they are all ≥ 0 and sum to 1, and whether the shift changed them.
    Softmax alone is defined for every shift and unchanged by it."""
    s = np.asarray(scores, dtype=np.float64)
    rows = []
    for method in NORMALISERS:
        w, why = normalise_one(method, s)
        ws, why_s = normalise_one(method, s + shift)
        both = w is not None and ws is not None
        rows.append({"method": method, "weights": w, "weights_shifted": ws,
                     "undefined": why or why_s,
                     "valid": both and bool((w >= 0).all() and (ws >= 0).all()
                                            and abs(w.sum() - 1) < 1e-12),
                     "changed_by_shift": None if not both else bool(np.abs(w - ws).max() > 1e-12)})
    return {"scores": s, "shift": float(shift), "rows": rows}


_CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Serif CJK SC", "Source Han Sans SC",
                 "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei",
                 "PingFang SC", "Heiti SC", "AR PL UMing CN")


def cjk_font() -> str | None:
    """A font family matplotlib can draw Chinese with, or None if none is
    installed (then figures label the words in English; the text readouts,
    drawn by the browser, keep the Chinese)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    found = next((name for name in _CJK_FAMILIES if name in installed), None)
    if found is None:  # installed after matplotlib cached its font list: add the files
        for path in font_manager.findSystemFonts():
            if any(tag in path for tag in ("CJK", "wqy", "WenQuanYi", "SourceHan", "uming")):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        installed = {f.name for f in font_manager.fontManager.ttflist}
        found = next((name for name in _CJK_FAMILIES if name in installed), None)
    return found


def causal_row(query: int = 4, language: str = "en") -> dict:
    """One row of the sentence under the causal mask: the exponentials
    ``exp(s_ij − max)`` the row keeps (keys up to itself) and those it drops
    (later keys), the full and the causal denominators, and the causal
    weights — equal to ``attncore.attention(..., causal=True)``'s row, and
    summing to 1 over the kept keys alone."""
    r = sentence(query, language=language)
    s = r["scores"][r["query"]]
    e = np.exp(s - s[: r["query"] + 1].max())  # the max over the keys the row may see
    kept = np.arange(6) <= r["query"]
    weights = np.where(kept, e, 0.0) / e[kept].sum()
    _, lse, full_w = attncore.attention(SENTENCE_Q, SENTENCE_K, SENTENCE_K, causal=True,
                                        method="naive", return_lse=True, return_weights=True)
    return {"tokens": r["tokens"], "query": r["query"], "scores": s, "exps": e, "kept": kept,
            "full_denominator": float(e.sum()), "causal_denominator": float(e[kept].sum()),
            "weights": weights, "kernel_weights": full_w[r["query"]],
            "kernel_output": attncore.attention(SENTENCE_Q, SENTENCE_K, SENTENCE_K,
                                                causal=True)[r["query"]],
            "output": weights @ SENTENCE_K}


def causal_blocks(n: int = 1024, block: int = 128) -> dict:
    """The blockwise kernel's grid under the causal mask: which (Q block, K
    block) tiles it computes whole, computes masked (on the diagonal) and
    skips, drawn from the bounds, with the kernel's own counts beside."""
    n, block = int(n), int(block)
    if n < 1 or block < 1:
        raise ValueError(f"n and block must be positive, got n={n}, block={block}")
    nb = -(-n // block)
    grid = np.zeros((nb, nb), np.int8)  # 0 skipped, 1 masked, 2 whole
    for i in range(nb):
        last_row = min(n, (i + 1) * block) - 1
        for j in range(nb):
            first_key, last_key = j * block, min(n, (j + 1) * block) - 1
            grid[i, j] = 0 if first_key > last_row else 2 if last_key <= i * block else 1
    x = np.zeros((1, n, 8), np.float32)
    counts = np.zeros(2, np.int64)
    _attention(x, x, x, causal=True, block_q=block, block_k=block, block_counts=counts)
    return {"grid": grid, "whole": int((grid == 2).sum()), "masked": int((grid == 1).sum()),
            "skipped": int((grid == 0).sum()), "kernel_computed": int(counts[0]),
            "kernel_masked": int(counts[1])}


def permutation(order: list[int] | tuple[int, ...] = (5, 4, 3, 2, 1, 0),
                language: str = "en") -> dict:
    """The sentence with its words reordered by ``order``: self-attention
    without positions is permutation-equivariant — the weights are the old
    ones with rows and columns permuted, each word's output moves with it;
    nothing is left unchanged in place."""
    order = [int(x) for x in order]
    if sorted(order) != list(range(6)):
        raise ValueError(f"order must be a permutation of 0 … 5, got {order}")
    tokens = SENTENCE.get(language)
    if tokens is None:
        raise ValueError(f"language must be one of {sorted(SENTENCE)}, got {language!r}")
    Q, K = SENTENCE_Q[order], SENTENCE_K[order]
    w = attncore.softmax(attncore.scores(SENTENCE_Q, SENTENCE_K))
    w_perm = attncore.softmax(attncore.scores(Q, K))
    out, out_perm = (attncore.attention(SENTENCE_Q, SENTENCE_K, SENTENCE_K),
                     attncore.attention(Q, K, K))
    return {"order": order, "tokens": [tokens[i] for i in order], "weights": w,
            "weights_permuted": w_perm, "outputs": out, "outputs_permuted": out_perm,
            "equivariant": bool(np.allclose(w_perm, w[np.ix_(order, order)], atol=1e-12)
                                and np.allclose(out_perm, out[order], atol=1e-12)),
            "unchanged_in_place": bool(np.allclose(w_perm, w, atol=1e-12))}


def trace(i: int = 3, j: int = 1, q=None, k=None, v=None) -> dict:
    """Cell (i, j)'s whole journey, as :func:`attncore.teach.trace` computes it
    on the kernels (default: its 4-token, d_k = 3 example; any Q, K, V of the
    same shape may be given, e.g. from editable entries): the products
    q_i,t·k_j,t, their sum, the scaled score, row i's exponentials and
    denominator, the weight of (i, j), every key's contribution to output
    row i, and that row from ``attncore.attention``."""
    from attncore.teach.formula import _TRACE_K, _TRACE_Q, _TRACE_V
    from attncore.teach.formula import trace as trace_table

    q = np.asarray(_TRACE_Q if q is None else q, dtype=np.float64)
    k = np.asarray(_TRACE_K if k is None else k, dtype=np.float64)
    v = np.asarray(_TRACE_V if v is None else v, dtype=np.float64)
    if q.ndim != 2 or k.shape != q.shape or v.ndim != 2 or v.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must be (n, d_k) alike and v (n, d_v), got {q.shape}, "
                         f"{k.shape}, {v.shape}")
    if not (0 <= i < q.shape[0] and 0 <= j < k.shape[0]):
        raise ValueError(f"cell ({i}, {j}) is outside the {q.shape[0]}×{k.shape[0]} table")
    steps = {r["step"]: r["value"] for r in trace_table(q, k, v, i=i, j=j).table()}
    weights = attncore.softmax(attncore.scores(q, k))[i]
    return {"i": i, "j": j, "steps": steps, "products": np.asarray(q[i] * k[j]),
            "weights": weights, "contributions": weights[:, None] * v,
            "output": attncore.attention(q, k, v)[i]}


def memory(n: int = 8192, heads: int = 32, d_head: int = 128, bytes_per_value: int = 2,
           measure_n: int = 2048) -> dict:
    """One layer's memory at n tokens: the score table (n²·heads values) a
    materialised attention needs, against the KV cache (2·n·heads·d_head
    values) that produced it, and the curve of both for n = 512 … 131072.
    ``measured``: the peak memory of one naive and one blockwise call (one
    head, d = 64, float32) at ``measure_n`` tokens, counted by attncore."""
    from attncore.bench.timing import measure
    from attncore.teach.cost import memory as memory_table

    n, heads, d_head, bpv = int(n), int(heads), int(d_head), int(bytes_per_value)
    if min(n, heads, d_head, bpv) < 1:
        raise ValueError("n, heads, d_head and bytes_per_value must be positive")
    table = memory_table(heads=heads, d_head=d_head, bytes_per_value=bpv).table()
    x = np.random.default_rng(0).standard_normal((int(measure_n), 64)).astype(np.float32)
    measured = {method: measure(attncore.attention, x, x, x, method=method, repeat=0).peak_bytes
                for method in ("naive", "flash")}
    return {"n": n, "scores_bytes": n * n * heads * bpv,
            "kv_cache_bytes": 2 * n * heads * d_head * bpv,
            "ratio": n / (2 * d_head), "curve": [(r["n"], r["scores_bytes_layer"],
                                                  r["kv_cache_bytes"]) for r in table],
            "measure_n": int(measure_n), "measured": measured}


def heads(heads: int = 4, kv_heads: int = 4, d_model: int = 16, seed: int = 0,
          language: str = "en") -> dict:
    """The sentence through ``heads`` query heads sharing ``kv_heads`` key/value
    heads (MHA when equal, GQA between, MQA at 1), with fixed random projections
    of d_model-wide word vectors (not trained): every head's 6×6 weight map
    (``attncore.attention`` with GQA, ``return_weights``), and the ledger —
    the parameters of W_Q, W_K, W_V, W_O and the KV cache bytes per token."""
    heads, kv_heads, d_model = int(heads), int(kv_heads), int(d_model)
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a positive multiple of kv_heads ({kv_heads})")
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    d_head = d_model // heads
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, d_model))
    wq = rng.standard_normal((d_model, heads * d_head)) / math.sqrt(d_model)
    wk = rng.standard_normal((d_model, kv_heads * d_head)) / math.sqrt(d_model)
    wv = rng.standard_normal((d_model, kv_heads * d_head)) / math.sqrt(d_model)
    q = (x @ wq).reshape(6, heads, d_head).transpose(1, 0, 2)  # (H, n, d_head)
    k = (x @ wk).reshape(6, kv_heads, d_head).transpose(1, 0, 2)  # (H_kv, n, d_head)
    v = (x @ wv).reshape(6, kv_heads, d_head).transpose(1, 0, 2)
    out, weights = attncore.attention(q, k, v, method="naive", return_weights=True)
    ledger = {"W_Q": d_model * heads * d_head, "W_K": d_model * kv_heads * d_head,
              "W_V": d_model * kv_heads * d_head, "W_O": heads * d_head * d_model}
    ledger["total"] = sum(ledger.values())
    return {"tokens": list(SENTENCE[language]), "heads": heads, "kv_heads": kv_heads,
            "d_head": d_head, "weights": weights, "out": out,
            "kind": "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA",
            "ledger": ledger, "kv_cache_values_per_token": 2 * kv_heads * d_head,
            "kv_shared_by": heads // kv_heads}


def regimes(n_prefill: int = 2048, m_decode: int = 16384, heads: int = 8, d: int = 128,
            precisions: bool = True) -> dict:
    """A prefill and a decode step measured now on this machine, placed on its
    roofline (:func:`attncore.teach.regimes`: the FMA and read roofs measured
    with the kernels' own instructions), in every precision the kernels take
    (``precisions``: bfloat16 prefill; float16, bfloat16 and int8 caches)."""
    from attncore.teach.cost import regimes as regimes_table

    r = regimes_table(n_prefill=int(n_prefill), m_decode=int(m_decode), heads=int(heads),
                      d=int(d), quick=True, precisions=bool(precisions))
    return {"rows": r.table(), "facts": r.facts}


def online_softmax(query: int = 4, block: int = 2, q: list[float] | None = None,
                   language: str = "en") -> dict:
    """The blockwise online softmax on one row of the sentence, block by block,
    every number from the C core: the row's keys split into blocks of
    ``block``; per block its scaled scores (``attncore.scores``), its max, and
    its partial result ``(o, lse)`` from ``attncore.attention(..., return_lse=True)``
    on that block's keys alone; the running state after it from
    ``attncore.merge`` of the blocks so far.  From the running ``lse`` and max
    ``m`` follow the running sum ``l = exp(lse − m)`` (Σ exp(s − m) over the keys
    seen), the factor ``exp(m_old − m_new)`` that rescales what was accumulated
    when the max rises, and the unnormalised accumulator ``acc = l · o``
    (Σ exp(s − m)·v).  After the last block the running output is compared with
    one kernel call over all keys with ``block_k=block`` (whose own tile count
    is returned) and with the full softmax row times V.  Then the backward's
    view: only ``lse`` is kept, and ``exp(s − lse)`` recomputes the weights.
    ``q`` replaces the asking word's query (4 numbers), as the notebook's "use
    X's key" buttons do."""
    query, block = int(query), int(block)
    if not 0 <= query < 6:
        raise ValueError(f"query must be a word index 0..5, got {query}")
    if not 1 <= block <= 6:
        raise ValueError(f"block must be 1..6 keys, got {block}")
    if q is None:
        q = SENTENCE_Q[query]
    q = np.asarray(q, dtype=np.float64).reshape(1, 4)
    k = v = SENTENCE_K  # V = K, as in the chapter's small example
    s = attncore.scores(q, k)[0]
    words = SENTENCE["zh" if language == "zh" else "en"]
    steps, o_run, lse_run, m_run = [], None, None, -math.inf
    for start in range(0, 6, block):
        keys = slice(start, min(6, start + block))
        o_b, lse_b = attncore.attention(q, k[keys], v[keys], return_lse=True)
        if o_run is None:
            o_run, lse_run = o_b, lse_b
        else:
            o_run, lse_run = attncore.merge(o_run, lse_run, o_b, lse_b)
        m_block = float(s[keys].max())
        m_old, m_run = m_run, max(m_run, m_block)
        l_run = math.exp(float(lse_run[0]) - m_run)
        steps.append({"keys": list(words[keys]), "key_index": list(range(6))[keys],
                      "scores": s[keys].copy(), "block_max": m_block,
                      "block_lse": float(lse_b[0]), "block_output": o_b[0].copy(),
                      "m_before": m_old, "m": m_run,
                      "rescale": math.exp(m_old - m_run) if steps else None,
                      "l": l_run, "lse": float(lse_run[0]),
                      "acc": l_run * o_run[0], "output": o_run[0].copy()})
    counts = np.zeros(2, np.int64)
    kernel = _attention(q, k, v, block_k=block, block_counts=counts)[0]
    weights = attncore.softmax(s)
    recomputed = np.exp(s - steps[-1]["lse"])  # the backward's P = exp(S − lse)
    return {"tokens": words, "query": query, "block": block, "scores": s, "steps": steps,
            "output": steps[-1]["output"], "kernel_output": kernel,
            "kernel_tiles": int(counts[0]), "softmax_output": weights @ v,
            "weights": weights, "recomputed_weights": recomputed,
            "max_diff_vs_kernel": float(np.abs(steps[-1]["output"] - kernel).max()),
            "max_diff_vs_softmax": float(np.abs(steps[-1]["output"] - weights @ v).max()),
            "max_diff_recomputed_weights": float(np.abs(recomputed - weights).max())}
