"""A small program using attncore's public API, checked by ``mypy --strict``
(tests/test_typing.py): the annotations a user's type checker sees must
describe the calls as they are made here.  (Shapes are beyond the types.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

import attncore
from attncore import KVCache, reference

Array = npt.NDArray[Any]  # what the API returns (np.ndarray), with its parameters spelled out


def heads(rng: np.random.Generator, h: int, n: int, d: int) -> npt.NDArray[np.float32]:
    return rng.standard_normal((h, n, d), dtype=np.float32)


def main() -> float:
    rng = np.random.default_rng(0)
    q, k, v = heads(rng, 4, 16, 8), heads(rng, 2, 16, 8), heads(rng, 2, 16, 8)
    out: Array = attncore.attention(q, k, v, causal=True)
    out2, lse = attncore.attention(q, k, v, return_lse=True)
    out3, weights = attncore.attention(q, k, v, method="naive", return_weights=True)
    dq, dk, dv = attncore.attention_backward(q, k, v, out2, lse, np.ones_like(out2))
    merged, lse2 = attncore.merge(out2, lse, out3, lse)
    s: Array = attncore.scores(q, k, causal=True)
    p: Array = attncore.softmax(s)
    lin: Array = attncore.linear_attention(q, k, v, causal=True)
    plain: Array = attncore.plain_attention(q[0], k[0], v[0])
    b16 = attncore.to_bfloat16(k)
    back: Array = attncore.from_bfloat16(b16)
    cache = KVCache(2, 8, dtype=np.float16)
    cache.append(k.astype(np.float16), v.astype(np.float16))
    step: Array = cache.attend(q[:, -1:])
    ref: Array = reference.attention(q, k, v, causal=True)
    attncore.set_num_threads(2)
    threads: int = attncore.get_num_threads()
    info: dict[str, object] = attncore.info()
    total = (out.sum() + weights.sum() + dq.sum() + dk.sum() + dv.sum() + merged.sum()
             + lse2.sum() + p.sum() + lin.sum() + plain.sum() + back.sum() + step.sum()
             + ref.sum())
    return float(total) + threads + len(info)


if __name__ == "__main__":
    print(main())
