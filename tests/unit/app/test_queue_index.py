"""The API's index of queue positions (app/services/queue_index.py): the position every view shows is the
job's place in GET /v1/queue, whoever changed the queue (the API, or a worker and the reaper writing rows),
and a lookup costs the same at any depth."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import delete, event, insert, select, update
from sqlalchemy.orm import Session

from app.main import create_app
from app.services.queue import list_queue
from app.services.queue_index import first_to_start
from core import db
from core.config import Settings
from core.keys import create_key
from core.models import Base, Job, UserUsage
from core.queue_order import QUEUE_CHANGES, START_ORDER
from jobspec.plan import NO_HOSTS, resolve_plan
from jobspec.spec import JobSpec
from tests.unit.conftest import job_body, submit

JOBS = Base.metadata.tables[Job.__tablename__]


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _assert_every_view_agrees(client: TestClient, admin: dict[str, str], ids: list[int]) -> None:
    """GET /v1/jobs/{id} and GET /v1/jobs show each job at its place in GET /v1/queue (None once it left)."""
    listed = {
        entry["job_id"]: entry["position"] for entry in client.get("/v1/queue", headers=admin).json()["data"]
    }
    shown = {i: client.get(f"/v1/jobs/{i}", headers=admin).json()["queue_position"] for i in ids}
    paged = {job["id"]: job["queue_position"] for job in client.get("/v1/jobs", headers=admin).json()["data"]}
    assert shown == {i: listed.get(i) for i in ids} == {i: paged[i] for i in ids}


def _change(session: Session, job_id: int, **values: Any) -> None:
    """As a worker or the reaper changes a job: a row written outside the API."""
    session.execute(update(Job).where(Job.id == job_id).values(**values))
    session.commit()


def test_positions_follow_every_change_to_the_queue_whoever_makes_it(
    auth_on: Settings, session: Session
) -> None:
    alice, bob, root = (create_key(session, user, admin=user == "root") for user in ("alice", "bob", "root"))
    client, admin = TestClient(create_app()), _as(root)
    ids = [
        client.post("/v1/jobs", json=job_body(priority=priority), headers=_as(who)).json()["job"]["id"]
        for who, priority in [(alice, 0), (bob, 0), (alice, 5), (bob, 0), (alice, 0), (bob, 5), (alice, 0)]
    ]
    _assert_every_view_agrees(client, admin, ids)
    # Alice used the cluster lately: at each priority, bob's jobs now start before hers.
    now = datetime.now(UTC)
    session.add(UserUsage(owner="alice", gpu_seconds=3600.0, cpu_core_seconds=0.0, as_of=now, share_key=1.0))
    session.commit()
    _assert_every_view_agrees(client, admin, ids)
    _change(session, ids[2], status="starting")  # a worker claims it
    _assert_every_view_agrees(client, admin, ids)
    _change(session, ids[4], priority=9)
    _change(session, ids[2], status="queued")  # the reaper requeues it
    _assert_every_view_agrees(client, admin, ids)
    session.execute(delete(Job).where(Job.id == ids[1]))
    session.commit()
    _assert_every_view_agrees(client, admin, ids[:1] + ids[2:])


def test_an_index_behind_the_changes_kept_reads_the_queue_again(client: TestClient, session: Session) -> None:
    ids = [submit(client, priority=p)["id"] for p in (0, 0, 3)]
    _assert_every_view_agrees(client, {}, ids)
    _change(session, ids[0], priority=7)
    _change(session, ids[2], status="starting")
    newest = session.scalar(select(QUEUE_CHANGES.c.version).order_by(QUEUE_CHANGES.c.version.desc()).limit(1))
    # As if more changes than queue_changes keeps had come since the index last looked.
    session.execute(delete(QUEUE_CHANGES).where(QUEUE_CHANGES.c.version < newest))
    session.commit()
    _assert_every_view_agrees(client, {}, ids)
    assert client.get(f"/v1/jobs/{ids[0]}").json()["queue_position"] == 1


def _sqlite_work_of_a_lookup(client: TestClient, job_id: int) -> int:
    """Thousands of SQLite VM instructions a warm GET /v1/jobs/{id} runs: a count of the work done, not a
    time."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    engine = db.get_engine()
    engine.dispose()  # new connections, each counting
    listener = lambda connection, _record: connection.set_progress_handler(count, 1000)  # noqa: E731
    event.listen(engine, "connect", listener)
    try:
        client.get(f"/v1/jobs/{job_id}")  # brings the index up to date
        steps = 0
        assert client.get(f"/v1/jobs/{job_id}").json()["queue_position"] is not None
        return steps
    finally:
        event.remove(engine, "connect", listener)
        engine.dispose()


def _queue_more(session: Session, like: int, count: int) -> None:
    row = session.execute(select(JOBS).where(JOBS.c.id == like)).mappings().one()
    copies = [{**row, "id": None, "idempotency_key": None} for _ in range(count)]
    session.execute(insert(JOBS), copies)
    session.commit()


def test_a_lookup_of_a_queued_job_costs_the_same_at_any_depth(client: TestClient, session: Session) -> None:
    last = submit(client)["id"]
    _queue_more(session, last, 50)
    shallow = _sqlite_work_of_a_lookup(client, last)
    _queue_more(session, last, 2000)
    deep = _sqlite_work_of_a_lookup(client, last)
    assert deep <= shallow + 2, (shallow, deep)


def test_the_queue_shows_its_first_entries_at_their_places_among_all(
    auth_on: Settings, session: Session
) -> None:
    """`limit` bounds what a GET /v1/queue reads and shows, never the positions: a user whose jobs wait behind
    another's sees theirs where they stand in the whole queue."""
    alice, bob, root = (create_key(session, user, admin=user == "root") for user in ("alice", "bob", "root"))
    client = TestClient(create_app())
    for _ in range(4):
        assert client.post("/v1/jobs", json=job_body(), headers=_as(alice)).status_code == 201
    bobs = [client.post("/v1/jobs", json=job_body(), headers=_as(bob)).json()["job"]["id"] for _ in range(3)]

    everyone = client.get("/v1/queue", headers=_as(root)).json()["data"]
    assert [entry["position"] for entry in everyone] == [1, 2, 3, 4, 5, 6, 7]
    first = client.get("/v1/queue", params={"limit": 2}, headers=_as(root)).json()["data"]
    assert first == everyone[:2]
    mine = client.get("/v1/queue", params={"limit": 2}, headers=_as(bob)).json()["data"]
    assert [(entry["job_id"], entry["position"]) for entry in mine] == [(bobs[0], 5), (bobs[1], 6)]
    assert mine == [entry for entry in everyone if entry["owner"] == "bob"][:2]
    refused = client.get("/v1/queue", params={"limit": 0}, headers=_as(bob))
    assert refused.status_code == 422 and "limit" in refused.text


OWNERS = ("ada", "bob", "cy", "dee")


def _fill_queue(session: Session, waiting: set[int]) -> None:
    """40 queued jobs of four owners at three priorities, those numbered in `waiting` waiting for their
    depends_on; two owners tie on their share key, one was never charged."""
    now = datetime.now(UTC)
    for owner, key in (("ada", 3.0), ("bob", 1.0), ("cy", 1.0)):
        session.add(UserUsage(owner=owner, gpu_seconds=1.0, cpu_core_seconds=0.0, as_of=now, share_key=key))
    plan = resolve_plan(JobSpec.model_validate(job_body()), NO_HOSTS).public()
    row = {"name": "j", "spec": {}, "plan": plan, "status": "queued", "created_at": now}
    for n in range(40):
        values = {
            **row,
            "owner": OWNERS[n * 7 % 4],
            "priority": (n * 5 % 3) * 10,
            "waiting_on": int(n in waiting),
        }
        session.execute(insert(JOBS).values(**values))
    session.commit()


def test_the_first_to_start_are_the_order_by_s_first_at_any_count(
    settings: Settings, session: Session
) -> None:
    """first_to_start, which GET /v1/queue plays forward, merges the index into START_ORDER's order exactly:
    priorities, owners by share key (two of them tied, taking turns by age, one never charged), then age;
    a job waiting for its depends_on is not among them."""
    _fill_queue(session, waiting={9})
    expected = session.scalars(
        select(Job.id).where(Job.status == "queued", Job.waiting_on == 0).order_by(*START_ORDER)
    ).all()
    assert len(expected) == 39
    for count in (1, 7, 39, 100):
        assert [job.id for job in first_to_start(session, count)] == expected[:count], count


def test_the_queue_lists_the_order_by_s_first_with_the_waiting_jobs_at_their_places(
    settings: Settings, session: Session
) -> None:
    """GET /v1/queue takes its first entries from the index, not from a sort of the whole queue, and puts the
    jobs waiting for their depends_on where START_ORDER puts them: for an admin, who sees every job, and for
    each owner, who sees their own."""
    _fill_queue(session, waiting={0, 9, 13, 30})
    for owner in (None, *OWNERS):
        query = select(Job.id).where(Job.status == "queued").order_by(*START_ORDER)
        expected = session.scalars(query if owner is None else query.where(Job.owner == owner)).all()
        for limit in (1, 5, 40):
            shown = [entry.job_id for entry in list_queue(session, owner, limit).data]
            assert shown == expected[:limit], (owner, limit)


def test_a_lookup_of_a_queued_job_reads_its_row_alone_while_the_queue_has_not_changed(
    client: TestClient, session: Session
) -> None:
    """The row comes with the queue's newest change (QUEUE_HEAD): an index already at it reads nothing more.
    Once the queue changes, the next lookup catches up, and shows the new place."""
    first, second = submit(client)["id"], submit(client)["id"]
    statements: list[str] = []

    def seen(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    engine = db.get_engine()
    client.get(f"/v1/jobs/{second}")  # brings the index up to date
    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert client.get(f"/v1/jobs/{second}").json()["queue_position"] == 2
        assert len(statements) == 1, statements
        _change(session, first, status="starting")  # a worker claims the job ahead
        statements.clear()
        assert client.get(f"/v1/jobs/{second}").json()["queue_position"] == 1
        assert len(statements) == 2, statements
    finally:
        event.remove(engine, "before_cursor_execute", seen)
