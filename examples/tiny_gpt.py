"""A tiny character-level GPT, trained twice on the CPU: once with torch's
``scaled_dot_product_attention`` and once with ``attncore.torch``'s.

    python examples/tiny_gpt.py                    # 300 steps each, the figure and a summary
    python examples/tiny_gpt.py --steps 20 --out /tmp/gpt

The text is the documentation strings of a fixed list of Python standard library
modules — it ships with Python, nothing is downloaded.  Both runs start from the
same weights and see the same batches in the same order; the only difference is
the function that computes attention (forward and backward).  The script prints
the two loss curves' largest difference, the time a training step takes with
each and the time of attention alone (forward and backward at the model's shapes), and writes ``losses.json`` and ``tiny_gpt_loss.png`` into ``--out``.

Needs torch (``pip install "attncore[torch]"``) and, for the figure, matplotlib.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The corpus: the docstrings of these modules, and of their public classes and functions.
MODULES = ("collections", "itertools", "functools", "textwrap", "string", "json", "argparse",
           "pathlib", "heapq", "bisect", "random", "statistics", "fractions", "decimal",
           "datetime", "calendar", "difflib", "shlex", "csv", "contextlib")


def corpus() -> str:
    parts = []
    for name in MODULES:
        mod = importlib.import_module(name)
        parts.append(mod.__doc__ or "")
        for attr in sorted(getattr(mod, "__all__", None) or dir(mod)):
            if attr.startswith("_"):
                continue
            doc = getattr(getattr(mod, attr, None), "__doc__", None)
            if isinstance(doc, str) and len(doc) > 40:
                parts.append(doc)
    # one alphabet for every Python: printable ASCII and newline, the rest dropped
    text = "\n\n".join(parts)
    return "".join(c for c in text if c == "\n" or 32 <= ord(c) < 127)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, attend) -> None:
        super().__init__()
        self.heads, self.attend = heads, attend
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v, is_causal=True)  # (b, heads, n, d_head)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, context: int, d: int, heads: int, layers: int,
                 attend) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, attend) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def train(attend, data: torch.Tensor, vocab: int, args) -> tuple[list[float], list[float]]:
    """Losses and step times of one run; the seed fixes the weights and batches."""
    torch.manual_seed(args.seed)
    model = TinyGPT(vocab, args.context, args.dim, args.heads, args.layers, attend)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1)
    losses, times = [], []
    for _ in range(args.steps):
        start = torch.randint(len(data) - args.context - 1, (args.batch,), generator=gen)
        x = torch.stack([data[s:s + args.context] for s in start.tolist()])
        y = torch.stack([data[s + 1:s + 1 + args.context] for s in start.tolist()])
        t0 = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return losses, times


def attention_times(attends: dict, args, reps: int = 60) -> dict:
    """Median seconds of one forward and backward of attention alone, at the
    model's shapes (batch × heads × context × d/heads, causal), for each
    function; the functions take turns, so that a drift of the machine's
    speed falls on both alike."""
    g = torch.Generator().manual_seed(args.seed)
    shape = (args.batch, args.heads, args.context, args.dim // args.heads)
    q, k, v = (torch.randn(*shape, generator=g).requires_grad_() for _ in range(3))
    times: dict = {name: [] for name in attends}
    for _ in range(reps):
        for name, attend in attends.items():
            t0 = time.perf_counter()
            attend(q, k, v, is_causal=True).sum().backward()
            times[name].append(time.perf_counter() - t0)
    return {name: sorted(t)[reps // 2] for name, t in times.items()}


def figure(losses: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=150)
    for label, ys, style in (("torch SDPA", losses["torch"], "-"),
                             ("attncore.torch", losses["attncore"], "--")):
        ax.plot(range(1, len(ys) + 1), ys, style, label=label, linewidth=1.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss (nats a character)")
    ax.set_title("A tiny character-level GPT, trained with each attention")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="tiny-gpt", help="folder for losses.json and the figure")
    ap.add_argument("--no-figure", action="store_true")
    args = ap.parse_args(argv)

    import attncore
    from attncore.torch import scaled_dot_product_attention as attncore_sdpa

    text = corpus()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    threads = torch.get_num_threads()
    attncore.set_num_threads(threads)
    print(f"corpus: {len(text):,} characters of docstrings from {len(MODULES)} standard library "
          f"modules, {len(chars)} distinct; model: {args.layers} layers, {args.heads} heads, "
          f"d={args.dim}, context {args.context}, batch {args.batch}; {threads} threads, "
          f"attncore ISA {attncore.info()['isa']}, torch capability "
          f"{torch.backends.cpu.get_cpu_capability()}")

    losses, times = {}, {}
    for name, attend in (("torch", F.scaled_dot_product_attention), ("attncore", attncore_sdpa)):
        losses[name], times[name] = train(attend, data, len(chars), args)
        print(f"{name:>9}: loss {losses[name][0]:.3f} -> {losses[name][-1]:.3f}")

    diff = [abs(a - b) for a, b in zip(losses["torch"], losses["attncore"])]
    worst = max(range(len(diff)), key=diff.__getitem__)
    # the first steps warm the allocator and caches; the median of the rest is the step time
    med = {k: statistics.median(v[5:] or v) for k, v in times.items()}
    alone = attention_times({"torch": F.scaled_dot_product_attention,
                             "attncore": attncore_sdpa}, args)
    summary = {"steps": args.steps, "max_abs_loss_difference": diff[worst],
               "at_step": worst + 1, "final_losses": {k: v[-1] for k, v in losses.items()},
               "median_step_seconds": med, "attention_alone_seconds": alone,
               "threads": threads, "isa": attncore.info()["isa"],
               "torch_capability": torch.backends.cpu.get_cpu_capability(), "losses": losses,
               "step_seconds": times}
    print(f"largest difference between the loss curves: {diff[worst]:.2e} (step {worst + 1}); "
          f"median step: torch SDPA {med['torch'] * 1e3:.1f} ms, attncore "
          f"{med['attncore'] * 1e3:.1f} ms ({med['torch'] / med['attncore']:.2f}× torch's speed); "
          f"attention alone, forward and backward: torch {alone['torch'] * 1e3:.2f} ms, attncore "
          f"{alone['attncore'] * 1e3:.2f} ms ({alone['torch'] / alone['attncore']:.2f}×)")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "losses.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if not args.no_figure:
        path = os.path.join(args.out, "tiny_gpt_loss.png")
        figure(losses, path)
        print(f"figure: {path}")
    if not all(math.isfinite(x) for v in losses.values() for x in v):
        raise SystemExit("a loss is not finite")
    return summary


if __name__ == "__main__":
    main()
