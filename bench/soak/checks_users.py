"""What the innocent user saw (GET latency and the wait from submit to start, minute by minute), whether
/healthz ever said the service was unavailable, and what was left running once the service stopped."""

from __future__ import annotations

from collections import Counter, defaultdict

from sqlalchemy import select

from bench.soak.checks import Check, Kind, named, quantile
from bench.soak.faults import Kill
from bench.soak.innocent import Innocent, Probe
from bench.soak.processes import Seen
from bench.soak.stack import SoakStack, Target
from core.clock import as_utc
from core.models import Job

P99_TARGET_S = 1.0
# After PostgreSQL accepts connections again, an answer the API made while it was down may still be on its
# way on the loaded box, and the pools replace their dead connections (pre-ping) on their next use.
RESTART_GRACE_S = 10.0


def innocent_gets(innocent: Innocent) -> Check:
    """p99 of the innocent user's answered GETs over the whole soak, and per minute; requests that got no
    answer (an API process killed under them) are counted apart."""
    answered = [probe for probe in innocent.probes if probe.outcome == "200"]
    minutes: dict[int, list[float]] = defaultdict(list)
    for probe in answered:
        minutes[int(probe.at_s // 60)].append(probe.seconds)
    per_minute = {minute: round(quantile(values, 0.99), 3) for minute, values in sorted(minutes.items())}
    p99 = quantile((probe.seconds for probe in answered), 0.99)
    others = Counter(probe.outcome for probe in innocent.probes if probe.outcome != "200")
    figure = (
        f"p99 {p99:.3f} s, p50 {quantile([p.seconds for p in answered], 0.5):.3f} s, {len(answered)} GETs "
        f"(worst minute {max(per_minute.values(), default=float('nan')):.3f} s); not 200: {dict(others)}"
    )
    return Check(
        f"the innocent user's GET p99 <= {P99_TARGET_S:g} s",
        p99 <= P99_TARGET_S,
        figure,
        kind=Kind.TARGET,
        data={"p99_s": p99, "p99_by_minute_s": per_minute, "not_200": dict(others)},
    )


def innocent_starts(soak: SoakStack, innocent: Innocent, started_at: float) -> Check:
    """From the innocent user's POST (the job's created_at) to its first step's report (running_at)."""
    rows = soak.rows(select(Job.id, Job.created_at, Job.running_at).where(Job.id.in_(innocent.done.jobs)))
    waits = {
        round(as_utc(row.created_at).timestamp() - started_at, 1): as_utc(row.running_at).timestamp()
        - as_utc(row.created_at).timestamp()
        for row in rows
        if row.running_at is not None
    }
    figure = (
        f"p50 {quantile(waits.values(), 0.5):.1f} s, p99 {quantile(waits.values(), 0.99):.1f} s, "
        f"max {max(waits.values(), default=float('nan')):.1f} s over {len(waits)} of {len(rows)} jobs"
    )
    series = {at: round(wait, 2) for at, wait in sorted(waits.items())}
    return Check(
        "the innocent user's submit-to-start", True, figure, kind=Kind.TARGET, data={"by_submit_s": series}
    )


def restarts(kills: list[Kill]) -> list[tuple[float, float]]:
    """The windows of the planned PostgreSQL restarts: from the kill until RESTART_GRACE_S after the database
    accepted connections again, when /healthz answering 503 is the truth."""
    return [
        (kill.at_s, kill.back_s + RESTART_GRACE_S)
        for kill in kills
        if kill.target == Target.POSTGRES and kill.pid is not None
    ]


def healthz(answers: list[Probe], kills: list[Kill]) -> Check:
    """/healthz never answered 503, but while the database was down for its planned restart."""
    windows = restarts(kills)
    unavailable = [answer.at_s for answer in answers if answer.outcome == "503"]
    during = [at for at in unavailable if any(begin <= at <= end for begin, end in windows)]
    offenders = [f"503 at {at:.1f} s" for at in unavailable if at not in during]
    figure = f"answers {dict(Counter(answer.outcome for answer in answers))}"
    if during:
        figure += f"; {len(during)} x 503 during the planned PostgreSQL restart, not counted"
    return Check("/healthz never 503", not offenders, figure, named(offenders))


def no_server_errors(answers: dict[str, dict[str, int]]) -> Check:
    """No request of any user or poller was answered 500 (a fault of the service's own, however loaded):
    503 is /healthz's check's, a request cut by a kill has no answer."""
    offenders = [
        f"{who}: {count} x {status}"
        for who, outcomes in answers.items()
        for status, count in outcomes.items()
        if status.isdigit() and int(status) >= 500 and status != "503"
    ]
    return Check("no request answered 500", not offenders, "; ".join(offenders) or "none", named(offenders))


def processes_left(left: list[Seen]) -> Check:
    offenders = [f"pid {seen.pid}: {seen.argv}" for seen in left]
    return Check("no process left", not offenders, f"{len(left)} still running", named(offenders))
