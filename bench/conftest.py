"""pytest-benchmark suites: ``pytest bench/`` (add --benchmark-json=FILE, then
``attncore plot FILE``).  ``--smoke`` keeps only the smallest sizes, for a
fast pass that checks the suite itself runs.  The JSON's machine_info says
what ran: attncore's version, ISA and threads, NumPy's BLAS and the kernel it
chose, the versions of the peers, and the roofs measured at the end of the run."""

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


def pytest_benchmark_update_machine_info(config, machine_info):
    """attncore's part of the machine info (``machine_info["attncore"]``), which
    ``attncore plot FILE`` prints: the build, the ISA and threads the benchmarks
    ran with, NumPy's BLAS and its kernel, and the roofs, measured here with the
    kernels' own instructions as ``attncore bench`` measures them."""
    import attncore
    from attncore.bench import roofs

    nt = attncore.get_num_threads()
    m = roofs.machine()
    machine_info["attncore"] = {"version": attncore.__version__, "isa": attncore.info()["isa"],
                                "threads": nt, "cpu": m["cpu"], "versions": m["versions"],
                                "blas": m["blas"],
                                "roofs": roofs.measure_roofs(nt, quick=True)}
