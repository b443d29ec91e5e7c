"""The soak's plan for the light window `make test` runs (its kills, its users' first kinds of job) and its
judgement of /healthz around the planned PostgreSQL restart: pure functions, nothing started."""

from __future__ import annotations

import math

import pytest

from bench.soak.checks_users import RESTART_GRACE_S, healthz
from bench.soak.faults import Kill, schedule
from bench.soak.innocent import Probe
from bench.soak.load import first_kinds
from bench.soak.specs import Kind
from bench.soak.stack import Target

RESTART = Kill(at_s=100.0, target=Target.POSTGRES, pid=4242, detail="PostgreSQL, restarted", back_s=104.0)
API_KILL = Kill(at_s=50.0, target=Target.API, pid=77, detail="an API process", back_s=50.1)


def answers(*outcomes: tuple[float, str]) -> list[Probe]:
    return [Probe(at_s, 0.01, outcome) for at_s, outcome in outcomes]


def test_a_503_while_the_database_restarts_is_named_and_not_counted() -> None:
    seen = answers((99.0, "200"), (101.5, "503"), (104.0 + RESTART_GRACE_S - 1, "503"), (120.0, "200"))
    check = healthz(seen, [API_KILL, RESTART])
    assert check.ok, check.offenders
    assert "2 x 503 during the planned PostgreSQL restart, not counted" in check.figure
    assert "'503': 2" in check.figure


def test_a_503_outside_the_restart_fails() -> None:
    seen = answers((99.0, "503"), (101.0, "503"), (104.0 + RESTART_GRACE_S + 1, "503"), (51.0, "503"))
    check = healthz(seen, [API_KILL, RESTART])
    assert not check.ok
    assert check.offenders == [
        "503 at 99.0 s",
        f"503 at {104.0 + RESTART_GRACE_S + 1:.1f} s",
        "503 at 51.0 s",
    ]
    assert "1 x 503 during the planned PostgreSQL restart" in check.figure


def test_without_a_restart_every_503_fails() -> None:
    failed_restart = Kill(100.0, Target.POSTGRES, None, "failed: CalledProcessError", 101.0)
    check = healthz(answers((100.5, "503"), (130.0, "200")), [failed_restart])
    assert not check.ok
    assert check.offenders == ["503 at 100.5 s"]
    assert "not counted" not in check.figure


def test_a_two_minute_window_still_hits_every_target_and_restarts_postgres_once() -> None:
    targets = tuple(Target)
    for seed in range(20):
        plan = schedule(seed, 120.0, targets)
        hit = [fault.target for fault in plan]
        assert set(hit) == set(targets), seed
        assert hit.count(Target.POSTGRES) == 1
        assert all(12.0 <= fault.at_s <= 102.0 for fault in plan)


@pytest.mark.parametrize("users", [1, 2, 3, 4, 5])
def test_the_users_first_jobs_between_them_are_every_kind(users: int) -> None:
    for seed in range(10):
        firsts = first_kinds(users, seed)
        assert all(sorted(kinds) == sorted(Kind) for kinds in firsts)
        each = math.ceil(len(Kind) / users)
        assert {kind for kinds in firsts for kind in kinds[:each]} == set(Kind), (users, seed)
