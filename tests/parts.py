"""`--part stacks|rest|services`: one of the three parts `make test` runs at once, each a pytest process.

The parts overlap on a machine of two cores: much of a test's time is spent waiting (for a job on a running
service, for Slurm to start, signal or requeue one, for a killed worker's lease to run out), which the
other parts' work fills. `stacks` is every test on one of the shared running services
(tests/integration/conftest.py), so that each starts once, then the benchmarks' smoke runs. `services` is the
modules that start services of their own (the Slurm cluster, hosts, workers and object stores of their own),
which wait the most, then the unit tests of the API and the core. `rest` is everything else: the worker's and
the trainer's unit tests, the trainer's runs under torchrun; the linters run beside it. The work that needs
nothing running is split so that the three end together: a part left alone at the end waits on one core.
Without `--part`, pytest runs everything, as before.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

PARTS = ("stacks", "rest", "services")
TESTS = Path(__file__).parent
# Test files that never use a shared running service (its fixtures are tests/integration's).
OFF_THE_STACKS = (TESTS / "unit", TESTS / "gpu")
SHARED_STACKS = frozenset({"embedded_stack", "redis_postgres_stack", "stack", "auth_stack"})
UNIT_TESTS = (TESTS / "unit" / "app", TESTS / "unit" / "core")
BENCH_SMOKE = (TESTS.parent / "bench" / "tests",)
OWN_SERVICES = tuple(
    TESTS / "integration" / f"test_{name}.py"
    for name in (
        "slurm_cluster",
        "slurm_executor",
        "docs_commands",
        "artifacts_s3",
        "multi_host",
        "faults_worker",
        "queue_order",
        "event_bounds_postgres",
        "ids_never_reused_postgres",
        "sweeps_restart",
    )
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--part", choices=PARTS, help="run one part of the suite (tests/parts.py)")


def _within(path: Path, places: tuple[Path, ...]) -> bool:
    return any(place in (path, *path.parents) for place in places)


@functools.cache  # asked for each test of a file, and its text read once
def _part_of_file(path: Path) -> str | None:
    """The part every test of this file is in, where the file alone tells: a test module that never names a
    shared stack's fixture cannot ask for one (no other fixture of tests/integration's conftest does)."""
    if _within(path, OWN_SERVICES + UNIT_TESTS):
        return "services"
    if _within(path, BENCH_SMOKE):
        return "stacks"
    if _within(path, OFF_THE_STACKS):  # a fixture of its own may be named like a shared one
        return "rest"
    if path.name.startswith("test_") and SHARED_STACKS.isdisjoint(re.findall(r"\w+", path.read_text())):
        return "rest"
    return None


def part_of(item: pytest.Item) -> str:
    on_shared_stack = not SHARED_STACKS.isdisjoint(getattr(item, "fixturenames", ()))
    return _part_of_file(item.path) or ("stacks" if on_shared_stack else "rest")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test file whose every test is another part's is not even imported: collecting it would cost this
    part seconds of imports. Which part a test of tests/integration is in shows only once it is collected."""
    part = config.getoption("part")
    if part is None or not collection_path.is_file():
        return None
    owner = _part_of_file(collection_path)
    if owner is None:  # decided test by test; `services` is known by its files alone
        return True if part == "services" else None  # None: pytest's own rules still apply
    return True if owner != part else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("part")
    if part is None:
        return
    kept, dropped = [], []
    for item in items:
        (kept if part_of(item) == part else dropped).append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)
