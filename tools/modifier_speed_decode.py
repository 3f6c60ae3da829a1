"""What the score modifiers cost in decode (one query against a float32 cache,
split-KV) and in backward: each modified call ÷ the same call without, in
paired, interleaved rounds, on the instruction set attncore picks (or
ATTNCORE_ISA).  python tools/modifier_speed_decode.py [--rounds R]"""

from __future__ import annotations

import argparse

import numpy as np

import attncore
from attncore.bench.timing import best_of


def best(fn, reps: int = 3) -> float:
    """The fastest of `reps` calls (no warm-up: the caller makes it)."""
    return best_of({"fn": fn}, min_time=0, min_rounds=reps, max_rounds=reps)["fn"]


def table(title: str, calls: dict, rounds: int) -> None:
    names = [n for n in calls if n != "plain"]
    ratios: dict[str, list[float]] = {n: [] for n in names}
    base = []
    for _ in range(rounds):
        for n in names:
            b = best(calls["plain"])
            ratios[n].append(best(calls[n]) / b)
            base.append(b)
    print(f"\n{title}: plain {1e3 * float(np.median(base)):.2f} ms")
    print("| modifier | ÷ plain, median (min–max) |\n|---|---|")
    for n, r in ratios.items():
        print(f"| {n} | {np.median(r):.2f} ({min(r):.2f}–{max(r):.2f}) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--isa", default="all")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.child:
        import subprocess
        import sys

        from attncore.bench.isa import child_env, child_path, resolve

        for isa in resolve(args.isa):
            subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds)],
                           env=child_path(child_env(isa)), check=True)
        return
    rng = np.random.default_rng(0)
    print(f"isa {attncore.info()['isa']}, {attncore.get_num_threads()} threads")
    H, Hkv, d, m = 32, 8, 128, 8192
    cache = attncore.KVCache(Hkv, d, capacity=m)
    cache.append(rng.standard_normal((Hkv, m, d), dtype=np.float32),
                 rng.standard_normal((Hkv, m, d), dtype=np.float32))
    q = rng.standard_normal((H, 1, d), dtype=np.float32)
    slopes = 2.0 ** -np.linspace(1, 8, H)
    bias = rng.standard_normal((H, 1, m), dtype=np.float32)
    table(f"decode, GQA {H}/{Hkv}, d={d}, m={m}, float32 cache", {
        "plain": lambda: cache.attend(q),
        "bias (H, 1, m)": lambda: cache.attend(q, bias=bias),
        "alibi": lambda: cache.attend(q, alibi_slopes=slopes),
        "softcap": lambda: cache.attend(q, softcap=30.0),
        "sinks": lambda: cache.attend(q, sinks=np.zeros(H)),
    }, args.rounds)
    B, H, n, d = 1, 8, 1024, 64
    qq, k, v = (rng.standard_normal((B, H, n, d), dtype=np.float32) for _ in range(3))
    kw = {"plain": {}, "bias (1, 1, n, n)": {"bias": rng.standard_normal((1, 1, n, n),
                                                                        dtype=np.float32)},
          "alibi": {"alibi_slopes": 2.0 ** -np.arange(1, H + 1)}, "softcap": {"softcap": 30.0},
          "sinks": {"sinks": np.zeros(H)}}
    fw = {name: attncore.attention(qq, k, v, causal=True, return_lse=True, **a)
          for name, a in kw.items()}
    dout = rng.standard_normal((B, H, n, d), dtype=np.float32)

    def back(name):
        o, lse = fw[name]
        return lambda: attncore.attention_backward(qq, k, v, o, lse, dout, causal=True,
                                                   **kw[name])
    table(f"backward, causal, B={B} H={H} n={n} d={d} float32", {n_: back(n_) for n_ in kw},
          args.rounds)


if __name__ == "__main__":
    main()
