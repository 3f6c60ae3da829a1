"""What each score modifier costs: the blockwise kernel with a bias, ALiBi, the
soft-cap or sinks against the same kernel without (the ratio modified /
plain), and against torch's SDPA given the equivalent float mask (torch /
attncore), per instruction set, attncore and torch held to it in a child
process each (attncore.bench.isa), in paired, interleaved rounds.

    python tools/modifier_speed.py [--isa all] [--n 2048] [--rounds 7]

Prints one Markdown table per ISA: the median of the per-round ratios and
their min–max, and attncore's share of the ISA's FMA roof (measured in the
same child).  torch has no soft-cap or sinks: those rows have no peer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np


def child(isa: str, n: int, rounds: int, d: int = 64) -> dict:
    import attncore
    from attncore.bench.isa import torch_capability
    from attncore.bench.roofs import measure_roofs
    from attncore.teach.cost import _rounds

    nt = attncore.get_num_threads()
    B, H = 1, 8
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, H, n, d), dtype=np.float32) for _ in range(3))
    bias = rng.standard_normal((1, 1, n, n), dtype=np.float32)
    slopes = 2.0 ** -np.arange(1, H + 1)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    alibi_mask = (-slopes[:, None, None] * np.abs(i - j)).astype(np.float32)[None]  # (1, H, n, n)
    out = {"isa": isa, "threads": nt, "n": n, "shape": f"B={B} H={H} n=m={n} d={d} float32",
           "roof_gflops": measure_roofs(nt, quick=True)["fma_gflops"], "cases": {}}
    try:
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(nt)
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        tb, ta = torch.from_numpy(bias), torch.from_numpy(alibi_mask)
        out["torch_capability"] = torch_capability()
    except ImportError:
        torch = None
    for causal in (False, True):
        kw = dict(causal=causal)
        fns = {
            "plain": lambda: attncore.attention(q, k, v, **kw),
            "bias (1,1,n,m)": lambda: attncore.attention(q, k, v, bias=bias, **kw),
            "alibi": lambda: attncore.attention(q, k, v, alibi_slopes=slopes, **kw),
            "softcap": lambda: attncore.attention(q, k, v, softcap=30.0, **kw),
            "sinks": lambda: attncore.attention(q, k, v, sinks=np.zeros(H), **kw),
        }
        peers = {}
        if torch is not None:
            tri = torch.ones(n, n, dtype=torch.bool).tril()
            causal_bias = tb.masked_fill(~tri, float("-inf")) if causal else tb
            causal_alibi = ta.masked_fill(~tri, float("-inf")) if causal else ta
            peers = {
                "torch plain": lambda: F.scaled_dot_product_attention(tq, tk, tv,
                                                                      is_causal=causal),
                "torch bias (1,1,n,m)": lambda: F.scaled_dot_product_attention(
                    tq, tk, tv, attn_mask=causal_bias),
                "torch alibi": lambda: F.scaled_dot_product_attention(tq, tk, tv,
                                                                      attn_mask=causal_alibi),
            }
        times = _rounds({**fns, **peers}, rounds)
        flops = 4 * B * H * n * n * d * (0.5 if causal else 1)
        rows = {}
        for name in fns:
            mine = np.array(times[name])
            row = {"ms": float(np.median(mine)) * 1e3,
                   "roof_share": flops / float(np.median(mine)) / 1e9 / out["roof_gflops"],
                   "vs_plain": list(np.array(times[name]) / np.array(times["plain"]))}
            peer = "torch " + name
            if peer in times:
                row["torch_over_attncore"] = list(np.array(times[peer]) / mine)
                row["torch_ms"] = float(np.median(times[peer])) * 1e3
            rows[name] = row
        out["cases"]["causal" if causal else "full"] = rows
    return out


def spread(xs) -> str:
    xs = np.asarray(xs)
    return f"{np.median(xs):.2f} ({xs.min():.2f}–{xs.max():.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isa", default="all")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--d", type=int, default=64, help="head dim")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n, args.rounds, args.d)))
        return
    from attncore.bench.isa import child_env, child_path, resolve

    results = []
    for isa in resolve(args.isa):
        env = child_path(child_env(isa))
        r = subprocess.run([sys.executable, __file__, "--child", isa, "--n", str(args.n),
                            "--rounds", str(args.rounds), "--d", str(args.d)], env=env, capture_output=True,
                           text=True, check=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        results.append(res)
        print(f"\n### {isa} (torch capability {res.get('torch_capability')}), {res['shape']}, "
              f"{res['threads']} threads, FMA roof {res['roof_gflops']:.0f} GFLOP/s\n")
        print("| case | | ms | % roof | ÷ plain kernel | torch ms (float mask) | torch ÷ attncore |")
        print("|---|---|---|---|---|---|---|")
        for kind, rows in res["cases"].items():
            for name, row in rows.items():
                peer = (f"{row['torch_ms']:.1f} | {spread(row['torch_over_attncore'])}"
                        if "torch_ms" in row else "— | —")
                print(f"| {kind} | {name} | {row['ms']:.1f} | {100 * row['roof_share']:.0f} | "
                      f"{spread(row['vs_plain'])} | {peer} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
