"""pytest-benchmark suites: ``pytest bench/`` (add --benchmark-json=FILE, then
``attncore plot FILE``).  ``--smoke`` keeps only the smallest sizes, for a
fast pass that checks the suite itself runs."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--smoke", action="store_true", help="smallest sizes only")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--smoke"):
        return
    keep = [i for i in items if i.get_closest_marker("smoke")]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


def pytest_configure(config):
    config.addinivalue_line("markers", "smoke: part of the --smoke pass")


@pytest.fixture(scope="session", autouse=True)
def same_threads():
    """Every peer on the same threads: attncore, NumPy's BLAS, torch."""
    import attncore
    from attncore.bench import threads

    with threads(attncore.get_num_threads()):
        yield
