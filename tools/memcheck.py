"""A representative run of every entry point, under valgrind's memcheck.

    python tools/memcheck.py              the run itself (a few seconds)
    python tools/memcheck.py --valgrind   the same run under memcheck, judged

The run calls each kernel on the ISAs valgrind can execute (it has no
AVX-512) with masks, windows, padding, GQA, float16 caches, NaN and inf, and
checks every result against the NumPy reference, so a read of uninitialised
or freed memory would show both as a memcheck error and as a wrong number.

Judged: every memcheck error with a frame in attncore's extension in its
stack, and every block definitely lost that attncore allocated.  Either makes
the exit status 1.  The interpreter's and the dynamic loader's own reports
(a CPython built without valgrind support reads memory memcheck calls
uninitialised) are counted and printed, not judged.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np

import attncore
from attncore import _isa, reference

RNG = np.random.default_rng(7)


def r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)


def up(*xs):
    return [np.asarray(x, np.float64) for x in xs]


def run_all(dtype):
    tol = 2e-5 if dtype == np.float32 else 1e-12
    q, k, v = r(2, 4, 37, 24, dtype=dtype), r(2, 2, 45, 24, dtype=dtype), r(2, 2, 45, 20, dtype=dtype)
    mask = RNG.random((37, 45)) < 0.6
    lengths = np.array([45, 19])
    for kw in ({}, {"causal": True}, {"causal": True, "window": 9}, {"mask": mask},
               {"key_lengths": lengths}, {"block_q": 5, "block_k": 7}):
        for method in ("flash", "naive"):
            if method == "naive" and "block_q" in kw:
                continue
            o, lse = attncore.attention(q, k, v, method=method, return_lse=True, **kw)
            ro, rl = reference.attention(*up(q, k, v), return_lse=True,
                                         **{a: b for a, b in kw.items() if not a.startswith("block")})
            close(o, ro, tol)
            close(lse, rl, tol * 10)
    # decode: one row over a long cache (split-KV), and a float16 cache
    dq, dk, dv = r(1, 8, 1, 32, dtype=dtype), r(1, 2, 1500, 32, dtype=dtype), r(1, 2, 1500, 32, dtype=dtype)
    close(attncore.attention(dq, dk, dv), reference.attention(*up(dq, dk, dv)), tol)
    if dtype == np.float32:
        hk, hv = dk.astype(np.float16), dv.astype(np.float16)
        close(attncore.attention(dq, hk, hv), reference.attention(*up(dq, hk, hv)), tol)
    cache = attncore.KVCache(2, 32, dtype=dtype)
    for t in range(3):
        cache.append(dk[0, :, t * 50:(t + 1) * 50], dv[0, :, t * 50:(t + 1) * 50])
    close(cache.attend(dq[0]), reference.attention(*up(dq[0], dk[0, :, :150], dv[0, :, :150]), causal=True), tol)
    # NaN and inf: they stay in the rows that see them
    bad = k.copy()
    bad[0, 0, 3, 0] = np.nan
    bad[1, 1, 5, 2] = np.inf
    close(attncore.attention(q, bad, v, causal=True), reference.attention(*up(q, bad, v), causal=True), tol)
    # the rest of the API
    close(attncore.scores(q, k, causal=True), reference.scores(*up(q, k), causal=True), tol)
    x = r(5, 33, dtype=dtype)
    close(attncore.softmax(x), reference.softmax(up(x)[0]), tol)
    o1, l1 = attncore.attention(q, k[:, :, :20], v[:, :, :20], return_lse=True)
    o2, l2 = attncore.attention(q, k[:, :, 20:], v[:, :, 20:], return_lse=True)
    close(attncore.merge(o1, l1, o2, l2)[0], reference.attention(*up(q, k, v)), tol)
    o, lse = attncore.attention(q, k, v, causal=True, return_lse=True)
    do = r(*o.shape, dtype=dtype)
    got = attncore.attention_backward(q, k, v, o, lse, do, causal=True)
    want = reference.attention_backward(*up(q, k, v, o, lse, do), causal=True)
    for g, w in zip(got, want):
        close(g, w, tol * 50)
    close(attncore.linear_attention(q, k, v, causal=True),
          reference.linear_attention(*up(q, k, v), causal=True), tol * 10)
    close(attncore.plain_attention(q, bad, v, causal=True, mask=mask),
          reference.attention(*up(q, bad, v), causal=True, mask=mask), tol)


def representative_run():
    for isa in ("scalar", "avx2"):
        if isa not in _isa.available():
            continue
        _isa.use(isa)
        for dtype in (np.float32, np.float64):
            run_all(dtype)
        print(f"memcheck run: {isa} ok", flush=True)


def core_object() -> str:
    """The extension module's own file: a frame is the core's when it runs in
    it (judged by the file itself, not by a word in its path: a virtualenv
    named after the project holds numpy too)."""
    return os.path.realpath(attncore._core.__file__)


def ours(frames, core=None):
    core = core or core_object()
    return any(os.path.realpath(f.findtext("obj") or "/") == core
               or (f.findtext("fn") or "").startswith("ac_") for f in frames)


def under_valgrind(python):
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "memcheck.xml")
        env = dict(os.environ, PYTHONMALLOC="malloc", OMP_NUM_THREADS="2")
        cmd = ["valgrind", "--tool=memcheck", "--xml=yes", f"--xml-file={xml}",
               "--leak-check=full", "--show-leak-kinds=definite", "--track-origins=yes",
               "--num-callers=40", python, os.path.abspath(__file__)]
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            print(f"the run under valgrind failed ({r.returncode})")
            return 1
        root = ET.parse(xml).getroot()
    errors, theirs, lost = [], 0, 0
    core = core_object()
    for e in root.iter("error"):
        kind = e.findtext("kind")
        frames = list(e.iter("frame"))
        if kind.startswith("Leak_"):
            if ours(frames, core):
                lost += int(e.findtext("xwhat/leakedbytes") or 0)
                errors.append(e)
        elif ours(frames, core):
            errors.append(e)
        else:
            theirs += int(e.findtext("count") or 1) if e.find("count") is not None else 1
    print(f"memcheck: {len(errors)} error contexts in attncore, {lost} bytes lost by attncore; "
          f"{theirs} reports from the interpreter and loader (not judged)")
    for e in errors:
        print(f"  {e.findtext('kind')}: {e.findtext('what') or e.findtext('xwhat/text')}")
        for f in list(e.iter("frame"))[:8]:
            print(f"    {f.findtext('fn')} {f.findtext('file') or f.findtext('obj')}:{f.findtext('line') or ''}")
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--valgrind", action="store_true", help="run under memcheck and judge it")
    args = ap.parse_args()
    if args.valgrind:
        sys.exit(under_valgrind(sys.executable))
    representative_run()


if __name__ == "__main__":
    main()
