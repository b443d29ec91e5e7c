"""Queue positions at the same cost at any depth: each API process keeps the queued jobs' ids sorted by
priority and owner, and brings them up to date from queue_changes (core/queue_order.py) before it answers.

A position is START_ORDER's rank (priority, then the owner's fair share, then age) counted from the index:
the jobs of higher priorities, then per owner of the job's priority all of those whose owner used less and,
for owners with the same share key, the older ones: a count per owner, a bisection in its ids. Share keys
change with every heartbeat that charges use, so they are read when asked, one row per owner of that
priority, never kept."""

from __future__ import annotations

import heapq
import itertools
import threading
from bisect import bisect_left, insort
from collections import defaultdict
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, Integer, bindparam, cast, func, literal, null, select, union_all
from sqlalchemy.orm import Session

from core.queue_order import JOBS, QUEUE_CHANGES, USAGE
from core.states import JobStatus
from core.usage import NO_USE

# A job waiting for its depends_on is not in line to start: the jobs behind it are not counted behind it.
_QUEUED = select(JOBS.c.id, JOBS.c.priority, JOBS.c.owner).where(
    JOBS.c.status == JobStatus.QUEUED, JOBS.c.waiting_on == 0
)
# Built once with parameters, as the queries run at every change: SQLAlchemy then finds them compiled
# without working out a new statement's cache key each time.
# The newest change's version first (part 0), then each change after `after` with its job as it stands now
# if that job is in line, else with a null priority (part 1): one statement where the head, the changes and
# their jobs were three. A GET of a job when nothing changed reads the one row of its head.
_HEAD_THEN_CHANGES = union_all(
    select(
        literal(0).label("part"),
        func.max(QUEUE_CHANGES.c.version).label("version"),
        cast(null(), Integer).label("job_id"),
        cast(null(), Integer).label("priority"),
        cast(null(), JOBS.c.owner.type).label("owner"),
    ),
    select(literal(1), QUEUE_CHANGES.c.version, QUEUE_CHANGES.c.job_id, JOBS.c.priority, JOBS.c.owner)
    .select_from(
        QUEUE_CHANGES.outerjoin(
            JOBS,
            (JOBS.c.id == QUEUE_CHANGES.c.job_id)
            & (JOBS.c.status == JobStatus.QUEUED)
            & (JOBS.c.waiting_on == 0),
        )
    )
    .where(QUEUE_CHANGES.c.version > bindparam("after")),
).order_by("part", "version")
# The newest change's version, as a column of another read: a GET of a queued job reads it with the job's row,
# and an index already at it needs no statement of its own to catch up.
QUEUE_HEAD = select(func.max(QUEUE_CHANGES.c.version)).scalar_subquery()
_SHARES_OF = select(USAGE.c.owner, USAGE.c.share_key).where(
    USAGE.c.owner.in_(bindparam("owners", expanding=True))
)


@dataclass(frozen=True)
class QueuedJob:
    """What orders a job in the queue."""

    id: int
    priority: int
    owner: str


@dataclass
class _Index:
    version: int = -1  # the last change applied; -1: the queue was never read
    ids: defaultdict[int, defaultdict[str, list[int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )  # priority -> owner -> queued ids, ascending
    where: dict[int, tuple[int, str]] = field(default_factory=dict)  # queued id -> (priority, owner)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, job: QueuedJob) -> None:
        insort(self.ids[job.priority][job.owner], job.id)
        self.where[job.id] = (job.priority, job.owner)

    def remove(self, job_id: int) -> None:
        if (place := self.where.pop(job_id, None)) is None:
            return
        priority, owner = place
        ids = self.ids[priority][owner]
        del ids[bisect_left(ids, job_id)]
        if not ids:
            del self.ids[priority][owner]
            if not self.ids[priority]:
                del self.ids[priority]

    def reload(self, connection: Connection, head: int) -> None:
        """The whole queue, read after `head`: what it reads includes every change up to head."""
        self.ids.clear()
        self.where.clear()
        for row in connection.execute(_QUEUED):
            self.add(QueuedJob(row.id, row.priority, row.owner))
        self.version = head

    def catch_up(self, session: Session, head: int | None = None) -> None:
        """Applies the changes after `version`, or reads the queue again when the oldest kept change is not
        the next one (a new database, or one that went on past what queue_changes keeps). A change is applied
        as the job stands now, which may already include a later change: applying that one again is
        harmless. `head`, where the caller read it (QUEUE_HEAD) with the rows it asks about: nothing to do
        when the index is at it already."""
        if head is not None and head == self.version:
            return
        # Core statements on the session's connection: the ORM's execution path adds nothing to a read of
        # plain rows, and this runs on every GET of a queued job.
        connection = session.connection()
        head_row, *changes = connection.execute(_HEAD_THEN_CHANGES, {"after": self.version}).all()
        head = head_row.version or 0
        if head == self.version:
            return
        if self.version < 0 or head < self.version or not changes or changes[0].version != self.version + 1:
            self.reload(connection, head)
            return
        # A job changed twice comes with the same row each time: the last one stands.
        now = {change.job_id: change for change in changes}
        for job_id, change in now.items():
            self.remove(job_id)
            if change.priority is not None:
                self.add(QueuedJob(job_id, change.priority, change.owner))
        self.version = changes[-1].version

    def ahead_of(self, job: QueuedJob, shares: dict[str, float]) -> int:
        """Queued jobs that start before `job` (which need not be in the index itself)."""
        above = (owners for priority, owners in self.ids.items() if priority > job.priority)
        higher = sum(len(ids) for owners in above for ids in owners.values())
        mine = shares.get(job.owner, NO_USE)
        same = 0
        for owner, ids in self.ids.get(job.priority, {}).items():
            theirs = shares.get(owner, NO_USE)
            same += len(ids) if theirs < mine else bisect_left(ids, job.id) if theirs == mine else 0
        return higher + same


# One index per database: tests open many, each with an engine of its own.
_indexes: WeakKeyDictionary[Engine, _Index] = WeakKeyDictionary()
_indexes_lock = threading.Lock()


def _index_for(session: Session) -> _Index:
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    with _indexes_lock:
        return _indexes.setdefault(engine, _Index())


def _shares(session: Session, owners: set[str]) -> dict[str, float]:
    """The share keys of `owners`; one owner alone is ordered by age whatever its key."""
    if len(owners) < 2:
        return {}
    rows = session.connection().execute(_SHARES_OF, {"owners": list(owners)})
    return {row.owner: row.share_key for row in rows}


def queue_positions(session: Session, jobs: list[QueuedJob], head: int | None = None) -> dict[int, int]:
    """Each queued job's position, 1 = next to start, as GET /v1/queue lists them; `head` as catch_up
    takes it."""
    if not jobs:
        return {}
    index = _index_for(session)
    with index.lock:  # one thread catches up; the others then find it current
        index.catch_up(session, head)
        owners = {job.owner for job in jobs}.union(*(index.ids.get(job.priority, ()) for job in jobs))
        shares = _shares(session, owners)
        return {job.id: index.ahead_of(job, shares) + 1 for job in jobs}


def first_to_start(session: Session, count: int, owner: str | None = None) -> list[QueuedJob]:
    """The first `count` queued jobs that may start (of `owner`'s alone unless it is None), in start order
    (START_ORDER: priority, the owner's share, age), merged from the index's sorted ids: what it costs grows
    with `count` and the owners, never with the queue's depth."""
    index = _index_for(session)
    with index.lock:
        index.catch_up(session)
        if owner is not None:  # one owner's jobs start by priority, then age
            theirs = (
                QueuedJob(job_id, priority, owner)
                for priority in sorted(index.ids, reverse=True)
                for job_id in index.ids[priority].get(owner, ())
            )
            return list(itertools.islice(theirs, count))
        found: list[QueuedJob] = []
        for priority in sorted(index.ids, reverse=True):
            owners = index.ids[priority]
            shares = _shares(session, set(owners))
            by_share: defaultdict[float, list[str]] = defaultdict(list)
            for owner in owners:
                by_share[shares.get(owner, NO_USE)].append(owner)
            for share in sorted(by_share):
                # Owners of one share key take turns by age, as the ORDER BY's last key has them.
                tied = by_share[share]
                merged = heapq.merge(*(owners[owner] for owner in tied))
                for job_id in itertools.islice(merged, count - len(found)):
                    found.append(QueuedJob(job_id, priority, index.where[job_id][1]))
                if len(found) >= count:
                    return found
        return found


def in_start_order(session: Session, jobs: list[QueuedJob]) -> list[QueuedJob]:
    """`jobs` sorted as START_ORDER sorts them, with the owners' share keys as they stand now."""
    shares = _shares(session, {job.owner for job in jobs})
    return sorted(jobs, key=lambda job: (-job.priority, shares.get(job.owner, NO_USE), job.id))


def owners_by_priority(session: Session) -> dict[int, dict[str, int]]:
    """For each priority of the queued jobs that may start, each owner's oldest job id."""
    index = _index_for(session)
    with index.lock:
        index.catch_up(session)
        return {
            priority: {owner: ids[0] for owner, ids in owners.items()}
            for priority, owners in index.ids.items()
        }
