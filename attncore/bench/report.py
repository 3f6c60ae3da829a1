"""Reading and writing runs, and the table: ``attncore bench``'s printed
table, its Markdown form, and the n² fit."""

from __future__ import annotations

import json

import numpy as np


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


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
    ours = info.get("attncore", {})  # bench/conftest.py's pytest_benchmark_update_machine_info
    machine = {"cpu": ours.get("cpu") or cpu or info.get("processor")}
    if ours:
        machine.update(blas=ours.get("blas", {}), versions=ours.get("versions"))
        # the roofs the suite timed as benchmarks win; the hook's fill in the rest
        roofs = {**ours.get("roofs", {}), **roofs, "isa": ours.get("isa"),
                 "threads": ours.get("threads")}
    return {"machine": machine, "roofs": roofs, "rows": rows}


def _case_key(r) -> tuple:
    return (r["regime"], r["n"], r["m"], r["d"], r["H"], r.get("Hkv", r["H"]), r["causal"],
            r.get("window"), r["dtype"], r.get("kv_dtype", r["dtype"]))


def _mask(r) -> str:
    """A row's mask as the tables show it: full, causal, causal w=256."""
    return ("causal" if r["causal"] else "full") + (f" w={r['window']}" if r.get("window") else "")


def _ms(r) -> str:
    """A time in ms with its spread: how far the median round sat above the best."""
    t = f"{r['seconds'] * 1e3:.2f}"
    return t if r.get("spread") is None else f"{t} +{100 * r['spread']:.0f}%"


def _roof_share(r, roofs) -> str:
    """% of the regime's roof: FMA for prefill (the bfloat16 dot-product roof
    for bfloat16 inputs, where the machine has one), streaming read for decode."""
    roof, got = ((roofs.get("read_gbs"), r["gbs"]) if r["regime"] == "decode"
                 else (roofs.get("fma_gflops"), r["gflops"]))
    if r["regime"] != "decode" and r["dtype"] == "bfloat16" and roofs.get("bf16dot_gflops"):
        roof = roofs["bf16dot_gflops"]
    return f"{100 * got / roof:.0f}%" if roof else "—"


def case_label(r) -> str:
    """A case in a few words: 'prefill 2048 causal', 'decode 32k 32/8 bf16'."""
    short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
             "int8": "i8"}
    kv = r.get("kv_dtype", r["dtype"])
    dt = short.get(r["dtype"], r["dtype"]) + ("" if kv == r["dtype"] else "/" + short.get(kv, kv))
    d = "" if r["d"] == (128 if r["regime"] == "decode" else 64) else f" d{r['d']}"
    if r["regime"] == "decode":
        m = f"{r['m'] // 1024}k" if r["m"] % 1024 == 0 else str(r["m"])
        return f"decode {m} {r['H']}/{r.get('Hkv', r['H'])} {dt}{d}"
    extra = f" w{r['window']}" if r.get("window") else ""
    return f"{r['regime']} {r['n']}{d} {'causal' if r['causal'] else 'full'}{extra}" + (
        "" if dt == "f32" else f" {dt}")


def _by_case(rows) -> dict:
    """The rows of a run grouped by case: {case key: {method: row}}."""
    out: dict = {}
    for r in rows:
        out.setdefault(_case_key(r), {})[r["method"]] = r
    return out


def peer_of(group: dict) -> dict | None:
    """The peer a case's speed is a ratio against: torch, which the run holds
    to attncore's instruction set; NumPy (whose BLAS is not held) only where
    torch is absent."""
    return group.get("torch") or group.get("numpy")


COMPACT_COLUMNS = ["case", "attncore ms", "peer ms", "attncore speed", "% roof"]


def compact_rows(result: dict) -> list[list[str]]:
    """One line per case: attncore's blockwise kernel, its peer (peer_of), how
    many times faster attncore is (peer time ÷ attncore time), and attncore's
    share of the regime's roof.  Times carry their spread."""
    out = []
    for group in _by_case(result["rows"]).values():
        a, peer = group.get("attncore-flash"), peer_of(group)
        if a is None:
            continue
        out.append([case_label(a), _ms(a),
                    f"{peer['method']} {_ms(peer)}" if peer else "—",
                    f"{peer['seconds'] / a['seconds']:.2f}×" if peer else "—",
                    _roof_share(a, result["roofs"])])
    return out


def table_rows(result: dict) -> list[list[str]]:
    """The wide table (--wide): one line per (case, method): time, GFLOP/s,
    GB/s, % of the regime's roof (FMA for prefill, streaming read for decode),
    speed-ups, memory."""
    out = []
    for group in _by_case(result["rows"]).values():
        for method, r in group.items():
            ratio = lambda peer: (f"{group[peer]['seconds'] / r['seconds']:.2f}×"  # noqa: E731
                                  if peer in group and peer != method else "—")
            mask, kv = _mask(r), r.get("kv_dtype", r["dtype"])
            out.append([r["regime"], str(r["n"]), str(r["m"]), str(r["d"]),
                        f"{r['H']}/{r.get('Hkv', r['H'])}", mask,
                        r["dtype"] if kv == r["dtype"] else f"{r['dtype']}/{kv}", method,
                        _ms(r), f"{r['gflops']:.1f}", f"{r['gbs']:.1f}",
                        _roof_share(r, result["roofs"]),
                        ratio("numpy"), ratio("torch"),
                        human_bytes(r["peak_bytes"]) if r.get("peak_bytes") is not None else "—"])
    return out


TABLE_COLUMNS = ["regime", "n", "m", "d", "H/Hkv", "mask", "dtype q/kv", "method", "time ms",
                 "GFLOP/s", "GB/s", "% roof", "vs NumPy", "vs torch", "peak memory"]


def _series(rows, d, causal, y):
    out = {}
    for r in sorted(rows, key=lambda r: r["n"]):
        if r["regime"] == "prefill" and r["d"] == d and r["causal"] == causal and r[y] is not None:
            out.setdefault(r["method"], ([], []))
            out[r["method"]][0].append(r["n"])
            out[r["method"]][1].append(r[y])
    return out


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


def isa_line(result: dict) -> str:
    """What each program ran: attncore's ISA, the capability torch reported,
    the settings it was started with, and NumPy's BLAS kernel (not held)."""
    held = result.get("isa")
    if not held:
        return ""
    line = f"ISA {held['attncore']}: attncore {held['attncore']}"
    cap = held.get("torch_capability")
    if cap is not None:
        env = " ".join(f"{k}={v}" for k, v in held.get("peer_env", {}).items())
        line += f", torch capability {cap} ({env})"
        if not held.get("torch_held", True):
            line += " — NOT the same ISA: torch ignored the settings"
        elif held["attncore"] == "scalar":
            line += " — torch has no scalar build: its DEFAULT kernels use 128-bit SSE vectors"
    kernel = result.get("machine", {}).get("blas", {}).get("kernel")
    return line + f", NumPy BLAS kernel {kernel} (not held)"


SUMMARY_COLUMNS = ["case", "ISA", "attncore ms", "torch ms", "attncore speed", "% roof"]


def summary_rows(results: dict) -> list[list[str]]:
    """One row per (case, ISA) over runs keyed by ISA: attncore's blockwise
    kernel against torch, and how near it came to that ISA's roof."""
    out = []
    cases: dict = {}
    for isa, result in results.items():
        for r in result["rows"]:
            cases.setdefault(_case_key(r), {}).setdefault(isa, {})[r["method"]] = r
    for per_isa in cases.values():
        for isa, group in per_isa.items():
            a, t = group.get("attncore-flash"), group.get("torch")
            if a is None:
                continue
            out.append([case_label(a), isa, _ms(a), _ms(t) if t else "—",
                        f"{t['seconds'] / a['seconds']:.2f}×" if t else "—",
                        _roof_share(a, results[isa]["roofs"])])
    return out


def print_summary(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="attncore bench --isa all: attncore's blockwise kernel against torch, "
                    "each held to the ISA", title_justify="left")
    for c in SUMMARY_COLUMNS:
        t.add_column(c, justify="right")
    for r in summary_rows(results):
        t.add_row(*r)
    Console(width=None if Console().is_terminal else 100).print(t)


def markdown_summary(results: dict) -> str:
    lines = ["Summary: attncore's blockwise kernel against torch, each held to the ISA.", "",
             "| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in summary_rows(results)])


def _roof_line(roofs) -> str:
    dot = (f", bfloat16 dot {roofs['bf16dot_gflops']:.0f} GFLOP/s"
           if roofs.get("bf16dot_gflops") else "")
    return (f"roofs: FMA {roofs.get('fma_gflops', 0):.0f} GFLOP/s{dot}, read "
            f"{roofs.get('read_gbs', 0):.1f} GB/s, NumPy sgemm {roofs.get('sgemm_gflops', 0):.0f} "
            f"GFLOP/s")


def machine_line(result: dict) -> str:
    """The machine, threads, ISA and BLAS of a run, and when and where it ran."""
    m, roofs = result.get("machine", {}), result.get("roofs", {})
    blas = m.get("blas") or {}
    blas_text = (f"{blas.get('library')} {blas.get('version')} (kernel {blas.get('kernel')})"
                 if isinstance(blas, dict) and blas.get("library") else "not recorded")
    line = (f"machine: {m.get('cpu')}, {roofs.get('threads') or 'unrecorded'} threads, isa "
            f"{roofs.get('isa') or 'unrecorded'}; BLAS: {blas_text}")
    if m.get("date") or m.get("commit"):
        line += f"; run {m.get('date', '?')} at attncore {m.get('version', '?')}"
        line += f" ({m['commit']})" if m.get("commit") else ""
    return line + (f"; versions {m['versions']}" if m.get("versions") else "")


def print_table(result: dict, wide: bool = False) -> None:
    """The run's table: compact (one line a case, fits 100 columns) or wide
    (one line per case and method, every column)."""
    from rich.console import Console
    from rich.table import Table

    roofs = result["roofs"]
    con = Console(width=None if Console().is_terminal else (200 if wide else 100))
    t = Table(title="attncore bench" + (" (every method)" if wide else ""), title_justify="left")
    columns, rows = (TABLE_COLUMNS, table_rows(result)) if wide else (COMPACT_COLUMNS,
                                                                      compact_rows(result))
    for c in columns:
        t.add_column(c, justify="left" if (c == "case" and not wide) else "right")
    for r in rows:
        t.add_row(*r)
    con.print(t)
    notes = ["ms: the best round, +x%: how far the median round sat above it",
             "% roof: of the FMA roof for prefill, of the read roof for decode"]
    if not wide:
        notes.append("attncore speed: the peer's time ÷ attncore's (above 1: attncore faster); "
                     "the peer is torch, held to the same ISA (NumPy, whose BLAS is not held, "
                     "only without torch); --wide shows every method")
    if roofs:
        notes.append(_roof_line(roofs))
    held = isa_line(result)
    if held:
        notes.append(held)
    fit = slopes(result)
    if fit:
        notes.append("time ∝ n^slope for n ≥ 1024: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()))
    if result.get("machine"):
        notes.append(machine_line(result))
    for line in notes:
        con.print(line, highlight=False)


def markdown_report(result: dict) -> str:
    """The table as Markdown, with the roofs, the machine and the n² fit."""
    roofs, m = result["roofs"], result.get("machine", {})
    blas = m.get("blas", {})
    lines = [f"Machine: {m.get('cpu')}, {roofs.get('threads')} threads, attncore ISA "
             f"{roofs.get('isa')}; NumPy BLAS {blas.get('library')} {blas.get('version')} "
             f"(kernel {blas.get('kernel')}); versions {m.get('versions')}."
             + (f" Run {m.get('date')} at attncore {m.get('version')}"
                f"{' (' + m['commit'] + ')' if m.get('commit') else ''}." if m.get("date") else ""),
             f"Roofs measured in the same run: FMA {roofs.get('fma_gflops', 0):.0f} GFLOP/s, "
             + (f"bfloat16 dot products {roofs['bf16dot_gflops']:.0f} GFLOP/s, "
                if roofs.get("bf16dot_gflops") else "")
             + f"streaming read {roofs.get('read_gbs', 0):.1f} GB/s, NumPy sgemm "
             f"{roofs.get('sgemm_gflops', 0):.0f} GFLOP/s."]
    if isa_line(result):
        lines.append(isa_line(result) + ".")
    lines.append("")
    lines += ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(result)]
    fit = slopes(result)
    if fit:
        lines += ["", "Log-log slope of time vs n for n ≥ 1024: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()) + "."]
    return "\n".join(lines)
