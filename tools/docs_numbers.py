"""Write the speed numbers of the README and of docs/performance.md from one saved
``attncore bench`` run, so that every number there comes from a run that names
its machine, ISA, date and commit.

    rm -r docs/bench && attncore bench --out docs/bench           # JSON and figures there
    python tools/docs_numbers.py docs/bench/bench.json          # rewrite the two blocks
    python tools/docs_numbers.py docs/bench/bench.json --check  # exit 1 if they differ

The README gets five rows of the compact table (prefill full and causal, decode
with a float32 and a bfloat16 cache, the backward pass); docs/performance.md the
whole compact table and the wide one.  Each block sits between the markers
``<!-- speed:begin ... -->`` and ``<!-- speed:end -->`` (``bench:`` in the
performance page) and says which run it came from.
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


def provenance(result: dict) -> str:
    m, roofs = result.get("machine", {}), result.get("roofs", {})
    commit = f" ({m['commit']})" if m.get("commit") else ""
    return (f"Measured by `attncore bench` on {m.get('cpu')}, {roofs.get('threads')} threads, ISA "
            f"{roofs.get('isa')}, on {m.get('date')} at attncore {m.get('version')}{commit}.")


def readme_block(result: dict) -> str:
    from attncore.bench.report import COMPACT_COLUMNS, compact_rows

    rows = compact_rows(result)
    picked = [r for case in README_CASES for r in rows if r[0] == case] or rows[:5]
    return "\n".join(_md(COMPACT_COLUMNS, picked) + [
        "", provenance(result) + " \"+x%\": how far the median round sat above the best; "
        "attncore speed: the best peer's time ÷ attncore's; % roof: of the FMA roof "
        "(prefill) or the read roof (decode)."])


def performance_block(result: dict) -> str:
    from attncore.bench.report import (COMPACT_COLUMNS, TABLE_COLUMNS, _roof_line, compact_rows,
                                       isa_line, table_rows)

    lines = [provenance(result), "", "R" + _roof_line(result["roofs"])[1:] + ".",
             isa_line(result) + ".", "", *_md(COMPACT_COLUMNS, compact_rows(result)), "",
             "Every method (`attncore bench --wide`):", "",
             *_md(TABLE_COLUMNS, table_rows(result)), "",
             "![GFLOP/s against n](bench/gflops_vs_n.png)", "",
             "![Decode bandwidth against m](bench/decode_gbs_vs_m.png)", "",
             "![The roofline](bench/roofline.png)"]
    return "\n".join(lines)


def replace_block(text: str, tag: str, body: str, path: str) -> str:
    pat = re.compile(rf"(<!-- {tag}:begin[^\n]*-->\n).*?(<!-- {tag}:end -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"{path}: no <!-- {tag}:begin --> … <!-- {tag}:end --> block")
    return pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a saved attncore bench run (bench.json)")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a block differs from the run")
    args = ap.parse_args(argv)
    from attncore.bench.report import load

    result = load(args.json)
    stale = []
    for rel, tag, body in (("README.md", "speed", readme_block(result)),
                           (os.path.join("docs", "performance.md"), "bench",
                            performance_block(result))):
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
        print(f"not generated from {args.json}: {', '.join(stale)} "
              f"(run python tools/docs_numbers.py {args.json})")
        return 1
    print(("checked" if args.check else "wrote") + f" README.md and docs/performance.md from "
          f"{args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
