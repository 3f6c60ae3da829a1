"""Decode speed by the cache's dtype: one step (a query token of H = 32
heads, d = 128) against a KVCache of m tokens in float32, float16, bfloat16
and int8, each ÷ the float32 cache in paired, interleaved rounds, and as a
share of the streaming-read roof counted in the bytes each reads (an int8
cache's scales included), measured in the same run.  Every ISA in its own
child, attncore held to it.  Where an int8 decode step runs as integer dot
products (AVX512_VNNI or AVX2: Q·Kᵀ and P·V), a row "int8 widened" times the same
cache with them turned off, the widening kernels' step, in the same rounds.

    python tools/cache_speed.py [--isa all] [--rounds 7] [--m 8192 32768]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np

import attncore
from attncore import _core
from attncore.bench.timing import best_of

DTYPES = ("float32", "float16", "bfloat16", "int8")


def best(fn, reps: int = 3) -> float:
    """The fastest of `reps` calls (no warm-up: the caller makes it)."""
    return best_of({"fn": fn}, min_time=0, min_rounds=reps, max_rounds=reps)["fn"]


def widened(c, q):
    """A step with the integer dot products off (the widening kernel)."""
    _core.i8dot_choose(0)
    try:
        return c.attend(q)
    finally:
        _core.i8dot_choose(-1)


def child(rounds: int, ms: list[int]) -> None:
    from attncore.bench.roofs import measure_roofs

    nt = attncore.get_num_threads()
    roof = measure_roofs(nt)["read_gbs"]
    print(f"\nisa {attncore.info()['isa']}, {nt} threads, read roof {roof:.1f} GB/s")
    print("| m | H/Hkv | cache | step ms | float32 time ÷ this, median (min–max) | GB/s | % read roof |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    H, d = 32, 128
    for m in ms:
        for Hkv in (32, 8):
            caches = {}
            for dt in DTYPES:
                c = attncore.KVCache(Hkv, d, dtype=dt, capacity=m)
                for s in range(0, m, 4096):  # appended in pieces: no float64 copy of it all
                    k, v = (rng.standard_normal((Hkv, min(4096, m - s), d), dtype=np.float32)
                            for _ in range(2))
                    if dt in ("float16", "bfloat16"):  # as the cache stores them
                        k, v = (x.astype(np.float16) if dt == "float16"
                                else attncore.to_bfloat16(x) for x in (k, v))
                    c.append(k, v)
                caches[dt] = c
            q = rng.standard_normal((H, 1, d), dtype=np.float32)
            calls = {dt: (lambda c=c: c.attend(q)) for dt, c in caches.items()}
            if _core.i8dot_supported():
                calls["int8 widened"] = lambda c=caches["int8"]: widened(c, q)
            for fn in calls.values():
                fn()
            times = {dt: [] for dt in calls}
            for _ in range(rounds):
                for dt in calls:  # interleaved: float32 first in each round
                    times[dt].append(best(calls[dt]))
            for dt in calls:
                row = {"float32": 4 * d, "float16": 2 * d, "bfloat16": 2 * d,
                       "int8": d + 4, "int8 widened": d + 4}[dt]
                nbytes = Hkv * 2 * m * row
                ratio = [f / x for f, x in zip(times["float32"], times[dt])]
                t = min(times[dt])
                gbs = nbytes / t / 1e9
                print(f"| {m} | {H}/{Hkv} | {dt} | {1e3 * t:.2f} | {np.median(ratio):.2f} "
                      f"({min(ratio):.2f}–{max(ratio):.2f}) | {gbs:.1f} | {100 * gbs / roof:.0f} |")
            del caches, calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--isa", default="all")
    ap.add_argument("--m", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.rounds, args.m)
        return
    from attncore.bench.isa import child_env, child_path, resolve

    for isa in resolve(args.isa):
        subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds),
                        "--m", *map(str, args.m)], env=child_path(child_env(isa)), check=True)


if __name__ == "__main__":
    main()
