"""Shared fixtures: every kernel test runs once per instruction set the machine has."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import attncore
from attncore import _isa

# The tests must exercise the installed, compiled package, never a source tree.
assert hasattr(attncore, "_core"), "attncore's compiled core is not importable"

# The `isa` fixture is meant to hold for every example of a test, so sharing
# a function-scoped fixture across examples is what we want here.
_quiet = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
settings.register_profile("default", deadline=None, max_examples=60, suppress_health_check=_quiet)
settings.register_profile("long", deadline=None, max_examples=1000, suppress_health_check=_quiet)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(params=_isa.available())
def isa(request):
    """Run the test with one micro-kernel set forced, then restore the default."""
    before = attncore.info()["isa"]
    _isa.use(request.param)
    yield request.param
    _isa.use(before)


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)
