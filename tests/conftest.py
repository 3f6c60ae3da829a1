"""Shared fixtures: every kernel test runs once per instruction set the machine has."""

import os

# pytest -n auto runs one worker per core, and each worker's OpenMP team
# (attncore's, and torch's beside it) would spin-wait between the many tiny
# calls of the tests while the other workers want the same cores: the torch
# tests took 10x as long.  Set before the first import of the core, which
# loads the OpenMP runtime; a value the caller chose is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import attncore  # noqa: E402
from attncore import _isa  # noqa: E402

# The tests must exercise the installed, compiled package, never a source tree.
assert hasattr(attncore, "_core"), "attncore's compiled core is not importable"

# The `isa` fixture is meant to hold for every example of a test, so sharing
# a function-scoped fixture across examples is what we want here.
_quiet = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
settings.register_profile("default", deadline=None, max_examples=60, suppress_health_check=_quiet)
settings.register_profile("long", deadline=None, max_examples=1000, suppress_health_check=_quiet)
# under emulation (tools/arm64-test.sh), where a call runs tens of times slower
settings.register_profile("emulated", deadline=None, max_examples=15, suppress_health_check=_quiet)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _test_isas() -> list:
    """The ISAs the `isa` fixture runs: every one this machine has, or the
    ones ATTNCORE_TEST_ISAS names (comma-separated) — the emulated arm64 run
    takes only neon, whose scalar sibling is the same C the native run tests."""
    have = _isa.available()
    chosen = [s.strip() for s in os.environ.get("ATTNCORE_TEST_ISAS", "").split(",") if s.strip()]
    if not chosen:
        return have
    missing = [s for s in chosen if s not in have]
    if missing:
        raise pytest.UsageError(f"ATTNCORE_TEST_ISAS names {missing}, not available here: {have}")
    return chosen


def _isa_params() -> list:
    """The `isa` fixture's parameters.  The best ISA and scalar (the two ends:
    the one users run, and the portable C every other is measured against) are
    in the default set; any between them (avx2 on an AVX-512 machine) is in the
    slow set, which `pytest -m slow` runs and CI runs in full — so every ISA the
    machine has is still tested there, and the default run stays within its
    minutes."""
    isas = _test_isas()
    ends = {isas[0], isas[-1]}
    return [pytest.param(name, marks=() if name in ends else pytest.mark.slow) for name in isas]


@pytest.fixture(params=_isa_params())
def isa(request):
    """Run the test with one micro-kernel set forced, then restore the default."""
    before = attncore.info()["isa"]
    _isa.use(request.param)
    yield request.param
    _isa.use(before)


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)
