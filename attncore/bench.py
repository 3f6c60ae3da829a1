"""The benchmark machinery behind ``attncore bench``, ``attncore plot`` and ``bench/``.

One run measures, side by side and on the same threads: attncore's naive
and blockwise kernels, a NumPy materialised implementation (BLAS matmuls),
and PyTorch's ``scaled_dot_product_attention`` when torch is importable —
together with the machine's own roofs, measured in the same run: the FMA
throughput and streaming-read probes from ``csrc/probes.c`` and NumPy's sgemm.

Regimes.  *Prefill* (n = m, compute-bound) is reported in GFLOP/s, with
FLOPs = 4·d per visible (query, key) pair — 4·B·H·n·m·d without a mask,
B·H·2·d·n·(n+1) with the causal one.  (Decode, the bandwidth-bound regime,
is reported in GB/s of K/V read; it arrives with the decode kernel.)
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field

import numpy as np

import attncore
from attncore import _core
from attncore._measure import measure, quiesce_blas  # noqa: F401 (bench/ uses it)

METHODS = ("attncore-flash", "attncore-naive", "numpy", "torch")


# ---- what is measured ---------------------------------------------------------


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
    kv_dtype: str | None = None  # the cache's dtype; default dtype (float16 allowed)
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
        return np.dtype(self.dtype).itemsize

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
        it, kv, B, H = self.itemsize, np.dtype(self.kv).itemsize, self.B, self.H
        io = it * B * H * 2 * self.n * self.d + kv * B * self.Hkv * 2 * self.m * self.d
        if self.regime == "backward":  # and out, dout read; dq, dk, dv written
            io *= 2
        if method in ("attncore-naive", "numpy"):
            io += 2 * it * B * H * self.n * self.m
        return io

    def kv_bytes(self) -> int:
        """The K/V bytes a decode step reads: what its GB/s counts."""
        return np.dtype(self.kv).itemsize * self.B * self.Hkv * 2 * self.m * self.d

    def label(self) -> str:
        extra = f" m={self.m} H={self.H}/{self.Hkv} {self.kv}" if self.regime == "decode" else ""
        extra += f" window={self.window}" if self.window else ""
        return f"{self.regime} n={self.n} d={self.d}{' causal' if self.causal else ''}{extra}"


def default_cases(mode: str = "default") -> list[Case]:
    """The sweeps: --quick (under a minute), default (a few minutes), --full."""
    if mode == "quick":
        ns, extra, ms, wn = (256, 1024, 2048), [], (8192,), (2048,)
    elif mode == "full":
        ns, extra = (128, 256, 512, 1024, 2048, 4096, 8192, 16384), [
            Case(n, 128, c) for n in (1024, 2048, 4096, 8192) for c in (False, True)
        ]
        ms, wn = (1024, 4096, 16384, 32768, 65536, 131072), (1024, 4096, 16384)
    else:
        ns, extra = (256, 512, 1024, 2048, 4096), [Case(2048, 128, c) for c in (False, True)]
        ms, wn = (1024, 4096, 16384, 32768), (1024, 4096)
    prefill = [Case(n, 64, c) for n in ns for c in (False, True)] + extra
    decode = [Case(1, 128, False, H=32, regime="decode", keys=m, kv_heads=hkv, kv_dtype=kv)
              for kv in ("float32", "float16") for hkv in (32, 8) for m in ms]
    windows = (256, None) if mode == "quick" else (256, 1024, None)
    window = [Case(n, 64, True, regime="window", window=w) for w in windows for n in wn]
    bn = (1024,) if mode == "quick" else (1024, 2048, 4096) if mode == "full" else (1024, 2048)
    backward = [Case(n, 64, True, regime="backward") for n in bn]
    return prefill + decode + window + backward


# ---- the peers ----------------------------------------------------------------


def make_inputs(case: Case, seed: int = 0):
    rng = np.random.default_rng(seed)

    def draw(h, rows, dtype):
        return rng.standard_normal((case.B, h, rows, case.d), dtype=np.float64).astype(dtype)

    return (draw(case.H, case.n, case.dtype), draw(case.Hkv, case.m, case.kv),
            draw(case.Hkv, case.m, case.kv))


def numpy_attention(q, k, v, causal: bool = False, window: int | None = None):
    """Materialised attention in NumPy, as one would write it: BLAS matmuls
    and in-place softmax, one head at a time (so memory is one table); kv head
    h // (H // H_kv) serves query head h."""
    B, H, n, d = q.shape
    Hkv, m = k.shape[1], k.shape[2]
    scale = q.dtype.type(1 / math.sqrt(d))
    out = np.empty(q.shape[:3] + (v.shape[3],), q.dtype)
    hidden = None
    if causal:
        hidden = np.triu(np.ones((n, m), bool), 1 + m - n)
        if window:
            hidden |= np.tril(np.ones((n, m), bool), m - n - window)
    for b in range(B):
        for h in range(H):
            kh, vh = k[b, h * Hkv // H], v[b, h * Hkv // H]
            s = q[b, h] @ kh.T
            s *= scale
            if hidden is not None:
                s[hidden] = -np.inf
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=1, keepdims=True)
            out[b, h] = s @ vh
    return out


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_runner(q, k, v, causal):
    import torch
    import torch.nn.functional as F

    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    if tk.dtype != tq.dtype:  # a float16 cache: torch wants one dtype, so all half
        tq = tq.to(tk.dtype)
    gqa = tq.shape[1] != tk.shape[1]
    # torch's is_causal is top-left; attncore's bottom-right.  They agree for
    # n == m, and for n = 1 (decode) causal changes nothing.
    causal = causal and tq.shape[2] > 1

    def run():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, enable_gqa=gqa)

    return run


def _backward_runner(method, case, q, k, v):
    """The gradients of one prefill, given its output: what each peer's
    backward pass costs on its own."""
    rng = np.random.default_rng(1)
    dout = rng.standard_normal(q.shape[:-1] + (v.shape[-1],)).astype(q.dtype)
    if method in ("attncore-flash", "attncore-naive"):
        meth = "flash" if method == "attncore-flash" else "naive"
        out, lse = attncore.attention(q, k, v, causal=case.causal, return_lse=True)
        return lambda: attncore.attention_backward(q, k, v, out, lse, dout, causal=case.causal,
                                                   method=meth)
    if method == "numpy":  # the materialised gradients, NumPy's BLAS
        out, lse = attncore.attention(q, k, v, causal=case.causal, return_lse=True)
        return lambda: attncore.reference.attention_backward(q, k, v, out, lse, dout,
                                                             causal=case.causal)
    if method == "torch":
        if not torch_available():
            return None
        import torch
        import torch.nn.functional as F

        tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=case.causal)
        tdo = torch.from_numpy(dout)

        def run():
            tq.grad = tk.grad = tv.grad = None
            out.backward(tdo, retain_graph=True)
            return tq.grad

        return run
    return None


def runner(method: str, case: Case, inputs):
    """A no-argument callable for one method on one case, or None to skip."""
    q, k, v = inputs
    kw = {"causal": case.causal, "window": case.window}
    if case.regime == "backward":
        return _backward_runner(method, case, q, k, v)
    if method == "attncore-flash":
        return lambda: attncore.attention(q, k, v, **kw)
    if method == "attncore-naive":
        if case.regime == "decode":  # one row: nothing to materialise that teaches
            return None
        return lambda: attncore.attention(q, k, v, method="naive", **kw)
    if case.window:  # the peers have no banded kernel: only attncore is timed
        return None
    if method == "numpy":
        return lambda: numpy_attention(q, k, v, case.causal)
    if method == "torch":
        return _torch_runner(q, k, v, case.causal) if torch_available() else None
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def fits(method: str, case: Case) -> bool:
    """Whether a materialising method's table fits comfortably in memory."""
    if method not in ("attncore-naive", "numpy"):
        return True
    from attncore._validate import memory_limit

    return 3 * case.n * case.m * case.itemsize < memory_limit() // 2


# ---- timing, threads, roofs -----------------------------------------------------


def best_time(fn, min_time: float = 0.3, max_reps: int = 20, min_reps: int = 2) -> float:
    """The fastest of repeated calls, after one warm-up, repeated until
    min_time has passed (at least min_reps, at most max_reps calls)."""
    fn()
    best, spent, reps = float("inf"), 0.0, 0
    while reps < min_reps or (spent < min_time and reps < max_reps):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


class threads:
    """Run every peer on the same number of threads: attncore, NumPy's BLAS
    (threadpoolctl) and torch."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        self._before = attncore.get_num_threads()
        attncore.set_num_threads(self.n)
        self._limits = None
        try:
            from threadpoolctl import threadpool_limits

            self._limits = threadpool_limits(self.n, user_api="blas")
        except ImportError:
            pass
        if torch_available():
            import torch

            self._torch_before = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        attncore.set_num_threads(self._before)
        if self._limits is not None:
            self._limits.restore_original_limits()
        if torch_available():
            import torch

            torch.set_num_threads(self._torch_before)


def blas_info() -> dict:
    """Which BLAS NumPy runs and which kernel it chose (OpenBLAS's 'architecture')."""
    info = {"openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}
    try:
        from threadpoolctl import threadpool_info

        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                info.update(library=lib.get("internal_api"), version=lib.get("version"),
                            kernel=lib.get("architecture"), threads=lib.get("num_threads"))
                break
    except ImportError:
        info["library"] = "unknown (threadpoolctl not installed)"
    return info


def measure_roofs(nthreads: int, quick: bool = False) -> dict:
    """The machine's roofs, measured now with the kernels' own instructions."""
    with threads(nthreads):
        iters = 10_000_000  # ~0.1 s a call on a current core
        flops = _core.probe_fma(iters, nthreads)
        best = best_time(lambda: _core.probe_fma(iters, nthreads), min_time=0.3, max_reps=8,
                         min_reps=3)
        fma = flops / best / 1e9
        buf = np.ones((64 if quick else 256) * 2**20 // 4, np.float32)  # far beyond the caches
        nbytes = buf.nbytes
        read = nbytes / best_time(lambda: _core.probe_read(buf, nthreads), min_time=0.3) / 1e9
        del buf
        a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
        sgemm = 2 * 2048**3 / best_time(lambda: a @ a, min_time=0.3) / 1e9
        quiesce_blas()
    return {"fma_gflops": fma, "read_gbs": read, "sgemm_gflops": sgemm, "isa": _core.isa(),
            "threads": nthreads}


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {"attncore": attncore.__version__, "numpy": np.__version__}
    if torch_available():
        import torch

        versions["torch"] = torch.__version__
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "versions": versions, "blas": blas_info()}


# ---- a run ----------------------------------------------------------------------


@dataclass
class Row:
    method: str
    regime: str
    n: int
    m: int
    d: int
    causal: bool
    dtype: str
    B: int
    H: int
    seconds: float
    flops: int
    bytes: int
    peak_bytes: int | None = None
    Hkv: int = 0
    kv_dtype: str = ""
    window: int | None = None
    gflops: float = field(init=False)
    gbs: float = field(init=False)  # compulsory traffic per second
    intensity: float = field(init=False)

    def __post_init__(self):
        self.gflops = self.flops / self.seconds / 1e9
        self.gbs = self.bytes / self.seconds / 1e9
        self.intensity = self.flops / self.bytes


def run_case(case: Case, methods=METHODS, seed: int = 0, min_time: float = 0.3,
             min_rounds: int = 3, max_rounds: int = 15) -> list[Row]:
    """Every method on one case, timed in interleaved rounds (one call of
    each method a round, NumPy last) so that a burst of load from elsewhere on
    the machine hits all of them alike; each keeps its fastest call."""
    inputs = make_inputs(case, seed)
    fns = {}
    for method in sorted(methods, key=lambda mt: mt == "numpy"):
        fn = runner(method, case, inputs)
        if fn is not None and fits(method, case):
            fns[method] = fn
    peaks = {}
    for method, fn in fns.items():  # the first call: warm-up and peak memory
        peaks[method] = None if method == "torch" else measure(fn, repeat=0).peak_bytes
    if "numpy" in fns:
        quiesce_blas()
    best = dict.fromkeys(fns, float("inf"))
    spent = dict.fromkeys(fns, 0.0)
    rounds = 0
    while rounds < min_rounds or (rounds < max_rounds and min(spent.values()) < min_time):
        for method, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            best[method], spent[method] = min(best[method], dt), spent[method] + dt
        if "numpy" in fns:
            quiesce_blas()
        rounds += 1
    return [Row(method, case.regime, case.n, case.m, case.d, case.causal, case.dtype, case.B,
                case.H, best[method], case.flops, case.bytes(method), peaks[method], case.Hkv,
                case.kv, case.window)
            for method in fns]


def run(cases, methods=METHODS, nthreads: int | None = None, progress: bool = True,
        quick: bool = False) -> dict:
    """Measure the roofs, then every case with every method; a JSON-able dict."""
    nthreads = nthreads or attncore.get_num_threads()
    roofs = measure_roofs(nthreads, quick=quick)
    timing = dict(min_time=0.05, min_rounds=2) if quick else dict(min_time=0.3, min_rounds=3)
    rows: list[Row] = []
    with threads(nthreads):
        if progress:
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("benchmarking", total=len(cases))
                for case in cases:
                    bar.update(task, description=case.label())
                    rows += run_case(case, methods, **timing)
                    bar.advance(task)
        else:
            for case in cases:
                rows += run_case(case, methods, **timing)
    # The roofs again at the end, keeping the better of the two: a probe that
    # ran while something else held a core would put every point above it.
    again = measure_roofs(nthreads, quick=quick)
    for key in ("fma_gflops", "read_gbs", "sgemm_gflops"):
        roofs[key] = max(roofs[key], again[key])
    return {"machine": machine(), "roofs": roofs, "rows": [asdict(r) for r in rows]}


def save(result: dict, path) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def load(path) -> dict:
    """A saved run, or pytest-benchmark's JSON (rows rebuilt from extra_info)."""
    with open(path) as f:
        data = json.load(f)
    if "rows" in data:
        return data
    if "benchmarks" not in data:
        raise ValueError(f"{path}: neither an attncore bench result nor pytest-benchmark JSON")
    rows, roofs = [], {}
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        if "roof" in info:
            roofs[info["roof"]] = info["value"]
            continue
        if "method" not in info:
            continue
        r = {k: info[k] for k in ("method", "regime", "n", "m", "d", "causal", "dtype", "B", "H",
                                  "flops", "bytes")}
        r["Hkv"] = info.get("Hkv", r["H"])
        r["kv_dtype"] = info.get("kv_dtype", r["dtype"])
        r["window"] = info.get("window")
        r["seconds"] = b["stats"]["min"]
        r["peak_bytes"] = info.get("peak_bytes")
        r["gflops"] = r["flops"] / r["seconds"] / 1e9
        r["gbs"] = r["bytes"] / r["seconds"] / 1e9
        r["intensity"] = r["flops"] / r["bytes"]
        rows.append(r)
    info = data.get("machine_info", {})
    cpu = info.get("cpu", {}).get("brand_raw") if isinstance(info.get("cpu"), dict) else None
    return {"machine": {"cpu": cpu or info.get("processor")}, "roofs": roofs, "rows": rows}


# ---- the table ------------------------------------------------------------------


def _case_key(r) -> tuple:
    return (r["regime"], r["n"], r["m"], r["d"], r["H"], r.get("Hkv", r["H"]), r["causal"],
            r.get("window"), r["dtype"], r.get("kv_dtype", r["dtype"]))


def table_rows(result: dict) -> list[list[str]]:
    """One line per (case, method): time, GFLOP/s, GB/s, % of the regime's
    roof (FMA for prefill, streaming read for decode), speed-ups, memory."""
    from attncore._measure import human_bytes

    rows = result["rows"]
    roofs = result["roofs"]
    by_case = {}
    for r in rows:
        by_case.setdefault(_case_key(r), {})[r["method"]] = r
    out = []
    for key, group in by_case.items():
        for method, r in group.items():
            ratio = lambda peer: (f"{group[peer]['seconds'] / r['seconds']:.2f}×"  # noqa: E731
                                  if peer in group and peer != method else "—")
            if r["regime"] == "decode":
                roof, got = roofs.get("read_gbs"), r["gbs"]
            else:
                roof, got = roofs.get("fma_gflops"), r["gflops"]
            mask = ("causal" if r["causal"] else "full") + (f" w={r['window']}" if r.get("window") else "")
            kv = r.get("kv_dtype", r["dtype"])
            out.append([r["regime"], str(r["n"]), str(r["m"]), str(r["d"]),
                        f"{r['H']}/{r.get('Hkv', r['H'])}", mask,
                        r["dtype"] if kv == r["dtype"] else f"{r['dtype']}/{kv}", method,
                        f"{r['seconds'] * 1e3:.2f}", f"{r['gflops']:.1f}", f"{r['gbs']:.1f}",
                        f"{100 * got / roof:.0f}%" if roof else "—",
                        ratio("numpy"), ratio("torch"),
                        human_bytes(r["peak_bytes"]) if r.get("peak_bytes") is not None else "—"])
    return out


TABLE_COLUMNS = ["regime", "n", "m", "d", "H/Hkv", "mask", "dtype q/kv", "method", "time (ms)",
                 "GFLOP/s", "GB/s", "% roof", "vs NumPy", "vs torch", "peak memory"]


def slopes(result: dict, n_min: int = 1024) -> dict:
    """Log-log slope of time vs n (least squares, n >= n_min) per method and
    mask, at the smallest d: 2 is the n² the algorithm costs."""
    rows = [r for r in result["rows"] if r["regime"] == "prefill" and r["n"] >= n_min]
    if not rows:
        return {}
    d = min(r["d"] for r in rows)
    out = {}
    for causal in (False, True):
        for method, (ns, ts) in _series(rows, d, causal, "seconds").items():
            if len(ns) >= 2:
                slope = np.polyfit(np.log(ns), np.log(ts), 1)[0]
                out[f"{method}{' causal' if causal else ''}"] = float(slope)
    return out


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    roofs = result["roofs"]
    title = "attncore bench (% roof: of the FMA roof for prefill, of the read roof for decode)"
    if roofs:
        title += (f" — roofs: FMA {roofs.get('fma_gflops', 0):.0f} GFLOP/s, read "
                  f"{roofs.get('read_gbs', 0):.1f} GB/s, NumPy sgemm "
                  f"{roofs.get('sgemm_gflops', 0):.0f} GFLOP/s")
    t = Table(title=title, title_justify="left")
    for c in TABLE_COLUMNS:
        t.add_column(c, justify="right")
    for r in table_rows(result):
        t.add_row(*r)
    con = Console(width=None if Console().is_terminal else 200)
    con.print(t)
    fit = slopes(result)
    if fit:
        con.print("time ∝ n^slope for n ≥ 1024: " + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()))
    m = result.get("machine", {})
    if m:
        con.print(f"machine: {m.get('cpu')}, {roofs.get('threads')} threads, isa "
                  f"{roofs.get('isa')}; BLAS: {m.get('blas')}")


def markdown_report(result: dict) -> str:
    """The table as Markdown, with the roofs, the machine and the n² fit."""
    roofs, m = result["roofs"], result.get("machine", {})
    blas = m.get("blas", {})
    lines = [f"Machine: {m.get('cpu')}, {roofs.get('threads')} threads, attncore ISA "
             f"{roofs.get('isa')}; NumPy BLAS {blas.get('library')} {blas.get('version')} "
             f"(kernel {blas.get('kernel')}); versions {m.get('versions')}.",
             f"Roofs measured in the same run: FMA {roofs.get('fma_gflops', 0):.0f} GFLOP/s, "
             f"streaming read {roofs.get('read_gbs', 0):.1f} GB/s, NumPy sgemm "
             f"{roofs.get('sgemm_gflops', 0):.0f} GFLOP/s.", ""]
    lines += ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(result)]
    fit = slopes(result)
    if fit:
        lines += ["", "Log-log slope of time vs n for n ≥ 1024: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()) + "."]
    return "\n".join(lines)


# ---- the figures ----------------------------------------------------------------

_STYLE = {"attncore-flash": ("C0", "o"), "attncore-naive": ("C1", "s"), "numpy": ("C2", "^"),
          "torch": ("C3", "D")}


def _series(rows, d, causal, y):
    out = {}
    for r in sorted(rows, key=lambda r: r["n"]):
        if r["regime"] == "prefill" and r["d"] == d and r["causal"] == causal and r[y] is not None:
            out.setdefault(r["method"], ([], []))
            out[r["method"]][0].append(r["n"])
            out[r["method"]][1].append(r[y])
    return out


def _legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**({"fontsize": 8} | kw))
    else:
        ax.text(0.5, 0.5, "no data in this run", ha="center", transform=ax.transAxes)


def figures(result: dict, outdir) -> list[str]:
    """time vs n (log-log, n² guide), GFLOP/s vs n, peak memory vs n, decode GB/s
    vs m, window time vs n (when the run has them), roofline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    rows, roofs, paths = result["rows"], result["roofs"], []
    d = 64 if any(r["d"] == 64 for r in rows) else (rows[0]["d"] if rows else 64)

    def save(fig, name):
        path = os.path.join(outdir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    # 1. time vs n, with an n² guide through the largest flash point
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        series = _series(rows, d, causal, "seconds")
        for method, (ns, ts) in series.items():
            c, mk = _STYLE.get(method, ("k", "x"))
            ax.loglog(ns, ts, marker=mk, color=c, label=method)
        ref = series.get("attncore-flash")
        if ref and len(ref[0]) > 1:
            n0, t0 = ref[0][-1], ref[1][-1]
            ns = np.array(ref[0], float)
            ax.loglog(ns, t0 * (ns / n0) ** 2, "k--", lw=1, label="∝ n² guide")
        ax.set(title=f"time vs n (d={d}, {'causal' if causal else 'full'})", xlabel="n",
               ylabel="seconds")
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    save(fig, "time_vs_n.png")

    # 2. GFLOP/s vs n, under the measured roofs
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for causal, ls in ((False, "-"), (True, ":")):
        for method, (ns, gs) in _series(rows, d, causal, "gflops").items():
            c, mk = _STYLE.get(method, ("k", "x"))
            ax.semilogx(ns, gs, ls, marker=mk, color=c,
                        label=f"{method}{' causal' if causal else ''}")
    if roofs.get("fma_gflops"):
        ax.axhline(roofs["fma_gflops"], color="k", lw=1, label="FMA roof (probe)")
    if roofs.get("sgemm_gflops"):
        ax.axhline(roofs["sgemm_gflops"], color="gray", lw=1, ls="--", label="NumPy sgemm")
    ax.set(title=f"throughput vs n (prefill, d={d})", xlabel="n", ylabel="GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, fontsize=7, ncol=2)
    save(fig, "gflops_vs_n.png")

    # 3. peak memory vs n: the materialised table grows as n², flash as n
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method, (ns, ps) in _series(rows, d, False, "peak_bytes").items():
        c, mk = _STYLE.get(method, ("k", "x"))
        ax.loglog(ns, np.array(ps) / 2**20, marker=mk, color=c, label=method)
    ax.set(title=f"peak memory beyond the inputs vs n (d={d}, H={rows[0]['H'] if rows else '?'})",
           xlabel="n", ylabel="MiB")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    save(fig, "memory_vs_n.png")

    # 4. decode: GB/s of K/V read vs m, under the read roof
    dec = [r for r in rows if r["regime"] == "decode"]
    if dec:
        fig, ax = plt.subplots(figsize=(7.5, 4.4))
        groups = sorted({(r["method"], r.get("Hkv", r["H"]), r.get("kv_dtype", r["dtype"]))
                         for r in dec}, key=str)
        for method, hkv, kv in groups:
            pts = sorted((r["m"], r["gbs"]) for r in dec if r["method"] == method
                         and r.get("Hkv", r["H"]) == hkv and r.get("kv_dtype", r["dtype"]) == kv)
            c, mk = _STYLE.get(method, ("k", "x"))
            ls = "-" if kv == "float32" else "--"
            ax.semilogx(*zip(*pts), ls, marker=mk, color=c, alpha=1 if hkv == dec[0]["H"] else 0.6,
                        label=f"{method} H/Hkv={dec[0]['H']}/{hkv} {kv}")
        if roofs.get("read_gbs"):
            ax.axhline(roofs["read_gbs"], color="k", lw=1, label="read roof (probe)")
            ax.set_ylim(0, 1.15 * max([roofs["read_gbs"]] + [r["gbs"] for r in dec]))
        ax.set(title="decode (n=1): bandwidth of the K/V read", xlabel="m (cached keys)",
               ylabel="GB/s")
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax, fontsize=6, ncol=2)
        save(fig, "decode_gbs_vs_m.png")

    # 5. sliding windows: time vs n, the band's n·w against causal's n²
    win = [r for r in rows if r["regime"] == "window"]
    if win:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for w in sorted({r.get("window") or 0 for r in win}):
            pts = sorted((r["n"], r["seconds"]) for r in win
                         if (r.get("window") or 0) == w and r["method"] == "attncore-flash")
            if pts:
                ax.loglog(*zip(*pts), marker="o", label=f"window {w}" if w else "full causal")
        ax.set(title="attncore-flash under a causal sliding window", xlabel="n", ylabel="seconds")
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
        save(fig, "window_time_vs_n.png")

    # 6. roofline: each point at its arithmetic intensity
    fig, ax = plt.subplots(figsize=(7, 4.6))
    peak, bw = roofs.get("fma_gflops"), roofs.get("read_gbs")
    if peak and bw:
        ai = np.logspace(-1.5, 3.5, 200)
        ax.loglog(ai, np.minimum(peak, ai * bw), "k-", lw=1.5, label="roof: min(FMA, AI × read BW)")
    for method in {r["method"] for r in rows}:
        pts = [(r["intensity"], r["gflops"]) for r in rows if r["method"] == method]
        c, mk = _STYLE.get(method, ("k", "x"))
        ax.scatter(*zip(*pts), color=c, marker=mk, label=method, alpha=0.8)
    ax.text(0.02, 0.02, "decode points sit on the slope (left), prefill under the flat roof",
            transform=ax.transAxes, fontsize=7)
    ax.set(title="roofline (compulsory traffic)", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    save(fig, "roofline.png")
    return paths
