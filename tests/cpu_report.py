"""`--cpu-report PATH`: the CPU seconds each test cost, written to PATH as tab-separated lines, most first,
and the costliest 15 printed at the end as `--durations` prints the slowest (`make test` asks for both).

On two cores with four parts at once, `--durations` says how long a test waited as much as what it cost: a
test that sleeps on a running service looks as long as one that trains. What makes `make test` long is the
CPU its tests take from each other. So this pytest process moves itself into a cpuacct control group of its
own, which every process it starts inherits (servers, workers, torchrun and ranks, however they detach or
whoever reaps them), and charges each test the group's CPU time over its setup, call and teardown; a shared
service's work is charged to the test it served. Without a writable cgroup v1 cpuacct hierarchy (not root,
or a cgroup v2 only host) it says so and reports nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
SHOWN = 15


@dataclass
class _Report:
    group: Path
    seconds: Counter[str]

    def used(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9


_REPORT = pytest.StashKey[_Report]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", metavar="PATH", help="write each test's CPU seconds to PATH")


def _own_group() -> Path:
    """The cpuacct group this process is in (/proc/self/cgroup: `id:controllers:path`), else the root."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return CPUACCT / path.lstrip("/")
    return CPUACCT


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--cpu-report"):
        return
    group = _own_group() / f"pytest-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        print(f"--cpu-report: no report, {CPUACCT} cannot hold this process: {exc}")
        return
    config.stash[_REPORT] = _Report(group, Counter())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    report = item.config.stash.get(_REPORT, None)
    if report is None:
        return (yield)
    before = report.used()
    try:
        return (yield)
    finally:
        report.seconds[item.nodeid] += report.used() - before


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    report = config.stash.get(_REPORT, None)
    if report is None:
        return
    tests = f"{sum(report.seconds.values()):.1f} s over {len(report.seconds)} tests"
    total = f"{tests}, {report.used():.1f} s in all"
    lines = [f"{seconds:.1f}\t{test}" for test, seconds in report.seconds.most_common()]
    Path(config.getoption("--cpu-report")).write_text("\n".join([f"# {total}", *lines]) + "\n")
    terminalreporter.write_sep("=", f"costliest {SHOWN} in CPU seconds ({total})")
    for line in lines[:SHOWN]:
        terminalreporter.write_line(line.replace("\t", " s  "))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Back to the group this process came from; the group goes once nothing of the suite is left in it."""
    report = config.stash.get(_REPORT, None)
    if report is None:
        return
    (report.group.parent / "cgroup.procs").write_text(str(os.getpid()))
    with contextlib.suppress(OSError):  # a process the suite left running still holds it
        report.group.rmdir()
