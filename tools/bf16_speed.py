"""bfloat16 prefill against float32: attncore with bfloat16 q, k, v (the
bfloat16 dot products where the CPU has AVX512_BF16 and the avx512 kernels
run; widened to float32 elsewhere), attncore in float32, and torch's SDPA in
bfloat16 and float32, B=1 H=8, paired interleaved rounds; each ratio is the
median (min–max) over the rounds of a time ÷ attncore bfloat16's in the same
round.  Every ISA in its own child, attncore and torch held to it.  Also
GFLOP/s and its share of the roofs measured in the same child: the FMA roof,
and the bfloat16 dot-product roof where there is one; and attncore float32's
own GFLOP/s and share of the FMA roof (median and range over the rounds).

    python tools/bf16_speed.py [--isa all] [--rounds 5] [--n 1024 4096] [--d 64 128]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np

import attncore
from attncore.bench.timing import best_of


def best(fn, reps: int = 2) -> float:
    """The fastest of `reps` calls (no warm-up: the caller makes it)."""
    return best_of({"fn": fn}, min_time=0, min_rounds=reps, max_rounds=reps)["fn"]


def child(rounds: int, ns: list[int], ds: list[int]) -> None:
    from attncore.bench.roofs import measure_roofs

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = None
    nt = attncore.get_num_threads()
    roofs = measure_roofs(nt)
    dot = roofs.get("bf16dot_gflops")
    print(f"\nisa {attncore.info()['isa']}, {nt} threads, bfloat16 dot products "
          f"{'yes' if attncore._core.bf16dot_supported() else 'no'}; FMA roof "
          f"{roofs['fma_gflops']:.0f} GFLOP/s" + (f", bfloat16 dot roof {dot:.0f} GFLOP/s" if dot
                                                   else ""))
    print("| n | d | mask | bf16 ms | GFLOP/s | % FMA roof | % dot roof | f32 ÷ bf16 | "
          "torch bf16 ÷ bf16 | torch f32 ÷ bf16 | f32 GFLOP/s | f32 % FMA roof |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    B, H = 1, 8
    for d in ds:
        for n in ns:
            x32 = [rng.standard_normal((B, H, n, d), dtype=np.float32) for _ in range(3)]
            x16 = [attncore.to_bfloat16(x) for x in x32]
            for causal in (False, True):
                calls = {"bf16": lambda: attncore.attention(*x16, causal=causal),
                         "f32": lambda: attncore.attention(*x32, causal=causal)}
                if torch is not None:
                    t32 = [torch.from_numpy(x) for x in x32]
                    t16 = [torch.from_numpy(x).view(torch.bfloat16) for x in x16]

                    def tsd(ts):
                        with torch.inference_mode():
                            return F.scaled_dot_product_attention(*ts, is_causal=causal)
                    calls["torch bf16"] = lambda: tsd(t16)
                    calls["torch f32"] = lambda: tsd(t32)
                for fn in calls.values():
                    fn()
                times = {k: [] for k in calls}
                for _ in range(rounds):
                    for k, fn in calls.items():
                        times[k].append(best(fn))
                pairs = (B * H * (n * (n + 1) // 2 if causal else n * n))
                flops = 4 * d * pairs
                t = float(np.median(times["bf16"]))
                gf = flops / t / 1e9

                def ratio(k):
                    if k not in times:
                        return "—"
                    r = [a / b for a, b in zip(times[k], times["bf16"])]
                    return f"{np.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"
                share = sorted(100 * flops / x / 1e9 / roofs["fma_gflops"] for x in times["f32"])
                print(f"| {n} | {d} | {'causal' if causal else 'full'} | {1e3 * t:.2f} | {gf:.0f} | "
                      f"{100 * gf / roofs['fma_gflops']:.0f} | "
                      f"{f'{100 * gf / dot:.0f}' if dot else '—'} | {ratio('f32')} | "
                      f"{ratio('torch bf16')} | {ratio('torch f32')} | "
                      f"{flops / float(np.median(times['f32'])) / 1e9:.0f} | "
                      f"{np.median(share):.0f} ({share[0]:.0f}–{share[-1]:.0f}) |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--isa", default="all")
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.rounds, args.n, args.d)
        return
    from attncore.bench.isa import child_env, child_path, resolve

    for isa in resolve(args.isa):
        subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds),
                        "--n", *map(str, args.n), "--d", *map(str, args.d)],
                       env=child_path(child_env(isa)), check=True)


if __name__ == "__main__":
    main()
