"""`attncore tour`: every teaching experiment, its table and figure, and a
guided tutorial in Markdown (the prose written here, the numbers run now)."""

from __future__ import annotations

import os

from attncore import teach

# (name, its arguments, its arguments under --quick, deterministic?, the prose)
EXPERIMENTS = [
    ("scaling",
     {}, {"samples": 100}, True,
     "Why is the score q·k divided by √d_k? With independent N(0, 1) components, q·k is a sum of "
     "d_k products of variance 1, so its variance is d_k: the table measures it. Unscaled, the six "
     "scores of a row spread further apart as d_k grows, and the softmax puts almost all its "
     "weight on one key — the entropy collapses towards 0 and the largest weight towards 1. "
     "Divided by √d_k the scores keep variance 1, and the entropy stays where it was (below the "
     "maximum ln 6 ≈ 1.79 of a uniform row) whatever d_k."),
    ("normalizers",
     {}, {}, True,
     "Why softmax? Any rule that turns scores into weights should give non-negative weights that "
     "sum to 1. Dividing by the sum gives negative weights as soon as a score is negative; "
     "clipping the negatives first fixes that but, like dividing by the sum, changes when every "
     "score moves by the same amount. Softmax depends only on the differences between scores: "
     "adding 10 to all of them changes nothing (exp(s + c) / Σ exp(s + c) = exp(s) / Σ exp(s)), "
     "which is also why the kernels can subtract the row maximum without changing the result."),
    ("memory",
     {"measured": True}, {}, False,
     "Why is attention said to cost n² memory? A layer's score table holds n² values per head; the "
     "KV cache that produced it holds 2·n·d_head per head. Their ratio grows linearly in n: at "
     "32 heads of 128 dimensions the table overtakes the cache at n = 256 and is 512 times "
     "larger at n = 131 072. The measured columns are peak memories of real calls: the naive "
     "kernel holds the n×n table, the blockwise one only its tiles and output."),
    ("trace",
     {}, {}, True,
     "One cell's journey through the formula, on a four-token example with d_k = 3: the products "
     "of the query and key components, their sum, the scale, the row's exponentials (after "
     "subtracting the row maximum) and their sum, the weight, and the cell's contribution to "
     "output row i — which, summed over the keys, is exactly the row attncore.attention returns."),
    ("permutation",
     {}, {}, False,
     "Attention has no notion of order: without positional encodings, reversing the input tokens "
     "of self-attention reverses its output rows. The differences left are rounding, about 1e-16: "
     "the sums run in another order."),
    ("causal",
     {}, {"n": 512}, False,
     "The causal mask keeps row i to the keys j ≤ i: rows still sum to 1, and only n(n+1)/2 of the "
     "n² cells do any work. The blockwise kernel counts the tiles it computes: the lower triangle "
     "of the block grid, with only the diagonal blocks masked; the blocks above are never "
     "touched, which is why causal attention takes about half the time."),
    ("crossover",
     {}, {"ns": (64, 256, 1024)}, False,
     "Materialising the table is not always slower: while it fits in cache the naive passes are "
     "cheap, and they share the blockwise kernel's micro-kernels. As n grows the table's memory "
     "grows as n² and its passes over memory fall behind the blockwise kernel, whose memory grows "
     "as n."),
    ("scorers",
     {}, {}, True,
     "Three ways to score a query against a key, on the same vectors stretched to several lengths. "
     "The dot product grows as the square of the length, so longer vectors make a sharper softmax "
     "(the largest weight goes to 1); cosine similarity removes the length entirely; additive "
     "(Bahdanau) scoring passes the vectors through tanh and saturates."),
    ("saturation",
     {}, {"samples": 100}, True,
     "The scale matters for training too. The gradient that reaches the scores through the "
     "softmax is P ∘ (dP − D), and diag(p) − p pᵀ goes to 0 when p becomes one-hot: when the "
     "unscaled scores spread with d_k, learning through attention stalls. The table measures it "
     "with the real backward kernel (attncore.attention_backward); with ÷√d_k its size does not "
     "depend on d_k."),
    ("multihead",
     {}, {}, True,
     "A layer has several heads. With seeded random projections, four heads of the same six tokens "
     "give four different weight maps: each head projects the tokens into its own d_model/heads "
     "dimensions and compares them there. The ledger shows what heads cost: W_Q, W_K, W_V and W_O "
     "are d_model × d_model whatever the number of heads, 4·d_model² parameters in all; more heads "
     "split the same dimensions more finely."),
    ("family",
     {}, {"ns": (256, 1024)}, False,
     "The members of the attention family on the same data. Full attention works on n² pairs and "
     "causal on n(n+1)/2; a sliding window keeps about n·w, so its time grows linearly once n "
     "exceeds w; linear attention replaces the softmax by a feature map and needs no pairs at all, "
     "n·d² work — exact softmax weights are what it trades."),
    ("regimes",
     {}, {}, False,
     "Prefill and decode are different problems. A prefill step does about n/4 FLOPs per byte it "
     "moves (float32: 4·d FLOPs per pair, n² pairs, 16·n·d bytes) and is bound by the FMA units; "
     "a decode step reads the whole KV cache to produce one row, half a FLOP per byte, and is "
     "bound by memory bandwidth. The roofs are measured by the probes in the same call."),
]


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def markdown_table(result) -> str:
    """The result's table as Markdown, values to 4 significant digits."""
    rows = result.table()
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def run(out_dir="attncore-tour", markdown=None, quick=False, echo=print) -> dict:
    """Run every experiment: print its table, save its figure; optionally write
    the tutorial.  Returns {name: Result}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    results, sections = {}, []
    for name, full, short, deterministic, prose in EXPERIMENTS:
        kwargs = short if quick else full
        res = getattr(teach, name)(**kwargs)
        call = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        results[name] = res
        echo(repr(res))
        echo("")
        ax = res.plot()
        fig_path = os.path.join(out_dir, f"{name}.png")
        ax.figure.savefig(fig_path, dpi=100, bbox_inches="tight")
        plt.close(ax.figure)
        if markdown:
            rel = os.path.relpath(fig_path, os.path.dirname(os.path.abspath(markdown)))
            note = ("" if deterministic else
                    "\n\n*Measured on the machine that ran the tour: the numbers vary.*")
            sections.append(f"## {res.title[0].upper() + res.title[1:]}\n\n{prose}\n\n"
                            f"```python\nattncore.teach.{name}({call})\n```\n\n{markdown_table(res)}"
                            f"{note}\n\n![{name}]({rel})\n")
    if markdown:
        with open(markdown, "w") as f:
            f.write(TUTORIAL_HEAD + "\n".join(sections))
    return results


TUTORIAL_HEAD = """# A guided tour of attention, on attncore's own kernels

Every table below was produced by `attncore tour --markdown docs/tutorial.md --out docs/tour`,
running the same C kernels that `attncore.attention` runs — scores, softmax and attention never come
from a second, toy implementation. Each experiment is a function of `attncore.teach`, reproducible by
its seed; the tables of the deterministic ones are checked against the code by the test suite.

"""
