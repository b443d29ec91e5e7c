"""One soak from start to end: the service and the receivers up, keys and webhooks made, the load, the
pollers, the innocent user and the kills for the window; then the load stops, the service is given time to
finish what it holds (drain), the invariants are read, the service stops, and what is still running is
named."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak import checks, checks_exports, checks_users
from bench.soak.checks import Check
from bench.soak.client import User, make_users
from bench.soak.faults import Faults, schedule
from bench.soak.innocent import Innocent
from bench.soak.load import FirstKinds, LoadUser
from bench.soak.pollers import Pollers
from bench.soak.profile import FULL, Profile
from bench.soak.receivers import Behaviour, Receiver, start_receivers
from bench.soak.stack import Db, SoakStack
from tests.integration.jobs import TERMINAL

INNOCENT_USER = "dave"
DRAIN_S = (240.0, 900.0)  # the least and the most time the service gets to finish what it holds
DRAIN_POLL_S = 2.0
TERMINAL_SQL = ", ".join(f"'{status}'" for status in sorted(TERMINAL))


@dataclass
class Outcome:
    """What a soak did and found: the JSON report's content."""

    minutes: float
    db: str
    seed: int
    kills: list[dict[str, object]]
    jobs: dict[str, int]  # accepted, by kind
    refused: list[str]
    drained_s: float
    drain_left: list[str]
    answers: dict[str, dict[str, int]]  # status codes seen, by who asked
    checks: list[Check] = field(default_factory=list)
    phases_s: dict[str, float] = field(default_factory=dict)  # what makes a soak long

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks if check.kind is checks.Kind.INVARIANT)


def unfinished(soak: SoakStack, normal_hooks: list[int]) -> list[str]:
    """What the service still has to do: jobs, sweeps, deliveries to the normal receiver, MLflow exports."""
    hooks = ", ".join(str(hook) for hook in normal_hooks)
    counts = {
        "jobs not ended": f"SELECT count(*) AS n FROM jobs WHERE status NOT IN ({TERMINAL_SQL})",
        "sweeps running": "SELECT count(*) AS n FROM sweeps WHERE status = 'running'",
        "deliveries pending": f"SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending' "
        f"AND webhook_id IN ({hooks})",
        "MLflow exports not done": "SELECT count(*) AS n FROM mlflow_exports WHERE NOT done",
    }
    left = {what: soak.rows(query)[0].n for what, query in counts.items()}
    return [f"{n} {what}" for what, n in left.items() if n]


@dataclass
class Laps:
    """How long each phase of the soak took, each told on stderr as it ends."""

    last: float = field(default_factory=time.monotonic)
    seconds: dict[str, float] = field(default_factory=dict)

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = round(now - self.last, 1)
        self.last = now
        print(f"soak: {phase} took {self.seconds[phase]:g} s", file=sys.stderr)


def left_to_do(soak: SoakStack, normal_hooks: list[int]) -> list[str]:
    try:
        return unfinished(soak, normal_hooks)
    except Exception as error:  # the database may be coming back from its restart
        return [f"database: {type(error).__name__}"]


def drain(soak: SoakStack, normal_hooks: list[int], budget_s: float) -> tuple[float, list[str]]:
    began = time.monotonic()
    left = left_to_do(soak, normal_hooks)
    print(f"soak: draining {left}", file=sys.stderr)
    while left and time.monotonic() - began <= budget_s:
        time.sleep(DRAIN_POLL_S)
        left = left_to_do(soak, normal_hooks)
    return round(time.monotonic() - began, 1), left


@dataclass
class Parts:
    """What acts on the service in the window: the load's users, the pollers, the innocent user, the kills."""

    loaders: list[LoadUser]
    innocent: Innocent
    pollers: Pollers
    faults: Faults
    closed: threading.Event  # to submissions

    def start(self) -> None:
        self.innocent.start()
        self.pollers.start()
        for loader in self.loaders:
            loader.start()
        self.faults.start()

    def stop_load(self) -> None:
        """The kills and the submissions; the pages and the innocent user go on looking while it drains."""
        self.closed.set()
        self.faults.finish()
        for loader in self.loaders:
            loader.stop()

    def stop_looking(self) -> None:
        self.pollers.stop()
        self.innocent.stop()

    def accepted(self) -> set[int]:
        return {job for done in [*(u.done for u in self.loaders), self.innocent.done] for job in done.jobs}

    def jobs(self) -> dict[str, int]:
        kinds = Counter(kind for loader in self.loaders for kind in loader.done.jobs.values())
        sweeps = sum(len(loader.done.sweeps) for loader in self.loaders)
        return {
            **{str(kind): n for kind, n in kinds.items()},
            "innocent": len(self.innocent.done.jobs),
            "sweeps": sweeps,
        }

    def refused(self) -> list[str]:
        return [why for done in [*(u.done for u in self.loaders), self.innocent.done] for why in done.refused]


def final_checks(
    soak: SoakStack, admin: User, parts: Parts, normal: Receiver, hooks: dict[str, int]
) -> list[Check]:
    trials = {row.id for row in soak.rows("SELECT id FROM jobs WHERE sweep_id IS NOT NULL")}
    downloads = [download for loader in parts.loaders for download in loader.done.downloads]
    with admin.client(soak.stack) as client:
        return [
            checks.terminal_once(soak, parts.accepted() | trials),
            checks.metric_steps(soak, admin, client),
            checks_exports.webhooks(soak, normal, hooks),
            checks.checkpoints(soak, admin, client, downloads),
            checks_exports.mlflow(soak),
            checks_users.healthz(parts.innocent.health, parts.faults.kills),
            checks_users.innocent_gets(parts.innocent),
        ]


def soak(minutes: float, db: Db, seed: int, workdir: Path, profile: Profile = FULL) -> Outcome:
    duration_s, laps = minutes * 60, Laps()
    receivers = start_receivers()
    service = SoakStack.start(db, workdir, profile.rank_nice)
    parts: Parts | None = None
    try:
        admin, users = make_users(service.stack, (*profile.load_users, INNOCENT_USER))
        closed = threading.Event()
        kinds = FirstKinds(seed)
        loaders = [
            LoadUser(user, service.stack, seed * 100 + n, profile, kinds, n == 0, closed)
            for n, user in enumerate(users[:-1])
        ]
        hooks = {loader.user.name: loader.setup(receivers)[Behaviour.NORMAL] for loader in loaders}
        laps.lap("start")
        started, started_at = time.monotonic(), time.time()
        parts = Parts(
            loaders,
            Innocent(users[-1], service.stack, started, closed),
            Pollers(service.stack.url, users[:-1], seed, profile.pollers),
            Faults(service, schedule(seed, duration_s, service.targets()), seed, started),
            closed,
        )
        parts.start()
        print(f"soak: {minutes:g} min on {db}, seed {seed}, service in {workdir}", file=sys.stderr)
        time.sleep(duration_s * profile.submitting)
        closed.set()
        time.sleep(duration_s * (1 - profile.submitting))
        parts.stop_load()
        laps.lap("window")
        drained_s, left = drain(
            service, list(hooks.values()), min(max(DRAIN_S[0], duration_s / 4), DRAIN_S[1])
        )
        parts.stop_looking()
        laps.lap("drain")
        found = final_checks(service, admin, parts, receivers[Behaviour.NORMAL], hooks)
        found.append(checks_users.innocent_starts(service, parts.innocent, started_at))
        laps.lap("checks")
    finally:
        if parts is not None:
            parts.faults.abandon()
        service.stop()
        for receiver in receivers.values():
            receiver.close()
    laps.lap("stop")
    found.append(checks_users.processes_left(service.tracker.left()))
    laps.lap("processes left")
    answers: dict[str, Any] = {user.name: dict(user.answers) for user in [admin, *users]}
    answers["pollers"] = dict(parts.pollers.answers)
    answers["receivers"] = {str(b): len(receiver.received) for b, receiver in receivers.items()}
    found.append(
        checks_users.no_server_errors({who: got for who, got in answers.items() if who != "receivers"})
    )
    return Outcome(
        minutes,
        str(db),
        seed,
        parts.faults.records(),
        parts.jobs(),
        parts.refused(),
        drained_s,
        left,
        answers,
        found,
        laps.seconds,
    )
