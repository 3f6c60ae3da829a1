"""The figures of a run: time vs n (log-log, n² guide), GFLOP/s vs n, peak
memory vs n, decode GB/s vs m, window time vs n, and a roofline.

One visual rule throughout: colour and marker say the method, line style
says the dtype (or the mask), and every legend sits outside the data."""

from __future__ import annotations

import os

import numpy as np

from attncore.bench.report import _series


_STYLE = {"attncore-flash": ("C0", "o"), "attncore-naive": ("C1", "s"), "numpy": ("C2", "^"),
          "torch": ("C3", "D")}
_DTYPE_LINE = {"float32": "-", "float16": "--", "bfloat16": ":", "float64": "-.",
               "int8": (0, (5, 1, 1, 1, 1, 1))}
# and the marker's fill, which tells the dtypes apart where a run has one m (no line)
_DTYPE_FILL = {"float32": "full", "float16": "none", "bfloat16": "left", "float64": "bottom",
               "int8": "right"}


def _legend(ax, handles=None, **kw):
    """The legend to the right of the axes, outside the data."""
    if handles or ax.get_legend_handles_labels()[0]:
        ax.legend(**({"handles": handles} if handles else {}),
                  **({"fontsize": 8, "loc": "upper left", "bbox_to_anchor": (1.02, 1),
                      "borderaxespad": 0} | kw))
    else:
        ax.text(0.5, 0.5, "no data in this run", ha="center", transform=ax.transAxes)


def _n_ticks(ax, ns):
    """The measured n as the x ticks, written out, and no minor labels (on a
    log axis they collide: 3×10²4×10²)."""
    from matplotlib import ticker

    ns = sorted(set(ns))
    if ns:
        ax.set_xticks(ns)
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(
            lambda x, _: f"{x / 1024:g}k" if x >= 1024 and x % 1024 == 0 else f"{x:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _time_vs_n(plt, rows, roofs, d):
    """Time vs n, with an n² guide through the largest flash point."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
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
        _n_ticks(ax, [n for ns, _ in series.values() for n in ns])
    _legend(axes[-1])
    return fig


def _gflops_vs_n(plt, rows, roofs, d):
    """GFLOP/s vs n, under the measured roofs."""
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    all_ns = []
    for causal, ls in ((False, "-"), (True, ":")):
        for method, (ns, gs) in _series(rows, d, causal, "gflops").items():
            c, mk = _STYLE.get(method, ("k", "x"))
            ax.semilogx(ns, gs, ls, marker=mk, color=c,
                        label=f"{method}{' causal' if causal else ''}")
            all_ns += ns
    if roofs.get("fma_gflops"):
        ax.axhline(roofs["fma_gflops"], color="k", lw=1, label="FMA roof (probe)")
    if roofs.get("sgemm_gflops"):
        ax.axhline(roofs["sgemm_gflops"], color="gray", lw=1, ls="--", label="NumPy sgemm")
    ax.set(title=f"throughput vs n (prefill, d={d})", xlabel="n", ylabel="GFLOP/s")
    ax.set_ylim(0, 1.1 * max([roofs.get("fma_gflops") or 0, roofs.get("sgemm_gflops") or 0]
                             + [r["gflops"] for r in rows if r["regime"] == "prefill"] + [1]))
    ax.grid(True, which="both", alpha=0.3)
    _n_ticks(ax, all_ns)
    _legend(ax, fontsize=7)
    return fig


def _memory_vs_n(plt, rows, roofs, d):
    """Peak memory vs n: the materialised table grows as n², flash as n."""
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    series = _series(rows, d, False, "peak_bytes")
    for method, (ns, ps) in series.items():
        c, mk = _STYLE.get(method, ("k", "x"))
        ax.loglog(ns, np.array(ps) / 2**20, marker=mk, color=c, label=method)
    ax.set(title=f"peak memory beyond the inputs vs n (d={d}, H={rows[0]['H'] if rows else '?'})",
           xlabel="n", ylabel="MiB")
    ax.grid(True, which="both", alpha=0.3)
    _n_ticks(ax, [n for ns, _ in series.values() for n in ns])
    _legend(ax)
    return fig


def _decode_gbs_vs_m(plt, rows, roofs, d):
    """Decode: GB/s of K/V read vs m, under the read roof, one panel per head
    layout (MHA, GQA); colour = method, line style = the cache's dtype (None
    without decode rows)."""
    from matplotlib.lines import Line2D

    dec = [r for r in rows if r["regime"] == "decode"]
    if not dec:
        return None
    layouts = sorted({(r["H"], r.get("Hkv", r["H"])) for r in dec}, key=lambda x: -x[1])
    fig, axes = plt.subplots(1, len(layouts), figsize=(5 * len(layouts) + 2.5, 4.4), sharey=True,
                             squeeze=False)
    top = 1.15 * max([roofs.get("read_gbs") or 0] + [r["gbs"] for r in dec])
    methods, dtypes = set(), set()
    for ax, (h, hkv) in zip(axes[0], layouts):
        here = [r for r in dec if (r["H"], r.get("Hkv", r["H"])) == (h, hkv)]
        for method, kv in sorted({(r["method"], r.get("kv_dtype", r["dtype"])) for r in here}):
            pts = sorted((r["m"], r["gbs"]) for r in here if r["method"] == method
                         and r.get("kv_dtype", r["dtype"]) == kv)
            c, mk = _STYLE.get(method, ("k", "x"))
            ax.semilogx(*zip(*pts), _DTYPE_LINE.get(kv, "-."), marker=mk, color=c, markersize=8,
                        fillstyle=_DTYPE_FILL.get(kv, "full"))
            methods.add(method)
            dtypes.add(kv)
        if roofs.get("read_gbs"):
            ax.axhline(roofs["read_gbs"], color="k", lw=1)
        ax.set_ylim(0, top)
        kind = "MHA" if h == hkv else f"GQA {h}/{hkv}"
        ax.set(title=f"decode (n=1), {kind}: K/V read", xlabel="m (cached keys)")
        ax.grid(True, which="both", alpha=0.3)
        _n_ticks(ax, [r["m"] for r in here])
    axes[0][0].set_ylabel("GB/s")
    handles = [Line2D([], [], color=c, marker=mk, label=m)
               for m in sorted(methods) for c, mk in [_STYLE.get(m, ("k", "x"))]]
    handles += [Line2D([], [], color="gray", ls=_DTYPE_LINE.get(kv, "-."), marker="o",
                       fillstyle=_DTYPE_FILL.get(kv, "full"), label=f"{kv} cache")
                for kv in sorted(dtypes)]
    if roofs.get("read_gbs"):
        handles.append(Line2D([], [], color="k", lw=1, label="read roof (probe)"))
    _legend(axes[0][-1], handles=handles)
    return fig


def _window_time_vs_n(plt, rows, roofs, d):
    """Sliding windows: time vs n, the band's n·w against causal's n² (None without them)."""
    win = [r for r in rows if r["regime"] == "window"]
    if not win:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    for i, w in enumerate(sorted({r.get("window") or 0 for r in win})):
        pts = sorted((r["n"], r["seconds"]) for r in win
                     if (r.get("window") or 0) == w and r["method"] == "attncore-flash")
        if pts:
            ax.loglog(*zip(*pts), ("-", "--", ":", "-.")[i % 4], marker="o", color="C0",
                      label=f"window {w}" if w else "full causal")
    ax.set(title="attncore-flash under a causal sliding window", xlabel="n", ylabel="seconds")
    ax.grid(True, which="both", alpha=0.3)
    _n_ticks(ax, [r["n"] for r in win])
    _legend(ax)
    return fig


def _roofline(plt, rows, roofs, d):
    """The roofline: each point at its arithmetic intensity."""
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    peak, bw = roofs.get("fma_gflops"), roofs.get("read_gbs")
    if peak and bw:
        ai = np.logspace(-1.5, 3.5, 200)
        ax.loglog(ai, np.minimum(peak, ai * bw), "k-", lw=1.5,
                  label="roof: min(FMA, AI × read BW)")
        if roofs.get("bf16dot_gflops"):  # wider arithmetic: a higher compute roof
            ax.loglog(ai, np.minimum(roofs["bf16dot_gflops"], ai * bw), "k--", lw=1,
                      label="bfloat16 dot-product roof (probe)")
    for method in sorted({r["method"] for r in rows}):
        pts = [(r["intensity"], r["gflops"]) for r in rows if r["method"] == method]
        c, mk = _STYLE.get(method, ("k", "x"))
        ax.scatter(*zip(*pts), color=c, marker=mk, label=method, alpha=0.8)
    ax.text(0.02, 0.02, "decode points sit on the slope (left), prefill under the flat roof",
            transform=ax.transAxes, fontsize=7)
    ax.set(title="roofline (compulsory traffic)", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    return fig


_FIGURES = (("time_vs_n.png", _time_vs_n), ("gflops_vs_n.png", _gflops_vs_n),
            ("memory_vs_n.png", _memory_vs_n), ("decode_gbs_vs_m.png", _decode_gbs_vs_m),
            ("window_time_vs_n.png", _window_time_vs_n), ("roofline.png", _roofline))


def figures(result: dict, outdir) -> list[str]:
    """time vs n (log-log, n² guide), GFLOP/s vs n, peak memory vs n, decode GB/s
    vs m, window time vs n (when the run has them), roofline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    rows, roofs, paths = result["rows"], result["roofs"], []
    d = 64 if any(r["d"] == 64 for r in rows) else (rows[0]["d"] if rows else 64)
    for name, draw in _FIGURES:
        fig = draw(plt, rows, roofs, d)
        if fig is None:
            continue
        path = os.path.join(outdir, name)
        fig.savefig(path, dpi=110, bbox_inches="tight")  # the outside legends included
        plt.close(fig)
        paths.append(path)
    return paths
