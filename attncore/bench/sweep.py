"""A benchmark run: every case with every method on the same threads, between
two measurements of the roofs; the result is a JSON-able dict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import attncore
from attncore.bench.cases import Case, make_inputs
from attncore.bench.peers import METHODS, fits, runner
from attncore.bench.roofs import machine, measure_roofs
from attncore.bench.timing import peak_bytes, quiesce_blas, rounds_of, spread, threads


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
    rounds: int = 0
    spread: float | None = None  # the median round's time over the best, minus 1
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
    the machine hits all of them alike; each keeps its fastest call, and how
    far its median round sat above it."""
    inputs = make_inputs(case, seed)
    fns = {}
    for method in sorted(methods, key=lambda mt: mt == "numpy"):
        fn = runner(method, case, inputs)
        if fn is not None and fits(method, case):
            fns[method] = fn
    peaks = {}
    for method, fn in fns.items():  # the first call: warm-up and peak memory
        peaks[method] = None if method == "torch" else peak_bytes(fn)[1]
    if "numpy" in fns:
        quiesce_blas()
    times = rounds_of(fns, min_time=min_time, min_rounds=min_rounds, max_rounds=max_rounds,
                      between=quiesce_blas if "numpy" in fns else None)
    return [Row(method, case.regime, case.n, case.m, case.d, case.causal, case.dtype, case.B,
                case.H, min(times[method]), case.flops, case.bytes(method), peaks[method],
                case.Hkv, case.kv, case.window, len(times[method]), spread(times[method]))
            for method in fns]


# Rounds a case is timed for: at least min_rounds, then until each method has run
# min_time seconds or max_rounds rounds.  A round with NumPy in it ends with a
# quarter-second pause for its BLAS threads (quiesce_blas), so max_rounds is what
# holds the default run to about two minutes.
TIMING = {"quick": dict(min_time=0.05, min_rounds=2, max_rounds=15),
          "default": dict(min_time=0.2, min_rounds=3, max_rounds=7),
          "full": dict(min_time=0.3, min_rounds=3, max_rounds=15)}


def run(cases, methods=METHODS, nthreads: int | None = None, progress: bool = True,
        quick: bool = False, full: bool = False) -> dict:
    """Measure the roofs, then every case with every method; a JSON-able dict."""
    nthreads = nthreads or attncore.get_num_threads()
    roofs = measure_roofs(nthreads, quick=quick)
    timing = TIMING["quick" if quick else "full" if full else "default"]
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
    for key in ("fma_gflops", "read_gbs", "sgemm_gflops", "bf16dot_gflops"):
        if again.get(key) is not None:
            roofs[key] = max(roofs.get(key) or 0, again[key])
    return {"machine": machine(), "roofs": roofs, "rows": [asdict(r) for r in rows]}
