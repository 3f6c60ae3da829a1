"""The ``attncore`` command.

    attncore info                  what this build is and runs
    attncore check [--sizes ...]   naive and blockwise vs the reference, per n:
                                   max error, time, peak memory
    attncore bench [--quick|--full] [--isa native|all|avx2|...] [--wide]
                                   the benchmark sweep against NumPy and torch (about two
                                   minutes), attncore and torch held to one instruction
                                   set, under the machine's measured roofs; a table that
                                   fits 100 columns, JSON and figures in a folder of its own
    attncore bench --distributed [--scheduler ADDRESS]
                                   attncore.distributed on a Dask cluster: scaling, bytes
                                   moved against the plan, decode steps, simulated clusters
    attncore tour [--markdown F] [--markdown-zh F]
                                   every teaching experiment: tables, figures, and the
                                   tutorial in English and Chinese
    attncore notebook [ARGS...]    the live notebooks in JupyterLab (widgets on the kernels);
                                   ARGS go to JupyterLab
    attncore plot FILE.json        the same figures from a saved run or from
                                   pytest-benchmark's JSON (pytest bench/ --benchmark-json),
                                   written beside FILE.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import attncore
from attncore.bench.report import human_bytes
from attncore.bench.timing import measure, quiesce_blas


def _table(title: str, columns: list[str], rows: list[list]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    Console().print(t)


def cmd_info(args) -> int:
    info = attncore.info()
    _table("attncore", ["key", "value"], [[k, v] for k, v in info.items()])
    return 0


def cmd_check(args) -> int:
    rng = np.random.default_rng(args.seed)
    dtype = np.dtype(args.dtype)
    rows = []
    worst = 0.0
    for n in args.sizes:
        shape = (args.heads, n, args.d)
        q, k, v = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
        measured = {
            method: measure(attncore.attention, q, k, v, causal=args.causal, method=method,
                            repeat=args.repeat)
            for method in ("naive", "flash")
        }
        # The reference runs after the timings, and then NumPy's BLAS threads
        # are given time to stop spinning before the next n is timed.
        ref = None
        if n <= args.reference_max:
            ref = attncore.reference.attention(
                q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=args.causal
            )
            quiesce_blas()
        flops = 4 * args.heads * n * n * args.d / (2 if args.causal else 1)
        for method, m in measured.items():
            err = float(np.max(np.abs(m.result - ref))) if ref is not None else None
            if err is not None:
                worst = max(worst, err)
            rows.append([n, method, "—" if err is None else f"{err:.2e}",
                         f"{m.seconds * 1e3:.2f}", f"{flops / m.seconds / 1e9:.1f}",
                         human_bytes(m.peak_bytes)])
    title = (f"attncore check: heads={args.heads}, d={args.d}, {dtype}, causal={args.causal}, "
             f"isa={attncore.info()['isa']}, threads={attncore.get_num_threads()}")
    _table(title, ["n", "method", "max |err| vs f64 ref", "time (ms)", "GFLOP/s", "peak memory"],
           rows)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    if worst > tol:
        print(f"FAILED: max error {worst:.3e} exceeds {tol:g}", file=sys.stderr)
        return 1
    return 0


def _bench_child(args, cases) -> int:
    """One instruction set, measured in this process: the parent started it
    with attncore and torch held to ``args.isa`` (bench/isa.py)."""
    from attncore import _core, bench
    from attncore.bench import isa as held

    if _core.isa() != args.isa:
        print(f"attncore bench: asked for {args.isa} but attncore runs {_core.isa()}",
              file=sys.stderr)
        return 2
    result = bench.run(cases, methods=args.methods, nthreads=args.threads, quick=args.quick,
                       full=args.full, progress=not args.no_progress)
    capability = held.torch_capability() if "torch" in args.methods else None
    result["isa"] = {"attncore": _core.isa(), "torch_capability": capability,
                     "torch_held": held.held(args.isa, capability),
                     "peer_env": {k: os.environ.get(k) for k in held.peer_env(args.isa)}}
    bench.save(result, args.child_json)
    return 0


def _bench_distributed(args) -> int:
    try:
        from attncore.bench import distributed as dbench
    except ImportError as e:
        print(f"attncore bench --distributed: {e}", file=sys.stderr)
        return 2
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("attncore bench --distributed needs Dask: pip install 'attncore[distributed]'",
              file=sys.stderr)
        return 2
    out = _run_folder(args.out, "distributed.json")
    if out is None:
        return 2
    result = dbench.run(scheduler=args.scheduler, workers=args.workers, quick=args.quick,
                        progress=(lambda s: None) if args.no_progress else print)
    dbench.print_report(result)
    os.makedirs(out, exist_ok=True)
    from attncore import bench

    path = os.path.join(out, "distributed.json")
    bench.save(result, path)
    print(f"results: {path}")
    if not args.no_plots:
        print(f"figure: {dbench.figure(result, out)}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(dbench.markdown(result) + "\n")
        print(f"markdown: {args.markdown}")
    return 0


BENCH_ROOT = "attncore-bench"


def _run_folder(given: str | None, what: str = "bench.json") -> str | None:
    """Where one run writes: the --out folder given, which must not hold a
    run already, or a new attncore-bench/<date-time>/ (None: refused)."""
    if given:
        held = [os.path.join(dp, f) for dp, _, fs in os.walk(given) for f in fs if f == what]
        if held:
            print(f"attncore bench: {given} already holds a run ({held[0]}); give another "
                  f"--out, or none for a new {BENCH_ROOT}/<date-time>/", file=sys.stderr)
            return None
        return given
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, i = os.path.join(BENCH_ROOT, stamp), 2
    while os.path.exists(path):
        path, i = os.path.join(BENCH_ROOT, f"{stamp}-{i}"), i + 1
    return path


def cmd_bench(args) -> int:
    import subprocess
    import tempfile

    from attncore import bench
    from attncore.bench import isa as held

    if args.distributed or args.scheduler:
        return _bench_distributed(args)
    mode = "quick" if args.quick else "full" if args.full else "default"
    cases = bench.default_cases(mode)
    if args.sizes:
        cases = [c for c in cases if c.n in set(args.sizes)]
    if args.child_json:
        return _bench_child(args, cases)
    try:
        isas = held.resolve(args.isa)
    except ValueError as e:
        print(f"attncore bench: {e}", file=sys.stderr)
        return 2
    run_dir = _run_folder(args.out)
    if run_dir is None:
        return 2
    print(f"attncore bench: {len(cases)} cases on {', '.join(isas)}; this run's folder: {run_dir}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for isa in isas:  # each in a child: torch reads its ISA settings once, at import
            path = os.path.join(tmp, f"{isa}.json")
            argv = [sys.executable, "-m", "attncore.cli"]
            argv += ["--threads", str(args.threads)] if args.threads else []
            argv += ["bench", "--isa", isa, "--child-json", path, "--methods", *args.methods]
            argv += ["--quick"] if args.quick else ["--full"] if args.full else []
            argv += ["--sizes", *map(str, args.sizes)] if args.sizes else []
            argv += ["--no-progress"] if args.no_progress else []
            # started in the scratch folder, so that a source tree in the
            # current folder cannot stand in for the package being measured
            rc = subprocess.run(argv, env=held.child_path(held.child_env(isa)), cwd=tmp).returncode
            if rc != 0:
                print(f"attncore bench: the {isa} run failed (exit status {rc})", file=sys.stderr)
                return rc
            results[isa] = bench.load(path)
    os.makedirs(run_dir, exist_ok=True)
    markdown = []
    for isa, result in results.items():
        out = run_dir if len(results) == 1 else os.path.join(run_dir, isa)
        os.makedirs(out, exist_ok=True)
        bench.print_table(result, wide=args.wide)
        path = os.path.join(out, "bench.json")
        bench.save(result, path)
        print(f"results: {path}")
        markdown.append(bench.markdown_report(result))
        if not args.no_plots:
            for p in bench.figures(result, out):
                print(f"figure: {p}")
    if len(results) > 1:
        bench.print_summary(results)
        markdown.append(bench.markdown_summary(results))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n\n".join(markdown) + "\n")
        print(f"markdown: {args.markdown}")
    return 0


def cmd_tour(args) -> int:
    from attncore import tour

    tour.run(args.out, markdown=args.markdown, quick=args.quick, markdown_zh=args.markdown_zh)
    if args.markdown:
        print(f"tutorial: {args.markdown}")
    if args.markdown_zh:
        print(f"tutorial (Chinese): {args.markdown_zh}")
    print(f"figures: {args.out}/")
    return 0


def _notebook_dir(given):
    """docs/notebooks of a checkout: the one given, the current directory's, or
    the one beside an editable install's package."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(attncore.__file__)))
    for d in ([given] if given else [os.path.join("docs", "notebooks"),
                                     os.path.join(here, "docs", "notebooks")]):
        if os.path.isdir(d) and any(f.endswith(".ipynb") for f in os.listdir(d)):
            return os.path.abspath(d)
    return None


def cmd_notebook(args) -> int:
    d = _notebook_dir(args.dir)
    if d is None:
        print("attncore notebook: no docs/notebooks found; run it from a checkout of attncore "
              "or give --dir", file=sys.stderr)
        return 2
    extra = list(args.jupyter_args)
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        extra.append("--allow-root")  # JupyterLab refuses root without it
    argv = [sys.executable, "-m", "jupyterlab", d, *extra]
    if args.dry_run:
        print(" ".join(argv))
        return 0
    try:
        import ipywidgets  # noqa: F401
        import jupyterlab  # noqa: F401
    except ImportError:
        print("attncore notebook needs JupyterLab and ipywidgets: pip install 'attncore[notebook]'",
              file=sys.stderr)
        return 2
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover - execv does not return


def cmd_plot(args) -> int:
    from attncore import bench

    result = bench.load(args.file)
    bench.print_table(result, wide=args.wide)
    out = args.out or os.path.dirname(os.path.abspath(args.file))
    for p in bench.figures(result, out):
        print(f"figure: {p}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attncore", description=__doc__.split("\n")[1].strip())
    p.add_argument("--version", action="version", version=attncore.__version__)
    p.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: all)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="what this build is and runs").set_defaults(fn=cmd_info)
    c = sub.add_parser("check", help="naive and blockwise against the NumPy reference")
    c.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096], metavar="N")
    c.add_argument("--d", type=int, default=64, help="head dimension (default 64)")
    c.add_argument("--heads", type=int, default=1)
    c.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    c.add_argument("--causal", action="store_true")
    c.add_argument("--repeat", type=int, default=3, help="timed runs, best kept")
    c.add_argument("--reference-max", type=int, default=4096, metavar="N",
                   help="compare with the reference only up to this n (it is O(n²) and slow)")
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(fn=cmd_check)

    from attncore.bench import METHODS
    from attncore.bench import isa as held_isa

    b = sub.add_parser("bench", help="the benchmark sweep (the main job)")
    size = b.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="a smoke pass: fewer cases, shorter timings (under a minute)")
    size.add_argument("--full", action="store_true",
                      help="the long sweep: n up to 16384, d = 128, m up to 131072")
    b.add_argument("--sizes", type=int, nargs="+", metavar="N", help="only these n")
    b.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    b.add_argument("--out", help="folder for this run's JSON and figures, which must not hold "
                                  "a run already (default: a new attncore-bench/<date-time>/)")
    b.add_argument("--wide", action="store_true",
                   help="the table with every method and column (about 170 columns)")
    b.add_argument("--no-plots", action="store_true")
    b.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--isa", default="native", choices=held_isa.CHOICES,
                   help="the instruction set attncore and torch are held to, each run in a child "
                        "process: native (default: the best this CPU has), all (each it has, "
                        "one table per ISA and a summary), or one by name")
    b.add_argument("--distributed", action="store_true",
                   help="attncore.distributed on a Dask LocalCluster of one-thread workers: "
                        "strong and weak scaling, layouts, bytes moved, decode steps, and the "
                        "plan's predictions for 16 and 64 nodes (needs attncore[distributed])")
    b.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --distributed: the scheduler of a running Dask cluster instead")
    b.add_argument("--workers", type=int, metavar="P",
                   help="with --distributed: LocalCluster workers (default: the cores, up to 4)")
    b.add_argument("--child-json", help=argparse.SUPPRESS)  # a child's run (cmd_bench)
    b.set_defaults(fn=cmd_bench)

    t = sub.add_parser("tour", help="every teaching experiment: tables, figures, a tutorial")
    t.add_argument("--out", default="attncore-tour", help="folder for the figures")
    t.add_argument("--markdown", metavar="FILE", help="also write the guided tutorial")
    t.add_argument("--markdown-zh", metavar="FILE",
                   help="also write the tutorial in Chinese (same run, same numbers)")
    t.add_argument("--quick", action="store_true", help="smaller samples and sizes")
    t.set_defaults(fn=cmd_tour)

    nb = sub.add_parser("notebook", help="open the live notebooks (docs/notebooks) in JupyterLab")
    nb.add_argument("--dir", help="the notebooks' folder (default: docs/notebooks of the checkout)")
    nb.add_argument("--dry-run", action="store_true", help="print the command instead")
    nb.set_defaults(fn=cmd_notebook)

    pl = sub.add_parser("plot", help="figures from a saved run or pytest-benchmark JSON")
    pl.add_argument("file")
    pl.add_argument("--out", help="folder for the figures (default: the JSON's own folder)")
    pl.add_argument("--wide", action="store_true", help="the table with every method and column")
    pl.set_defaults(fn=cmd_plot)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    # `attncore notebook` hands what it does not know to JupyterLab (--port, --allow-root, ...)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "notebook":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.jupyter_args = extra
    if args.threads is not None:
        attncore.set_num_threads(args.threads)
    return args.fn(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
