"""`--part stacks|rest|services|soak`: one of the four parts `make test` runs at once, each a pytest process.

The parts overlap on a machine of two cores: much of a test's time is spent waiting (for a job on a running
service, for Slurm to start, signal or requeue one, for a killed worker's lease to run out), which the other
parts' work fills. `stacks` is every test on one of the shared running services
(tests/integration/conftest.py), so that each starts once, then the benchmarks' smoke runs. `services` is the
modules that start services of their own (the Slurm cluster, hosts, workers and object stores of their own),
which wait the most and say so with `pytestmark = pytest.mark.own_services`. `rest` is everything else: the
worker's unit tests, the trainer's runs under torchrun, the costlier half of the trainer's unit tests; the
linters run beside it. `soak` is the modules marked `soak` (bench/soak, light, 2 minutes), which run
minutes on their own service from the start, beside the others, so that their length is not added to any
part's, then the unit tests of the API and the core and the other half of the trainer's, which would
otherwise keep another part running long after the soak's end. The work that needs nothing running is split
so that the parts end together: a part left alone at the end waits on one core.
Without `--part`, pytest runs everything, as before.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

PARTS = ("stacks", "rest", "services", "soak")
# Every test's jobs run at the tests' own priority. The suite's parts take both cores at full priority all the
# time, as the service never does: under TRAINYARD_RANK_NICE's default a job's ranks (each of its sessions
# niced, jobspec/session_nice.py) got a sliver of the cores, and jobs crawled into their tests' timeouts.
# The tests of the priority set it themselves (tests/unit/worker/test_rank_nice.py); the full soak, run
# apart from the suite, runs the service's default.
os.environ.setdefault("TRAINYARD_RANK_NICE", "0")
# libgomp's threads wait for each other spinning, by default: on a box whose cores every part keeps busy, a
# torch op's threads spun through their neighbours' time slices (a resnet18 case in a test's own process:
# 4.4-6.2 CPU s, 0.5-0.8 with passive waits). Set before anything imports torch (this plugin loads first);
# the processes the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
TESTS = Path(__file__).parent
# Test files that never use a shared running service (its fixtures are tests/integration's).
OFF_THE_STACKS = (TESTS / "unit", TESTS / "gpu")
SHARED_STACKS = frozenset({"embedded_stack", "redis_postgres_stack", "stack", "auth_stack"})
# After the soak: the two parts it ran beside had ended two and a half minutes after it (ci26, ci27 in the
# closing notes of sessions 28 and 29) with the trainer's unit tests in `rest`.
UNIT_TESTS = (TESTS / "unit" / "app", TESTS / "unit" / "core", TESTS / "unit" / "trainers")
# With all of them after the soak, its part ended a minute after the last of the others (ci32: 14:36, stacks
# 13:36, rest 12:57): these four modules, half of the trainer's unit tests by CPU (29.9 of 59.8 s), are back
# in `rest`.
TRAINER_UNIT_TESTS_IN_REST = tuple(
    TESTS / "unit" / "trainers" / name
    for name in (
        "test_forecast_examples.py",
        "test_user_data.py",
        "test_strategies_stages.py",
        "test_standby_imports.py",
    )
)
BENCH_SMOKE = (TESTS.parent / "bench" / "tests",)
OWN_SERVICES = "own_services"  # the markers, declared in pyproject.toml
SOAK = "soak"
# A marker as a module sets it, alone or in a list, read from the file's text: a part that does not run the
# module never imports it. A mark the text does not show this way is refused at collection (part_of).
MODULE_MARKERS = (OWN_SERVICES, SOAK)


def _marker_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"^pytestmark\s*=[^=]*?\bpytest\.mark\.{name}\b", re.MULTILINE | re.DOTALL)


MARKED = {name: _marker_pattern(name) for name in MODULE_MARKERS}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--part", choices=PARTS, help="run one part of the suite (tests/parts.py)")


def _within(path: Path, places: tuple[Path, ...]) -> bool:
    return any(place in (path, *path.parents) for place in places)


@functools.cache  # asked for each test of a file, and its text read once
def _test_module_text(path: Path) -> str:
    return path.read_text() if path.name.startswith("test_") else ""


def _marked(path: Path, name: str) -> bool:
    return MARKED[name].search(_test_module_text(path)) is not None


@functools.cache
def _part_of_file(path: Path) -> str | None:
    """The part every test of this file is in, where the file alone tells: a test module that never names a
    shared stack's fixture cannot ask for one (no other fixture of tests/integration's conftest does)."""
    if _within(path, TRAINER_UNIT_TESTS_IN_REST):
        return "rest"
    if _marked(path, SOAK) or _within(path, UNIT_TESTS):
        return "soak"
    if _marked(path, OWN_SERVICES):
        return "services"
    if _within(path, BENCH_SMOKE):
        return "stacks"
    if _within(path, OFF_THE_STACKS):  # a fixture of its own may be named like a shared one
        return "rest"
    names = re.findall(r"\w+", _test_module_text(path))
    if path.name.startswith("test_") and SHARED_STACKS.isdisjoint(names):
        return "rest"
    return None


def _check_marked_as_read(item: pytest.Item) -> None:
    for name in MODULE_MARKERS:
        if (item.get_closest_marker(name) is not None) != _marked(item.path, name):
            raise pytest.UsageError(
                f"{item.nodeid}: the {name} marker belongs to a whole module, set at its top level as "
                f"`pytestmark = pytest.mark.{name}` (or in a list of marks), which tests/parts.py reads "
                "before importing it; move the mark there"
            )


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
    if owner is None:  # decided test by test; `services` and `soak` are known by their files alone
        return True if part in ("services", "soak") else None  # None: pytest's own rules still apply
    return True if owner != part else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _check_marked_as_read(item)
    part = config.getoption("part")
    if part is None:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if part_of(item) == part else dropped).append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)
