"""What users broke, each fixed and held here: forked workers, a KVCache shared
between threads, K packed only where the band reaches, masks broadcast over
some of several batch dims, thread counts out of range, and the memcheck
judge.  The forking tests run in a child process with a timeout, so a hang
fails the test instead of hanging the suite."""

import importlib.util
import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import attncore
from attncore import _core
from helpers import assert_close, tol

ROOT = Path(__file__).resolve().parents[1]
posix_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def run_child(code, tmp_path, timeout=120, env=None):
    """Run code in a fresh interpreter (away from the checkout, so that it
    imports the installed package); a hang is a timeout, a failure its output."""
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# ---- fork ------------------------------------------------------------------------

FORK = r"""
import os, sys, numpy as np, attncore
attncore.set_num_threads(2)
q = np.random.default_rng(0).standard_normal((4, 256, 64)).astype(np.float32)
want = attncore.reference.attention(q, q, q)
attncore.attention(q, q, q)          # 2 threads start the OpenMP pool
pid = os.fork()
if pid == 0:
    try:
        out = attncore.attention(q, q, q, causal=False)   # hung forever before the fix
        ok = np.abs(out - want).max() < 1e-5 and attncore.get_num_threads() == 1
        os._exit(0 if ok else 3)
    except BaseException:
        os._exit(4)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
print("parent", attncore.get_num_threads(), np.abs(attncore.attention(q, q, q) - want).max() < 1e-5)
"""


@posix_fork
def test_a_forked_child_computes_instead_of_hanging(tmp_path):
    out = run_child(FORK, tmp_path, timeout=60)
    assert "child 0" in out and "parent 2 True" in out


POOL = r"""
import sys, multiprocessing as mp, numpy as np, attncore

def work(seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 200, 32)).astype(np.float32) for _ in range(3))
    got = attncore.attention(q, k, v, causal=True)
    want = attncore.reference.attention(*(a.astype(np.float64) for a in (q, k, v)), causal=True)
    return float(np.abs(got - want).max()), attncore.get_num_threads()

if __name__ == "__main__":
    attncore.set_num_threads(2)
    work(0)                         # the parent's pool is started before the workers
    with mp.get_context(sys.argv[1]).Pool(2) as pool:
        res = pool.map(work, range(6))
    assert max(e for e, _ in res) < 1e-5, res
    print("ok", sorted({t for _, t in res}))
"""


@posix_fork
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_pools_work_with_every_start_method(tmp_path, method):
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    r = subprocess.run([sys.executable, str(script), method], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, ATTNCORE_NUM_THREADS="2"))
    assert r.returncode == 0, r.stdout + r.stderr
    # forked workers run on one thread; spawned and forkserver ones are fresh processes
    assert r.stdout.strip() == ("ok [1]" if method == "fork" else "ok [2]"), r.stdout


LOADER = r"""
import numpy as np, torch, attncore
from torch.utils.data import DataLoader, Dataset

class Attend(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        q = np.random.default_rng(i).standard_normal((2, 64, 16)).astype(np.float32)
        return torch.from_numpy(attncore.attention(q, q, q, causal=True))

attncore.set_num_threads(2)
q = np.ones((2, 256, 16), np.float32)
attncore.attention(q, q, q)
batches = list(DataLoader(Attend(), batch_size=2, num_workers=2))
print("ok", len(batches))
"""


@posix_fork
def test_a_torch_dataloader_with_workers(tmp_path):
    pytest.importorskip("torch")
    assert "ok 4" in run_child(LOADER, tmp_path, timeout=180)


# ---- KVCache between threads -----------------------------------------------------


def test_concurrent_appends_all_land_whole_and_in_order():
    cache = attncore.KVCache(kv_heads=2, head_dim=4, capacity=1)
    writers, chunks = 16, 40

    def write(w):
        for c in range(chunks):
            t = 1 + (w + c) % 3
            k = np.full((2, t, 4), w * 1000 + c, np.float32)
            cache.append(k, -k)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = sum(1 + (w + c) % 3 for w in range(writers) for c in range(chunks))
    k, v = cache.keys, cache.values
    assert len(cache) == want and k.shape[-2] == v.shape[-2] == want
    np.testing.assert_array_equal(v, -k)  # no row lost, keys and values together
    tags = k[0, :, 0].astype(int)
    for w in range(writers):  # each writer's chunks whole and in its order
        seq = [tag % 1000 for tag in tags if tag // 1000 == w]
        runs = [c for i, c in enumerate(seq) if i == 0 or seq[i - 1] != c]
        assert runs == list(range(chunks))
        assert all(seq.count(c) == 1 + (w + c) % 3 for c in range(chunks))


def test_attend_sees_a_consistent_snapshot_while_another_thread_appends():
    cache = attncore.KVCache(kv_heads=1, head_dim=8, capacity=2)
    rng = np.random.default_rng(0)
    cache.append(rng.standard_normal((1, 4, 8)).astype(np.float32),
                 rng.standard_normal((1, 4, 8)).astype(np.float32))
    stop, errors = threading.Event(), []

    def writer():  # at most 3000 appends: an attend reads the whole cache, so the writer,
        # running while each attend does, would otherwise grow it geometrically wherever the
        # attends are slow (under the sanitizers, on a loaded machine: 23 GiB once)
        for _ in range(3000):
            if stop.is_set():
                break
            x = rng.standard_normal((1, 3, 8)).astype(np.float32)
            cache.append(x, x)

    t = threading.Thread(target=writer)
    t.start()
    try:
        q = np.ones((1, 1, 8), np.float32)
        for _ in range(400):
            try:
                k, v = cache._snapshot()[:2]
                assert k.shape == v.shape
                cache.attend(q)
            except Exception as e:  # before the fix: "v has 2166 rows (keys) but k has 2165"
                errors.append(e)
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]


# ---- K packed only where the band reaches ---------------------------------------


def workspace(fn):
    _core.workspace_reset_peak()
    base = _core.workspace_peak()
    fn()
    return _core.workspace_peak() - base


def off_line(a, offset=16):
    """A copy of `a` whose data starts `offset` bytes past a 64-byte line."""
    buf = np.empty(a.nbytes + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("n", [33, 200])
def test_a_narrow_window_packs_the_band_not_all_of_k(isa, n):
    # 32 rows or fewer go to split-KV decode (no packing); from 33 the blockwise kernel
    q = np.random.default_rng(0).standard_normal((1, n, 16)).astype(np.float32)
    seen = {}
    for m in (2**12, 2**20):
        # 16 bytes past a cache line, as NumPy's large arrays lie, for both m: whether the
        # kernel copies V into the band depends on where its rows start (not at d = 16,
        # whose rows are too short), and this compares the packing of K alone
        k = off_line(np.ones((1, m, 16), np.float32))
        seen[m] = workspace(lambda: attncore.attention(q, k, k, causal=True, window=16))
        out, lse = attncore.attention(q, k, k, causal=True, window=16, return_lse=True)
        dout = np.ones_like(out)
        seen[m, "backward"] = workspace(
            lambda: attncore.attention_backward(q, k, k, out, lse, dout, causal=True, window=16))
    # before: a packed copy of all of K, 64 MiB at m = 2^20
    assert seen[2**12] == seen[2**20] < 2**20
    assert seen[2**12, "backward"] == seen[2**20, "backward"] < 2**20


def test_the_band_is_right_with_padding_and_a_window(isa, rng):
    q = rng.standard_normal((3, 2, 70, 8))
    k, v = rng.standard_normal((3, 1, 500, 8)), rng.standard_normal((3, 1, 500, 8))
    kw = dict(causal=True, window=24, key_lengths=[500, 130, 0], block_q=16, block_k=16)
    out, lse = attncore.attention(q, k, v, return_lse=True, **kw)
    want, want_lse = attncore.reference.attention(q, k, v, return_lse=True, **kw)
    assert_close(out, want, tol(np.float64, 24, 8))
    dout = rng.standard_normal(out.shape)
    got = attncore.attention_backward(q, k, v, out, lse, dout, **{
        x: kw[x] for x in ("causal", "window", "key_lengths")})
    ref = attncore.reference.attention_backward(q, k, v, out, lse, dout, **{
        x: kw[x] for x in ("causal", "window", "key_lengths")})
    for g, w in zip(got, ref):
        assert_close(g, w, 1e-10)


# ---- masks read through their strides ---------------------------------------------


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 64, 48), (1, 3, 1, 64, 48), (2, 3, 4, 1, 48),
                                        (2, 1, 4, 64, 1), (1, 1, 4, 64, 48)])
def test_masks_broadcast_over_some_batch_dims_are_never_expanded(isa, rng, mask_shape):
    q = rng.standard_normal((2, 3, 4, 64, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 4, 48, 8)).astype(np.float32)
    mask = rng.random(mask_shape) < 0.7
    for m in (mask, mask[..., ::-1], np.asfortranarray(mask)):
        want = attncore.reference.attention(q.astype(float), k.astype(float), k.astype(float),
                                            mask=m)
        for fn in (lambda: attncore.attention(q, k, k, mask=m),
                   lambda: attncore.attention(q, k, k, mask=m, method="naive"),
                   lambda: attncore.plain_attention(q, k, k, mask=m)):
            assert_close(fn(), want, tol(np.float32, 48, 8))
        assert_close(np.where(np.isinf(attncore.scores(q, k, mask=m)), 0, 1),
                     np.broadcast_to(m, (2, 3, 4, 64, 48)).astype(float), 0)


def test_the_reported_mask_pattern_allocates_nothing_of_its_size():
    # q (2, 16, 64, n, 8) with mask (2, 1, 1, n, n): the full mask is 2·16·64 times the mask
    n = 1024
    q = np.ones((2, 16, 8, n, 8), np.float32)
    mask = np.ones((2, 1, 1, n, n), bool)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = attncore.attention(q, q, q, mask=mask)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < out.nbytes + mask.nbytes  # the full mask would be 256 MiB
    # and the core's own workspace is what the same call takes without a mask
    assert workspace(lambda: attncore.attention(q, q, q, mask=mask)) == workspace(
        lambda: attncore.attention(q, q, q))


# ---- argument checks ------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, 2**31, 1025, 5000, 2.0, "2", True])
def test_set_num_threads_takes_1_to_its_maximum(n):
    before = attncore.get_num_threads()
    with pytest.raises(ValueError, match=r"n must be a positive integer \(at most 1024\)"):
        attncore.set_num_threads(n)
    assert attncore.get_num_threads() == before


THREAD_MEMORY = r"""
import resource, attncore, numpy as np
q = np.ones((1, 64, 8), np.float32)
attncore.attention(q, q, q)
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 64 * 2**20, resource.RLIM_INFINITY))
try:
    attncore.set_num_threads(1000)   # 1000 stacks do not fit in 64 MiB more
    print("accepted")
except RuntimeError as e:
    print("RuntimeError", attncore.get_num_threads())
print("alive", np.abs(attncore.attention(q, q, q) - 1).max())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and RLIMIT_AS")
def test_threads_that_cannot_start_are_an_exception_not_the_end_of_the_process(tmp_path):
    # before: set_num_threads(1000) was taken, and the next call ended the
    # process in libgomp ("Thread creation failed")
    out = run_child(THREAD_MEMORY, tmp_path, env={"ATTNCORE_NUM_THREADS": "2"})
    assert "RuntimeError 2" in out and "alive 0.0" in out, out


def test_scale_must_be_a_real_number(rng):
    q = rng.standard_normal((4, 8))
    for bad in ("0.5", b"0.5", 1j):
        for fn in (attncore.attention, attncore.reference.attention):
            with pytest.raises(ValueError, match="scale must be a positive finite number"):
                fn(q, q, q, scale=bad)
    assert_close(attncore.attention(q, q, q, scale=np.float32(0.5)),
                 attncore.reference.attention(q, q, q, scale=0.5), 1e-12)


@pytest.mark.parametrize("batch", [(2.7,), (-1,), ("2",), 3, (True,)])
def test_kvcache_dimensions_must_be_integers(batch):
    with pytest.raises(ValueError, match="batch must be a tuple of non-negative integers"):
        attncore.KVCache(kv_heads=2, head_dim=4, batch=batch)
    assert attncore.KVCache(kv_heads=2, head_dim=4, batch=(np.int64(2), 0)).batch == (2, 0)


# ---- the memcheck judge ---------------------------------------------------------


@pytest.mark.skipif(not (ROOT / "tools" / "memcheck.py").exists(), reason="needs the source tree")
def test_memcheck_judges_by_the_extension_file_not_a_word_in_its_path():
    spec = importlib.util.spec_from_file_location("memcheck", ROOT / "tools" / "memcheck.py")
    memcheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memcheck)

    class Frame:
        def __init__(self, obj, fn="f"):
            self.values = {"obj": obj, "fn": fn}

        def findtext(self, key):
            return self.values.get(key)

    numpy_in_attncore_venv = ("/home/u/attncore-venv/lib/python3.11/site-packages/numpy/_core/"
                              "_multiarray_umath.cpython-311-x86_64-linux-gnu.so")
    assert not memcheck.ours([Frame(numpy_in_attncore_venv, "init_string_ufuncs")])
    assert memcheck.ours([Frame(numpy_in_attncore_venv), Frame(_core.__file__)])
    assert memcheck.ours([Frame("/usr/lib/libc.so.6", "ac_flash_f32")])


# ---- a V whose rows do not start on a cache line is copied into the band ----------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(causal=True, window=40),
                                dict(bias=True), dict(nonfinite=True)], ids=str)
def test_a_v_off_its_cache_lines_gives_the_same_bits_as_one_on_them(isa, dtype, kw):
    """NumPy's large arrays start 16 bytes past a line; the blockwise kernel then
    copies V into an aligned band (rows of 512 bytes or more, each block read by
    enough Q blocks), which must change no bit of the result: the same P·V over
    the same values."""
    kw = dict(kw)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 300, 128)).astype(dtype)
    k = rng.standard_normal((2, 2, 300, 128)).astype(dtype)
    v = rng.standard_normal((2, 2, 300, 128)).astype(dtype)
    if kw.pop("bias", False):
        kw["bias"] = rng.standard_normal((300, 300)).astype(dtype)
    if kw.pop("nonfinite", False):  # inf and NaN in V: those blocks take the masked path
        v[0, 1, 7, 3], v[1, 0, 290, 0] = np.inf, np.nan
    got = {off: attncore.attention(q, k, off_line(v, off), return_lse=True, **kw)
           for off in (0, 16, 8)}
    for off in (16, 8):
        for a, b in zip(got[0], got[off]):
            np.testing.assert_array_equal(a, b)


def test_the_copy_of_an_off_line_v_is_made_and_only_where_it_repays(isa):
    """The copy shows in the workspace: one band of V more (here all of it) for a
    V off its lines, none for one on them; none where few Q blocks read each V
    block (40 queries), for rows of 256 bytes (d = 64), or for rows that could
    not start on a line (d = 136)."""
    def extra(n, d, dtype=np.float32):
        q, v = np.ones((1, 2, n, d), dtype), np.ones((1, 2, 512, d), dtype)
        return (workspace(lambda: attncore.attention(q, v, off_line(v, 16))) -
                workspace(lambda: attncore.attention(q, v, off_line(v, 0))))

    assert extra(512, 128) >= 2 * 512 * 128 * 4
    assert extra(512, 64, np.float64) >= 2 * 512 * 64 * 8
    assert extra(40, 128) == extra(512, 64) == extra(512, 136) == 0
