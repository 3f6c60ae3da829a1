"""Teaching experiments: the facts an attention course states, run on the real
kernels (scores, softmax and attention from the C core, never a second toy
implementation), reproducible by seed, tabulated and drawn.

Each function returns a :class:`Result` with ``.table()`` (a list of dict rows of
plain Python values), ``.plot(ax=None)`` (matplotlib, labelled) and a readable repr.

    formula  why the formula is what it is: scaling, normalizers, trace,
             permutation, scorers, saturation, multihead
    chapter  the chapter's own pieces: sentence, shapes, weighted_mean,
             causal_row, online_softmax, and corrections (where the sources go wrong)
    cost     what it costs on this machine: memory, causal, crossover,
             traffic, regimes, family, kv_sharing, decode
    result   the Result every experiment returns
    live     the callbacks of the live notebooks (docs/notebooks): plain functions
             of a widget's values, imported as attncore.teach.live

``import attncore`` does not import this package; ``attncore.teach`` does,
on first use.
"""

from attncore.teach.chapter import (causal_row, corrections, modifiers, online_softmax,
                                    sentence, shapes, weighted_mean)
from attncore.teach.cost import (causal, crossover, decode, family, kv_sharing, memory, regimes,
                                 traffic)
from attncore.teach.formula import (_TRACE_K, _TRACE_Q, _TRACE_V, multihead,  # noqa: F401
                                    normalizers, permutation, saturation, scaling, scorers, trace)
from attncore.teach.result import Result

__all__ = ["Result", "scaling", "normalizers", "memory", "trace", "permutation", "causal",
           "crossover", "scorers", "saturation", "regimes", "multihead", "family", "sentence",
           "shapes", "weighted_mean", "causal_row", "corrections", "kv_sharing",
           "online_softmax", "traffic", "decode", "modifiers"]
