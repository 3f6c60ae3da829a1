"""The figures of a run: time vs n (log-log, n² guide), GFLOP/s vs n, peak
memory vs n, decode GB/s vs m, window time vs n, and a roofline."""

from __future__ import annotations

import os

import numpy as np

from attncore.bench.report import _series


_STYLE = {"attncore-flash": ("C0", "o"), "attncore-naive": ("C1", "s"), "numpy": ("C2", "^"),
          "torch": ("C3", "D")}


def _legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**({"fontsize": 8} | kw))
    else:
        ax.text(0.5, 0.5, "no data in this run", ha="center", transform=ax.transAxes)


def _time_vs_n(plt, rows, roofs, d):
    """Time vs n, with an n² guide through the largest flash point."""
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
    return fig


def _gflops_vs_n(plt, rows, roofs, d):
    """GFLOP/s vs n, under the measured roofs."""
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
    return fig


def _memory_vs_n(plt, rows, roofs, d):
    """Peak memory vs n: the materialised table grows as n², flash as n."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method, (ns, ps) in _series(rows, d, False, "peak_bytes").items():
        c, mk = _STYLE.get(method, ("k", "x"))
        ax.loglog(ns, np.array(ps) / 2**20, marker=mk, color=c, label=method)
    ax.set(title=f"peak memory beyond the inputs vs n (d={d}, H={rows[0]['H'] if rows else '?'})",
           xlabel="n", ylabel="MiB")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    return fig


def _decode_gbs_vs_m(plt, rows, roofs, d):
    """Decode: GB/s of K/V read vs m, under the read roof (None without decode rows)."""
    dec = [r for r in rows if r["regime"] == "decode"]
    if not dec:
        return None
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
    return fig


def _window_time_vs_n(plt, rows, roofs, d):
    """Sliding windows: time vs n, the band's n·w against causal's n² (None without them)."""
    win = [r for r in rows if r["regime"] == "window"]
    if not win:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for w in sorted({r.get("window") or 0 for r in win}):
        pts = sorted((r["n"], r["seconds"]) for r in win
                     if (r.get("window") or 0) == w and r["method"] == "attncore-flash")
        if pts:
            ax.loglog(*zip(*pts), marker="o", label=f"window {w}" if w else "full causal")
    ax.set(title="attncore-flash under a causal sliding window", xlabel="n", ylabel="seconds")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    return fig


def _roofline(plt, rows, roofs, d):
    """The roofline: each point at its arithmetic intensity."""
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
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
