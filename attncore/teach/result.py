"""What a teaching experiment returns: its rows, the facts they show, and a figure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


def _plain(x):
    """NumPy scalars and arrays to plain Python values, for tables."""
    if isinstance(x, np.ndarray):
        return [_plain(v) for v in x.tolist()] if x.ndim else x.item()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


@dataclass
class Result:
    """What an experiment found: its rows, the facts they show, and a figure."""

    name: str
    title: str
    rows: list[dict]
    facts: dict = field(default_factory=dict)
    draw: Callable | None = field(default=None, repr=False)
    figsize: tuple = field(default=(9.6, 5.4), repr=False)

    def table(self) -> list[dict]:
        return [{k: _plain(v) for k, v in r.items()} for r in self.rows]

    def plot(self, ax=None):
        import matplotlib

        if ax is None:
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=self.figsize)
        self.draw(ax)
        ax.set_title(self.title)
        return ax

    def __repr__(self) -> str:
        rows = self.table()
        cols = list(rows[0]) if rows else []

        def fmt(v):
            if isinstance(v, float):
                return f"{v:.4g}"
            if isinstance(v, list):
                return "[" + ", ".join(fmt(x) for x in v) + "]"
            return str(v)

        cells = [[fmt(r[c]) for c in cols] for r in rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
        lines = [f"{self.name}: {self.title}"]
        lines += [f"  {k}: {fmt(_plain(v))}" for k, v in self.facts.items()]
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths)))
        lines += ["  " + "  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
        return "\n".join(lines)


def _entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) of each row of weights."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)
