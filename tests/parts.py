"""`--part stacks|units|rest`: one of the three parts `make test` runs at once, as three pytest processes.

The parts overlap on a machine of two cores: much of an integration test's time is spent waiting for a job
on a running service (a heartbeat to age, a collective to time out, a retry's backoff), which the other parts'
work fills. `stacks` is every test on the shared running services (tests/integration/conftest.py), so that
each starts once; `units` the unit tests and the benchmarks' smoke runs, which only compute; `rest` the
trainer's runs under torchrun and the modules with services of their own, after the linters. Without
`--part`, pytest runs everything, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PARTS = ("stacks", "units", "rest")
SHARED_STACKS = frozenset({"embedded_stack", "redis_postgres_stack", "stack", "auth_stack"})
UNIT_TESTS = (Path(__file__).parent / "unit", Path(__file__).parents[1] / "bench" / "tests")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--part", choices=PARTS, help="run one part of the suite (tests/parts.py)")


def part_of(item: pytest.Item) -> str:
    on_shared_stack = not SHARED_STACKS.isdisjoint(getattr(item, "fixturenames", ()))
    if on_shared_stack:
        return "stacks"
    return "units" if any(folder in item.path.parents for folder in UNIT_TESTS) else "rest"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("part")
    if part is None:
        return
    kept = [item for item in items if part_of(item) == part]
    dropped = [item for item in items if part_of(item) != part]
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)
