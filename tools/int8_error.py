"""What an int8 cache costs in accuracy: one decode step (and a block of 64
queries) over a cache of m tokens, the output of attncore over each cache
dtype against the float64 reference on the unquantised data, on two kinds of
keys:

  unit-normal   every channel N(0, 1)
  outliers      as the keys of trained LLMs are reported to be: a few channels
                (4 of 128) carry values ~20x the rest, the same channels in
                every token, and the queries lean on them

and, for the int8 format, what the choice of the key scales does: per token
(what KVCache(dtype="int8") stores: one scale a token and kv head, the row's
absmax over its channels) against per channel (one scale a channel, over the
tokens of the cache; computed here in NumPy, as the kernels do not take it).
Where a decode step's Q·Kᵀ runs as integer dot products (AVX512_VNNI or AVX2: the
query rounded to 16 bits), the stored cache is also read with them off
("widened"): what rounding the query adds.

    python tools/int8_error.py [--m 4096] [--d 128] [--seed 0]

Prints a Markdown table: max and mean absolute error of the output, the
largest error ÷ the output's RMS, and, for the stored int8 cache, the largest
error against float64 attention over its dequantised rows (the kernels' own
error, the format's taken out).
"""

from __future__ import annotations

import argparse

import numpy as np

import attncore
from attncore import _core
from attncore.kvcache import KVCache, dequantize_int8, quantize_int8


def data(kind: str, rng, Hkv: int, m: int, d: int, H: int, n: int):
    k = rng.standard_normal((Hkv, m, d))
    v = rng.standard_normal((Hkv, m, d))
    q = rng.standard_normal((H, n, d))
    if kind == "outliers":
        ch = rng.choice(d, 4, replace=False)
        k[..., ch] *= 20  # a few heavy channels, in every token
        q[..., ch] *= 2   # which the queries use
        q /= 3            # scores of a sensible size
    return q, k, v


def per_channel_keys(k: np.ndarray) -> np.ndarray:
    """Keys quantised per channel (one scale a channel over the cache's
    tokens), dequantised: the alternative to per-token scales."""
    s = np.abs(k).max(axis=-2, keepdims=True) / 127
    s = np.where(s > 0, s, 1)
    return np.clip(np.rint(k / s), -127, 127) * s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    H, Hkv, m, d = 32, 8, args.m, args.d
    print(f"H={H} H_kv={Hkv} m={m} d={d}, isa {attncore.info()['isa']}\n")
    print("| keys | queries | cache | max abs err | mean abs err | max err ÷ output RMS "
          "| max err against its dequantised rows |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("unit-normal", "outliers"):
        for n in (1, 64):
            rng = np.random.default_rng(args.seed)
            q, k, v = data(kind, rng, Hkv, m, d, H, n)
            exact = attncore.reference.attention(q, k, v, causal=True)
            rms = np.sqrt(np.mean(exact**2))
            q32 = q.astype(np.float32)
            results, own = {}, {}
            for dt in ("float32", "float16", "bfloat16", "int8"):
                c = KVCache(Hkv, d, dtype=dt, capacity=m)
                kk, vv = k.astype(np.float32), v.astype(np.float32)
                if dt == "float16":
                    kk, vv = kk.astype(np.float16), vv.astype(np.float16)
                elif dt == "bfloat16":
                    kk, vv = attncore.to_bfloat16(kk), attncore.to_bfloat16(vv)
                c.append(kk, vv)
                results[f"{dt}" + (" (keys per token)" if dt == "int8" else "")] = c.attend(q32)
                if dt == "int8":
                    deq = attncore.reference.attention(q32.astype(np.float64),
                                                       c.keys.astype(np.float64),
                                                       c.values.astype(np.float64), causal=True)
                    own["int8 (keys per token)"] = deq
                if dt == "int8" and _core.i8dot_supported():
                    _core.i8dot_choose(0)
                    results["int8 (keys per token, widened)"] = c.attend(q32)
                    own["int8 (keys per token, widened)"] = deq
                    _core.i8dot_choose(-1)
            # int8 with per-channel key scales (values per token, as stored)
            kc = per_channel_keys(k.astype(np.float32))
            vq = dequantize_int8(*quantize_int8(v.astype(np.float32)))
            results["int8 (keys per channel)"] = attncore.reference.attention(
                q, kc.astype(np.float64), vq.astype(np.float64), causal=True)
            for name, out in results.items():
                err = np.abs(out - exact)
                mine = f"{np.abs(out - own[name]).max():.2e}" if name in own else "—"
                print(f"| {kind} | {n} | {name} | {err.max():.2e} | {err.mean():.2e} | "
                      f"{err.max() / rms:.2e} | {mine} |")


if __name__ == "__main__":
    main()
