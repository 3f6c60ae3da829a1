"""Paired A/B timing of two builds of attncore, per instruction set.

A refactor of the core must leave its speed alone.  This times a fixed set of
calls (prefill, causal prefill, decode with a float32, a float16 and an int8 cache,
backward, naive) in two checkouts, each with its extension built in place:

    python tools/ab.py /path/to/base [/path/to/new] [--isa avx2 avx512] [--rounds 7]

(the new one defaults to this checkout).  Each round starts one child process
per side, held to one ISA and to the same threads, in alternating order (A B,
then B A, ...), so that a slow spell of the machine falls on both sides; a
child reports the fastest of a few calls of each case.  The table gives, per
ISA and case, the median of the rounds' new/base time ratios and their range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each child runs: name -> (setup code, the timed expression).
CHILD = r"""
import json, sys, time
import numpy as np
import attncore

rng = np.random.default_rng(0)
def qkv(B, H, Hkv, n, m, d, dtype=np.float32, kv=np.float32):
    return (rng.standard_normal((B, H, n, d)).astype(dtype),
            rng.standard_normal((B, Hkv, m, d)).astype(kv),
            rng.standard_normal((B, Hkv, m, d)).astype(kv))

pre = qkv(1, 8, 8, 1024, 1024, 64)
dec = qkv(1, 32, 8, 1, 8192, 128)
dec16 = qkv(1, 32, 8, 1, 8192, 128, kv=np.float16)
bwd = qkv(1, 8, 8, 512, 512, 64)
out, lse = attncore.attention(*bwd, causal=True, return_lse=True)
dout = np.ones_like(out)
nv = qkv(1, 8, 8, 512, 512, 64)
tiny = qkv(1, 4, 4, 1, 64, 16)
small = qkv(1, 8, 8, 256, 256, 64)
def int8_cache(Hkv):
    cache = attncore.KVCache(Hkv, 128, batch=(1,), dtype="int8")
    cache.append(*qkv(1, Hkv, Hkv, 1, 8192, 128)[1:])
    return cache
i8 = {Hkv: int8_cache(Hkv) for Hkv in (8, 32)}
cases = {
    "prefill n=1024": lambda: attncore.attention(*pre),
    "prefill n=1024 causal": lambda: attncore.attention(*pre, causal=True),
    "decode m=8192 GQA 32/8 f32": lambda: attncore.attention(*dec),
    "decode m=8192 GQA 32/8 f16": lambda: attncore.attention(*dec16),
    "decode m=8192 GQA 32/8 int8": lambda: i8[8].attend(dec[0]),
    "decode m=8192 MHA 32/32 int8": lambda: i8[32].attend(dec[0]),
    "decode m=64 H 4/4 d=16 (tiny)": lambda: attncore.attention(*tiny),
    "prefill n=256 causal (small)": lambda: attncore.attention(*small, causal=True),
    "backward n=512 causal": lambda: attncore.attention_backward(*bwd, out, lse, dout, causal=True),
    "naive n=512": lambda: attncore.attention(*nv, method="naive"),
}
best = {}
for name, fn in cases.items():
    fn()
    t = []
    for _ in range(REPEATS):
        t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
    best[name] = min(t)
print(json.dumps({"isa": attncore.info()["isa"], "best": best}))
"""


def run_side(tree: str, isa: str, threads: int, repeats: int) -> dict:
    env = dict(os.environ, ATTNCORE_ISA=isa, OMP_NUM_THREADS=str(threads), PYTHONPATH=tree)
    r = subprocess.run([sys.executable, "-c", CHILD.replace("REPEATS", str(repeats))], env=env,
                       capture_output=True, text=True, cwd=tree, check=True)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if got["isa"] != isa:
        raise SystemExit(f"{tree}: asked for {isa}, ran {got['isa']}")
    return got["best"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new", nargs="?", default=HERE)
    ap.add_argument("--isa", nargs="+", default=None, help="default: every ISA the CPU runs")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.isa is None:
        sys.path.insert(0, args.new)
        from attncore import _isa

        args.isa = _isa.available()
    trees = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    print(f"A/B: base {trees['base']}, new {trees['new']}; {args.threads} threads, "
          f"{args.rounds} paired rounds, fastest of {args.repeats} calls a side and round")
    for isa in args.isa:
        ratios: dict[str, list[float]] = {}
        times: dict[str, dict[str, list[float]]] = {"base": {}, "new": {}}
        for r in range(args.rounds):
            order = ("base", "new") if r % 2 == 0 else ("new", "base")
            got = {side: run_side(trees[side], isa, args.threads, args.repeats) for side in order}
            for case in got["base"]:
                ratios.setdefault(case, []).append(got["new"][case] / got["base"][case])
                for side in got:
                    times[side].setdefault(case, []).append(got[side][case])
        print(f"\nISA {isa}")
        print(f"{'case':<30} {'base ms':>9} {'new ms':>9} {'new/base':>9}  {'range':>13}")
        for case, rs in ratios.items():
            b = statistics.median(times["base"][case]) * 1e3
            n = statistics.median(times["new"][case]) * 1e3
            print(f"{case:<30} {b:9.2f} {n:9.2f} {statistics.median(rs):9.3f}  "
                  f"{min(rs):.3f}–{max(rs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
