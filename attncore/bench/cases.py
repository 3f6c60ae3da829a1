"""What ``attncore bench`` measures: the benchmark problems, their FLOPs and
bytes, and their inputs.

Regimes.  *Prefill* (n = m, compute-bound) is reported in GFLOP/s, with
FLOPs = 4·d per visible (query, key) pair — 4·B·H·n·m·d without a mask,
B·H·2·d·n·(n+1) with the causal one.  *Decode* (n new rows against m cached
keys, bandwidth-bound) is reported in GB/s of K/V read.  *Window* is a
prefill under a causal sliding window; *backward* the gradients of a prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import attncore


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


# an int8 cache also reads a float32 scale a token and kv head, for K and for V
_SCALE_BYTES = {"int8": 4}


@dataclass(frozen=True)
class Case:
    """One benchmark problem.  regime: "prefill" (n = m, compute-bound),
    "decode" (n new rows against m cached keys, bandwidth-bound), "window"
    (prefill under a causal sliding window) or "backward" (the gradients of a
    prefill, given its output)."""

    n: int
    d: int = 64
    causal: bool = False
    B: int = 1
    H: int = 8
    dtype: str = "float32"
    regime: str = "prefill"
    keys: int | None = None  # m; default n
    kv_heads: int | None = None  # default H
    kv_dtype: str | None = None  # the cache's dtype; default dtype (float16, bfloat16, int8)
    window: int | None = None

    @property
    def m(self) -> int:
        return self.n if self.keys is None else self.keys

    @property
    def Hkv(self) -> int:
        return self.H if self.kv_heads is None else self.kv_heads

    @property
    def kv(self) -> str:
        return self.kv_dtype or self.dtype

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    def pairs(self) -> int:
        """Visible (query, key) pairs per head."""
        n, m = self.n, self.m
        if not self.causal:
            return n * m
        hi = np.clip(np.arange(n) + 1 + m - n, 0, m)
        lo = np.clip(hi - self.window, 0, None) if self.window else 0
        return int(np.sum(hi - lo))

    @property
    def flops(self) -> int:
        """4·d per visible pair forward; 10·d for the backward (the five
        products S, dP, dV, dK, dQ — the usual count, whatever recomputation
        an implementation adds)."""
        per_pair = 10 if self.regime == "backward" else 4
        return per_pair * self.d * self.B * self.H * self.pairs()

    def bytes(self, method: str) -> int:
        """Compulsory memory traffic: Q read and O written once, K and V read
        once (once per kv head: a GQA group shares them); the materialising
        methods also write and read back the n×m table."""
        it, B, H = self.itemsize, self.B, self.H
        io = it * B * H * 2 * self.n * self.d + self.kv_bytes()
        if self.regime == "backward":  # and out, dout read; dq, dk, dv written
            io *= 2
        if method in ("attncore-naive", "numpy"):
            io += 2 * it * B * H * self.n * self.m
        return io

    def kv_bytes(self) -> int:
        """The K/V bytes a decode step reads: what its GB/s counts (with an
        int8 cache's scales)."""
        row = _itemsize(self.kv) * self.d + _SCALE_BYTES.get(self.kv, 0)
        return self.B * self.Hkv * 2 * self.m * row

    def label(self) -> str:
        extra = f" m={self.m} H={self.H}/{self.Hkv} {self.kv}" if self.regime == "decode" else ""
        extra += f" window={self.window}" if self.window else ""
        return f"{self.regime} n={self.n} d={self.d}{' causal' if self.causal else ''}{extra}"


def default_cases(mode: str = "default") -> list[Case]:
    """The sweeps: the default (both regimes, about two minutes on 2 cores),
    --quick (a smoke pass for the tests, shorter timings) and --full (n up to
    16384, d = 128 too, m up to 131072: the long sweep)."""
    if mode == "quick":
        ns, extra, ms, wn = (256, 1024, 2048), [], (8192,), (2048,)
    elif mode == "full":
        ns, extra = (128, 256, 512, 1024, 2048, 4096, 8192, 16384), [
            Case(n, 128, c) for n in (1024, 2048, 4096, 8192) for c in (False, True)
        ]
        ms, wn = (1024, 4096, 16384, 32768, 65536, 131072), (1024, 4096, 16384)
    elif mode == "default":
        ns, extra, ms, wn = (512, 2048), [], (32768,), (2048,)
    else:
        raise ValueError(f"mode must be 'quick', 'default' or 'full', got {mode!r}")
    prefill = [Case(n, 64, c) for n in ns for c in (False, True)] + extra
    # bfloat16 q, k, v: the bfloat16 dot products where the CPU has them
    prefill += [Case(n, 64, c, dtype="bfloat16") for n in ns[-2:] for c in (False, True)]
    decode = [Case(1, 128, False, H=32, regime="decode", keys=m, kv_heads=hkv, kv_dtype=kv)
              for kv in ("float32", "float16", "bfloat16", "int8") for hkv in (32, 8)
              for m in ms]
    windows = (256, 1024, None) if mode == "full" else (256, None)
    window = [Case(n, 64, True, regime="window", window=w) for w in windows for n in wn]
    bn = (1024, 2048, 4096) if mode == "full" else (1024,)
    backward = [Case(n, 64, True, regime="backward") for n in bn]
    return prefill + decode + window + backward


def make_inputs(case: Case, seed: int = 0):
    """q, k, v; an int8 cache's k and v are (int8 values, float32 scales)."""
    rng = np.random.default_rng(seed)

    def draw(h, rows, dtype):
        x = rng.standard_normal((case.B, h, rows, case.d), dtype=np.float64)
        if dtype == "bfloat16":  # a bfloat16 cache: its bits, as uint16
            return attncore.to_bfloat16(x)
        if dtype == "int8":  # quantised as KVCache(dtype="int8") stores it
            from attncore.kvcache import quantize_int8

            return quantize_int8(x)
        return x.astype(dtype)

    return (draw(case.H, case.n, case.dtype), draw(case.Hkv, case.m, case.kv),
            draw(case.Hkv, case.m, case.kv))
