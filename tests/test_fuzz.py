"""The differential fuzz of the public API (tests/fuzzing.py), on every ISA.

Each example is one call of one entry point with generated shapes, dtypes,
layouts, masks, windows, block sizes, GQA ratios and NaN/inf; attncore must
agree with the NumPy reference or raise the same documented exception.
tools/fuzz.py runs the same check for as long as you like.
"""

import pytest
from hypothesis import given

from fuzzing import ENTRY_POINTS, calls, check


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_public_api_agrees_with_the_reference(isa, entry):
    @given(calls(entry))
    def fuzz(call):
        check(call)

    fuzz()
