"""Write the speed numbers of the README and of docs/performance.md from one saved
``attncore bench --isa all`` run, so that every number there comes from one run
that names its machine, date and commit, with attncore and its peer held to the
same instruction set, for every instruction set the machine has.

    rm -r docs/bench && attncore bench --isa all --out docs/bench  # docs/bench/<isa>/bench.json
    python tools/docs_numbers.py docs/bench          # rewrite the two blocks
    python tools/docs_numbers.py docs/bench --check  # exit 1 if they differ

The README gets five cases (prefill full and causal, decode with a float32 and a
bfloat16 cache, the backward pass), each as attncore's speed against torch and
its share of the roof on every ISA; docs/performance.md the whole table of each
ISA.  Each block sits between the markers ``<!-- speed:begin ... -->`` and
``<!-- speed:end -->`` (``bench:`` in the performance page).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the installed attncore runs

README_CASES = ("prefill 2048 full", "prefill 2048 causal", "decode 32k 32/8 f32",
                "decode 32k 32/8 f32/bf16", "backward 1024 causal")


def _md(columns, rows) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def load_run(path: str) -> dict:
    """{isa: result} of a run folder (one bench.json per ISA, or one for the run)."""
    from attncore.bench.report import load

    if os.path.isfile(path):
        result = load(path)
        return {result["roofs"]["isa"]: result}
    runs = {}
    for name in sorted(os.listdir(path)):
        if os.path.isfile(os.path.join(path, name, "bench.json")):
            runs[name] = load(os.path.join(path, name, "bench.json"))
    if os.path.isfile(os.path.join(path, "bench.json")):
        result = load(os.path.join(path, "bench.json"))
        runs[result["roofs"]["isa"]] = result
    if not runs:
        raise SystemExit(f"{path}: no bench.json")
    # best ISA first, as attncore lists them
    from attncore import _isa

    return dict(sorted(runs.items(), key=lambda kv: _isa.ISAS.index(kv[0])))


def provenance(runs: dict) -> str:
    first = next(iter(runs.values()))
    m, roofs = first.get("machine", {}), first.get("roofs", {})
    commit = f" ({m['commit']})" if m.get("commit") else ""
    return (f"Measured by `attncore bench --isa all` on {m.get('cpu')}, {roofs.get('threads')} "
            f"threads, on {m.get('date')} at attncore {m.get('version')}{commit}: one run, "
            f"attncore and torch held to each ISA in turn ({', '.join(runs)}).")


def readme_block(runs: dict) -> str:
    from attncore.bench.report import compact_rows

    per_isa = {isa: {r[0]: r for r in compact_rows(result)} for isa, result in runs.items()}
    rows = [[case] + [f"{per_isa[isa][case][3]} ({per_isa[isa][case][4]})"
                      if case in per_isa[isa] else "—" for isa in runs]
            for case in README_CASES]
    return "\n".join(_md(["case"] + [f"{isa}: speed (% roof)" for isa in runs], rows) + [
        "", provenance(runs) + " Speed: torch's time ÷ attncore's (above 1: attncore faster); "
        "% roof: attncore's share of that ISA's FMA roof (prefill) or read roof (decode)."])


def performance_block(runs: dict) -> str:
    from attncore.bench.report import (COMPACT_COLUMNS, TABLE_COLUMNS, _roof_line, compact_rows,
                                       isa_line, table_rows)

    lines = [provenance(runs)]
    for isa, result in runs.items():
        lines += ["", f"### {isa}", "", "R" + _roof_line(result["roofs"])[1:] + ".",
                  isa_line(result) + ".", "", *_md(COMPACT_COLUMNS, compact_rows(result))]
    best = next(iter(runs))
    lines += ["", f"Every method on {best} (`attncore bench --wide`):", "",
              *_md(TABLE_COLUMNS, table_rows(runs[best])), "",
              f"![GFLOP/s against n]({_fig(runs, best, 'gflops_vs_n.png')})", "",
              f"![Decode bandwidth against m]({_fig(runs, best, 'decode_gbs_vs_m.png')})", "",
              f"![The roofline]({_fig(runs, best, 'roofline.png')})"]
    return "\n".join(lines)


def _fig(runs: dict, isa: str, name: str) -> str:
    return f"bench/{isa}/{name}" if len(runs) > 1 else f"bench/{name}"


def replace_block(text: str, tag: str, body: str, path: str) -> str:
    pat = re.compile(rf"(<!-- {tag}:begin[^\n]*-->\n).*?(<!-- {tag}:end -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"{path}: no <!-- {tag}:begin --> … <!-- {tag}:end --> block")
    return pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a saved attncore bench run: its folder, or one bench.json")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a block differs from the run")
    args = ap.parse_args(argv)
    runs = load_run(args.run)
    stale = []
    for rel, tag, body in (("README.md", "speed", readme_block(runs)),
                           (os.path.join("docs", "performance.md"), "bench",
                            performance_block(runs))):
        path = os.path.join(ROOT, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = replace_block(text, tag, body, rel)
        if new != text:
            stale.append(rel)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    if args.check and stale:
        print(f"not generated from {args.run}: {', '.join(stale)} "
              f"(run python tools/docs_numbers.py {args.run})")
        return 1
    print(("checked" if args.check else "wrote") + f" README.md and docs/performance.md from "
          f"{args.run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
