"""The README's Python examples run as written."""

import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def test_readme_python_blocks_run():
    """Every block runs; one that begins ``# needs attncore[distributed]`` (or
    ``[torch]``) runs where Dask (torch) is installed — CI's extras stage — and
    is skipped elsewhere."""
    import importlib.util

    with open(README) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks
    have = {extra: importlib.util.find_spec(module) is not None
            for extra, module in (("distributed", "distributed"), ("torch", "torch"))}
    ran = 0
    for code in blocks:
        need = re.match(r"# needs attncore\[(\w+)\]", code)
        if need and not have[need.group(1)]:
            continue
        # __main__, as a script: a LocalCluster's spawned workers expect it
        exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
        ran += 1
    assert ran


def test_every_guarantee_names_tests_that_exist():
    root = os.path.dirname(README)
    with open(README) as f:
        text = f.read()
    table = text.split("## Guarantees", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| guarantee")]
    assert len(rows) >= 10
    for row in rows:
        cited = row.rsplit("|", 2)[-2]
        refs = re.findall(r"`((?:tests/|tools/)?[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`", cited)
        assert refs, row
        last = None
        for path, test, bare in refs:
            if path:
                last = path if path.startswith(("tests/", "tools/")) else "tests/" + path
                assert os.path.exists(os.path.join(root, last)), last
            name = (test or "::" + bare if (test or bare) else "")[2:]
            if name:
                with open(os.path.join(root, last)) as f:
                    assert f"def {name}(" in f.read(), (last, name)
