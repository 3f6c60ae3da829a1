"""The benchmark machinery behind ``attncore bench``, ``attncore plot`` and ``bench/``.

One run measures, side by side and on the same threads: attncore's naive
and blockwise kernels, a NumPy materialised implementation (BLAS matmuls),
and PyTorch's ``scaled_dot_product_attention`` when torch is importable —
together with the machine's own roofs, measured in the same run.

    cases    what is measured: Case (FLOPs, bytes), the default sweeps, inputs
    peers    each method as a callable: attncore, NumPy, torch
    timing   the one timer (best_of, best_time), peak memory (measure), threads
    roofs    the FMA, streaming-read and sgemm roofs; the machine
    isa      holding attncore and torch to one instruction set (--isa)
    sweep    a run: every case with every method (run, run_case)
    report   JSON in and out, the table, Markdown, the n² fit
    figures  the plots of a run

Nothing here is imported by ``import attncore``.
"""

from attncore.bench.cases import Case, default_cases, make_inputs
from attncore.bench.figures import figures
from attncore.bench.peers import METHODS, fits, numpy_attention, runner, torch_available
from attncore.bench.report import (TABLE_COLUMNS, human_bytes, isa_line, load, markdown_report,
                                   markdown_summary, print_summary, print_table, save, slopes,
                                   summary_rows, table_rows)
from attncore.bench.roofs import blas_info, machine, measure_roofs
from attncore.bench.sweep import Row, run, run_case
from attncore.bench.timing import (Measured, best_of, best_time, measure, peak_bytes,
                                   quiesce_blas, threads)

__all__ = ["Case", "default_cases", "make_inputs", "figures", "METHODS", "fits",
           "numpy_attention", "runner", "torch_available", "TABLE_COLUMNS", "human_bytes", "load",
           "markdown_report", "print_table", "save", "slopes", "table_rows", "isa_line",
           "markdown_summary", "print_summary", "summary_rows", "blas_info",
           "machine", "measure_roofs", "Row", "run", "run_case", "Measured", "best_of",
           "best_time", "measure", "peak_bytes", "quiesce_blas", "threads"]
