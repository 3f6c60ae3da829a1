"""Paired A/B timing of two builds of attncore, per instruction set.

A refactor of the core must leave its speed alone.  This times a fixed set of
calls (prefill, causal prefill, decode with a float32, a float16 and an int8 cache,
backward, naive, bfloat16 prefill) in two checkouts, each with its extension built
in place:

    python tools/ab.py /path/to/base [/path/to/new] [--isa avx2 avx512] [--rounds 7]

(the new one defaults to this checkout).  Each side runs in a worker process
held to one ISA and to the same threads, started once per ISA; the two are
handed each case in turn, in alternating order (A B, then B A, ...), the
fastest of a few calls a turn, so that the two times of a pair lie a few
calls apart and a slow spell of the machine falls on both.  A machine whose
speed moves by tens of per cent from minute to minute resolves a few per
cent this way, where a process started per side and round (--fresh, which
also counts what a fresh process pays: its first calls, its page faults)
does not.  The table gives, per ISA and case, the median of the pairs'
new/base time ratios, their interquartile range and their range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each child runs: its inputs, then name -> the timed call (all of them once,
# fresh; or, a worker, the one named on each line it reads).
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
bf = {d: [attncore.to_bfloat16(a) for a in qkv(1, 8, 8, 1024, 1024, d)] for d in (64, 128)}
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
    "bf16 prefill n=1024 d=64": lambda: attncore.attention(*bf[64]),
    "bf16 prefill n=1024 d=64 causal": lambda: attncore.attention(*bf[64], causal=True),
    "bf16 prefill n=1024 d=128 causal": lambda: attncore.attention(*bf[128], causal=True),
}
def fastest(fn, repeats):
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
    return min(t)
mode, repeats, wanted = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
cases = {k: f for k, f in cases.items() if not wanted or any(w in k for w in wanted)}
if not cases:
    sys.exit(f"no case matches {wanted}")
for fn in cases.values():
    fn()
isa = attncore.info()["isa"]
if mode == "fresh":  # every case once, then exit
    print(json.dumps({"isa": isa, "best": {k: fastest(f, repeats) for k, f in cases.items()}}))
else:  # a worker: the cases it has, then one time for each name it is sent
    print(json.dumps({"isa": isa, "cases": list(cases)}), flush=True)
    for line in sys.stdin:
        print(json.dumps(fastest(cases[line.strip()], repeats)), flush=True)
"""


def child_env(tree: str, isa: str, threads: int) -> dict:
    return dict(os.environ, ATTNCORE_ISA=isa, OMP_NUM_THREADS=str(threads), PYTHONPATH=tree)


def held_to(got: dict, tree: str, isa: str) -> dict:
    if got["isa"] != isa:
        raise SystemExit(f"{tree}: asked for {isa}, ran {got['isa']}")
    return got


def run_fresh(tree: str, isa: str, threads: int, repeats: int, cases: list[str]) -> dict:
    """One child process: the fastest of `repeats` calls of each case."""
    r = subprocess.run([sys.executable, "-c", CHILD, "fresh", str(repeats), *cases],
                       env=child_env(tree, isa, threads), capture_output=True, text=True,
                       cwd=tree, check=True)
    return held_to(json.loads(r.stdout.strip().splitlines()[-1]), tree, isa)["best"]


class Worker:
    """A child process that keeps its inputs and times the case it is sent."""

    def __init__(self, tree: str, isa: str, threads: int, repeats: int, cases: list[str]):
        self.tree = tree
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, "worker", str(repeats), *cases],
            env=child_env(tree, isa, threads), cwd=tree, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.cases = held_to(self._read(), tree, isa)["cases"]

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.tree}: the worker exited ({self.proc.wait()})")
        return json.loads(line)

    def time(self, case: str) -> float:
        self.proc.stdin.write(case + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def pairs_lockstep(trees: dict, isa: str, args) -> tuple[dict, dict]:
    """Both workers started once; each case handed to one, then the other, the
    order alternating.  The pause before each turn lets the side that just ran
    go idle (an OpenMP team spins a while after its last region)."""
    workers = {side: Worker(tree, isa, args.threads, args.repeats, args.cases)
               for side, tree in trees.items()}
    try:
        cases = workers["base"].cases
        if cases != workers["new"].cases:
            raise SystemExit("the two trees time different cases")
        ratios: dict[str, list[float]] = {c: [] for c in cases}
        times: dict[str, dict[str, list[float]]] = {s: {c: [] for c in cases} for s in trees}
        for r in range(args.rounds):
            for i, case in enumerate(cases):
                order = ("base", "new") if (r + i) % 2 == 0 else ("new", "base")
                got = {}
                for side in order:
                    time.sleep(args.pause)
                    got[side] = workers[side].time(case)
                    times[side][case].append(got[side])
                ratios[case].append(got["new"] / got["base"])
    finally:
        for w in workers.values():
            w.close()
    return ratios, times


def pairs_fresh(trees: dict, isa: str, args) -> tuple[dict, dict]:
    """A child per side and round, the order alternating."""
    ratios: dict[str, list[float]] = {}
    times: dict[str, dict[str, list[float]]] = {"base": {}, "new": {}}
    for r in range(args.rounds):
        order = ("base", "new") if r % 2 == 0 else ("new", "base")
        got = {side: run_fresh(trees[side], isa, args.threads, args.repeats, args.cases)
               for side in order}
        for case in got["base"]:
            ratios.setdefault(case, []).append(got["new"][case] / got["base"][case])
            for side in got:
                times[side].setdefault(case, []).append(got[side][case])
    return ratios, times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new", nargs="?", default=HERE)
    ap.add_argument("--isa", nargs="+", default=None, help="default: every ISA the CPU runs")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=3, help="calls a turn; the fastest counts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", nargs="+", default=[],
                    help="only the cases whose names contain one of these")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds before each turn")
    ap.add_argument("--fresh", action="store_true",
                    help="a child process per side and round instead of two workers")
    args = ap.parse_args(argv)
    if args.isa is None:
        sys.path.insert(0, args.new)
        from attncore import _isa

        args.isa = _isa.available()
    trees = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    how = ("a child process per side and round" if args.fresh else
           "two workers handed each case in turn")
    print(f"A/B: base {trees['base']}, new {trees['new']}; {args.threads} threads, {how}, "
          f"{args.rounds} rounds, fastest of {args.repeats} calls a turn")
    for isa in args.isa:
        ratios, times = (pairs_fresh if args.fresh else pairs_lockstep)(trees, isa, args)
        print(f"\nISA {isa}")
        print(f"{'case':<30} {'base ms':>9} {'new ms':>9} {'new/base':>9}  {'IQR':>13}  "
              f"{'range':>13}")
        for case, rs in ratios.items():
            b = statistics.median(times["base"][case]) * 1e3
            n = statistics.median(times["new"][case]) * 1e3
            q1, _, q3 = (statistics.quantiles(rs, n=4, method="inclusive") if len(rs) > 1
                         else (rs[0], rs[0], rs[0]))
            print(f"{case:<30} {b:9.2f} {n:9.2f} {statistics.median(rs):9.3f}  "
                  f"{q1:.3f}–{q3:.3f}  {min(rs):.3f}–{max(rs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
