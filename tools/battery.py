"""Record, or compare against a record, the exact bits of a fixed battery of calls.

A refactor of the core must not change a single output bit.  This script runs
every public entry point (forward flash and naive, split-KV decode, scores,
softmax, backward, merge, linear, multi-head, KVCache) on fixed inputs, on
every instruction set this machine can run, in float32 and float64 (and the
float16 cache), and stores each result's bytes:

    python tools/battery.py record before.npz      # on the old build
    python tools/battery.py compare before.npz     # on the new build: exit 1 on any difference

Shapes sit around vector widths and block sizes; masks, windows, padding,
GQA, NaN/inf inputs and odd block sizes are all in it.
"""

from __future__ import annotations

import sys

import numpy as np

import attncore
from attncore import _isa


def _inputs(seed, B, H, Hkv, n, m, dk, dv, dtype):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, n, dk)).astype(dtype)
    k = rng.standard_normal((B, Hkv, m, dk)).astype(dtype)
    v = rng.standard_normal((B, Hkv, m, dv)).astype(dtype)
    return q, k, v


def battery():
    """Yield (name, thunk) pairs; each thunk returns an array or a tuple of arrays."""
    A = attncore
    shapes = [  # B, H, Hkv, n, m, dk, dv
        (1, 2, 2, 1, 1, 8, 8), (1, 2, 1, 7, 9, 15, 17), (2, 4, 2, 33, 65, 16, 16),
        (1, 2, 2, 129, 127, 64, 64), (1, 2, 1, 200, 300, 31, 33), (1, 1, 1, 300, 200, 8, 4),
    ]
    for dtype in (np.float32, np.float64):
        dn = np.dtype(dtype).name
        for si, (B, H, Hkv, n, m, dk, dv) in enumerate(shapes):
            q, k, v = _inputs(si, B, H, Hkv, n, m, dk, dv, dtype)
            tag = f"{dn}/s{si}"
            rng = np.random.default_rng(100 + si)
            mask = rng.random((n, m)) < 0.7
            kl = [max(m - 5 * b - 1, 0) for b in range(B)]
            for causal in (False, True):
                c = f"{tag}/c{int(causal)}"
                yield f"{c}/flash", lambda q=q, k=k, v=v, causal=causal: A.attention(
                    q, k, v, causal=causal, return_lse=True)
                yield f"{c}/naive", lambda q=q, k=k, v=v, causal=causal: A.attention(
                    q, k, v, causal=causal, method="naive", return_lse=True,
                    return_weights=True)
                yield f"{c}/scores", lambda q=q, k=k, causal=causal: A.scores(q, k, causal=causal)
                yield f"{c}/mask", lambda q=q, k=k, v=v, causal=causal, mask=mask: A.attention(
                    q, k, v, causal=causal, mask=mask, return_lse=True)
                yield f"{c}/naive-mask", lambda q=q, k=k, v=v, causal=causal, mask=mask: (
                    A.attention(q, k, v, causal=causal, mask=mask, method="naive"))
                yield f"{c}/kl", lambda q=q, k=k, v=v, causal=causal, kl=kl: A.attention(
                    q, k, v, causal=causal, key_lengths=kl, return_lse=True)
                yield f"{c}/blocks", lambda q=q, k=k, v=v, causal=causal: A.attention(
                    q, k, v, causal=causal, block_q=13, block_k=21, return_lse=True)
                out, lse = A.attention(q, k, v, causal=causal, return_lse=True)
                dout = np.random.default_rng(7).standard_normal(out.shape).astype(dtype)
                yield f"{c}/backward", lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout, \
                    causal=causal: A.attention_backward(q, k, v, out, lse, dout, causal=causal)
                yield f"{c}/backward-naive", lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout, \
                    causal=causal: A.attention_backward(q, k, v, out, lse, dout,
                                                        causal=causal, method="naive")
                yield f"{c}/linear", lambda q=q, k=k, v=v, causal=causal: A.linear_attention(
                    q, k, v, causal=causal)
            yield f"{tag}/window", lambda q=q, k=k, v=v: A.attention(
                q, k, v, causal=True, window=5, return_lse=True)
            out, lse = A.attention(q, k, v, causal=True, window=5, return_lse=True)
            dout = np.random.default_rng(8).standard_normal(out.shape).astype(dtype)
            yield f"{tag}/backward-window", lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout: (
                A.attention_backward(q, k, v, out, lse, dout, causal=True, window=5))
            yield f"{tag}/softmax", lambda q=q: A.softmax(q * 7)
        # decode: few rows against many keys, MHA and GQA, causal and window
        for di, (B, H, Hkv, n, m) in enumerate([(1, 4, 4, 1, 1000), (2, 8, 2, 3, 2049),
                                                (1, 2, 1, 1, 4099)]):
            q, k, v = _inputs(50 + di, B, H, Hkv, n, m, 64, 48, dtype)
            t = f"{dn}/dec{di}"
            yield f"{t}/full", lambda q=q, k=k, v=v: A.attention(q, k, v, return_lse=True)
            yield f"{t}/causal-window", lambda q=q, k=k, v=v: A.attention(
                q, k, v, causal=True, window=700, return_lse=True)
            if dtype == np.float32:
                kh, vh = k.astype(np.float16), v.astype(np.float16)
                yield f"{t}/f16", lambda q=q, kh=kh, vh=vh: A.attention(q, kh, vh, return_lse=True)
                yield f"{t}/f16-prefill", lambda q=q, kh=kh, vh=vh: A.attention(
                    np.repeat(q, 40, axis=2), kh, vh, causal=True, return_lse=True)
                yield f"{t}/f16-naive", lambda q=q, kh=kh, vh=vh: A.attention(
                    q, kh, vh, method="naive", return_lse=True)
                yield f"{t}/f16-scores", lambda q=q, kh=kh: A.scores(q, kh)
        # NaN and inf in visible and hidden places
        q, k, v = _inputs(77, 1, 2, 2, 40, 40, 16, 16, dtype)
        k[0, 0, 3, 2] = np.nan
        v[0, 1, 39, 0] = np.inf
        q[0, 1, 5, 1] = 1e4
        yield f"{dn}/nan", lambda q=q, k=k, v=v: A.attention(q, k, v, causal=True,
                                                             return_lse=True)
        yield f"{dn}/nan-naive", lambda q=q, k=k, v=v: A.attention(q, k, v, causal=True,
                                                                   method="naive")
        # merge and multi-head
        q, k, v = _inputs(90, 2, 3, 3, 17, 64, 16, 16, dtype)
        parts = [A.attention(q, k[..., s, :], v[..., s, :], return_lse=True)
                 for s in (slice(0, 10), slice(10, 40), slice(40, 64))]
        yield f"{dn}/merge", lambda parts=parts: A.merge(*[x for p in parts for x in p])
        rng = np.random.default_rng(91)
        x = rng.standard_normal((2, 33, 32)).astype(dtype)
        w = [rng.standard_normal(s).astype(dtype) * 0.2 for s in
             ((32, 32), (32, 16), (32, 16), (32, 24))]
        yield f"{dn}/mha", lambda x=x, w=w: A.multi_head_attention(
            x, *w, heads=4, kv_heads=2, causal=True)
        cache_dt = np.float16 if dtype == np.float32 else dtype
        yield f"{dn}/kvcache", lambda: _kvcache(cache_dt, dtype)


def _kvcache(cache_dt, dtype):
    rng = np.random.default_rng(92)
    c = attncore.KVCache(kv_heads=2, head_dim=32, dtype=cache_dt, capacity=8)
    outs = []
    for step in range(5):
        c.append(rng.standard_normal((2, 300 + step, 32)).astype(cache_dt),
                 rng.standard_normal((2, 300 + step, 32)).astype(cache_dt))
        outs.append(c.attend(rng.standard_normal((4, 1, 32)).astype(dtype)))
    return tuple(outs)


def run() -> dict:
    before = attncore.info()["isa"]
    results = {}
    try:
        for isa in _isa.available():
            _isa.use(isa)
            for name, thunk in battery():
                got = thunk()
                got = got if isinstance(got, tuple) else (got,)
                for i, a in enumerate(got):
                    results[f"{isa}/{name}/{i}"] = np.ascontiguousarray(a)
    finally:
        _isa.use(before)
    return results


def main(argv) -> int:
    if len(argv) != 3 or argv[1] not in ("record", "compare"):
        print(__doc__)
        return 2
    results = run()
    if argv[1] == "record":
        np.savez_compressed(argv[2], **results)
        print(f"recorded {len(results)} arrays ({sum(a.nbytes for a in results.values())} "
              f"bytes) on {_isa.available()} into {argv[2]}")
        return 0
    old = np.load(argv[2])
    missing = sorted(set(old.files) ^ set(results))
    differ = [k for k in sorted(set(old.files) & set(results))
              if old[k].dtype != results[k].dtype or old[k].shape != results[k].shape
              or old[k].tobytes() != results[k].tobytes()]
    same = len(set(old.files) & set(results)) - len(differ)
    print(f"{same} arrays bit-identical, {len(differ)} differ, {len(missing)} only on one side "
          f"(ISAs here: {_isa.available()})")
    for k in differ[:20] + missing[:20]:
        print("  ", k)
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
