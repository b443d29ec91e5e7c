"""The soak's plan for the light window `make test` runs (its kills, its users' first kinds of job) and its
judgement of /healthz around the planned PostgreSQL restart: pure functions, nothing started."""

from __future__ import annotations

from bench.soak.checks_users import RESTART_GRACE_S, healthz, no_server_errors
from bench.soak.faults import Kill, schedule
from bench.soak.innocent import Probe
from bench.soak.load import FirstKinds
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


def test_a_500_to_anyone_fails_the_soak_and_a_503_or_a_cut_request_does_not() -> None:
    check = no_server_errors(
        {"alice": {"200": 9, "503": 1, "transport": 2}, "pollers": {"200": 5, "500": 29}}
    )
    assert not check.ok and check.offenders == ["pollers: 29 x 500"]
    assert no_server_errors({"bob": {"200": 3, "429": 1, "transport": 1}}).ok


def test_a_two_minute_window_still_hits_every_target_and_restarts_postgres_once() -> None:
    targets = tuple(Target)
    for seed in range(20):
        plan = schedule(seed, 120.0, targets)
        hit = [fault.target for fault in plan]
        assert set(hit) == set(targets), seed
        assert hit.count(Target.POSTGRES) == 1
        assert all(12.0 <= fault.at_s <= 102.0 for fault in plan)


def test_the_first_jobs_between_the_users_are_every_kind_once() -> None:
    for seed in range(10):
        first = FirstKinds(seed)
        taken = [first.take() for _ in Kind]
        assert sorted(kind for kind in taken if kind is not None) == sorted(Kind), seed
        assert first.take() is None
    assert [FirstKinds(seed).take() for seed in range(10)] != [FirstKinds(0).take()] * 10, "seeded orders"
