"""`--part stacks|rest`: one of the two halves `make test` runs at once, as two pytest processes.

The halves overlap on a machine of two cores: much of a test's time is spent waiting for a job on a
running service, which the other half's work fills. The line between the halves is
the shared running services (tests/integration/conftest.py): every test on one of them is in `stacks`, so
that each starts once, together with the unit tests of the API, the core and the trainer, the standby's, and
the benchmarks' smoke runs, which balance the halves; everything else (the worker's other unit tests, the
trainer's runs, modules with services of their own) is in `rest`, which runs beside the linters. Without
`--part`, pytest runs everything, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PARTS = ("stacks", "rest")
SHARED_STACKS = frozenset({"embedded_stack", "redis_postgres_stack", "stack", "auth_stack"})
UNIT_TESTS = (
    Path(__file__).parent / "unit" / "app",
    Path(__file__).parent / "unit" / "core",
    Path(__file__).parent / "unit" / "trainers",
    Path(__file__).parent / "unit" / "worker" / "test_standby.py",
    Path(__file__).parents[1] / "bench" / "tests",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--part", choices=PARTS, help="run one half of the suite (tests/parts.py)")


def part_of(item: pytest.Item) -> str:
    on_shared_stack = not SHARED_STACKS.isdisjoint(getattr(item, "fixturenames", ()))
    unit_test = any(path in (item.path, *item.path.parents) for path in UNIT_TESTS)
    return "stacks" if on_shared_stack or unit_test else "rest"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("part")
    if part is None:
        return
    kept = [item for item in items if part_of(item) == part]
    dropped = [item for item in items if part_of(item) != part]
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)
