"""The SSE metrics stream: rows as they land, resume by step, an end event, stopping on disconnect."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, update

from app.api.routes import stream
from core.db import session_scope
from core.models import Job, Metric
from core.states import JobStatus
from tests.unit.conftest import submit


def add_metrics(job_id: int, rows: list[tuple[str, int, float]]) -> None:
    with session_scope() as session:
        session.add_all(
            Metric(job_id=job_id, name=name, step=step, value=value) for name, step, value in rows
        )


def set_status(job_id: int, status: JobStatus, message: str | None = None) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status=status, message=message))


def read_events(client: TestClient, url: str, **headers: str) -> list[tuple[str | None, str, str]]:
    """(id, event, data) for every event until the server closes the stream."""
    events = []
    with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if not line:
                events.append((fields.get("id"), fields["event"], fields["data"]))
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
    return events


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "POLL_S", 0.02)


def test_finished_job_streams_every_row_then_ends(client: TestClient) -> None:
    job_id = submit(client)["id"]
    add_metrics(job_id, [("loss", 5, 0.9), ("lr", 5, 0.1), ("loss", 10, 0.5), ("eval_accuracy", 10, 0.8)])
    set_status(job_id, JobStatus.SUCCEEDED, "done")
    events = read_events(client, f"/v1/jobs/{job_id}/metrics/stream")
    metrics = [(i, json.loads(d)["name"], json.loads(d)["step"]) for i, e, d in events if e == "metric"]
    assert metrics == [("5", "loss", 5), ("5", "lr", 5), ("10", "eval_accuracy", 10), ("10", "loss", 10)]
    assert events[-1][1] == "end"
    assert json.loads(events[-1][2]) == {"status": "succeeded", "message": "done"}


def test_resumes_after_a_step_and_filters_by_name(client: TestClient) -> None:
    job_id = submit(client)["id"]
    add_metrics(job_id, [("loss", 5, 0.9), ("lr", 5, 0.1), ("loss", 10, 0.5), ("lr", 10, 0.1)])
    set_status(job_id, JobStatus.FAILED)
    url = f"/v1/jobs/{job_id}/metrics/stream"
    resumed = read_events(client, url, **{"Last-Event-ID": "5"})
    assert [(e, json.loads(d).get("step")) for _, e, d in resumed] == [
        ("metric", 10),
        ("metric", 10),
        ("end", None),
    ]
    only_loss = read_events(client, f"{url}?name=loss&after_step=0")
    assert [json.loads(d)["value"] for _, e, d in only_loss if e == "metric"] == [0.9, 0.5]
    assert json.loads(only_loss[-1][2])["status"] == "failed"


def test_live_rows_arrive_including_a_late_row_at_a_step_already_sent(client: TestClient) -> None:
    job_id = submit(client)["id"]
    set_status(job_id, JobStatus.RUNNING)
    add_metrics(job_id, [("loss", 5, 0.9)])

    def train_on() -> None:
        time.sleep(0.3)
        add_metrics(job_id, [("eval_accuracy", 5, 0.7)])  # evaluation lands after its step's loss
        time.sleep(0.2)
        add_metrics(job_id, [("loss", 10, 0.4)])
        set_status(job_id, JobStatus.SUCCEEDED)

    writer = threading.Thread(target=train_on)
    writer.start()
    events = read_events(client, f"/v1/jobs/{job_id}/metrics/stream")
    writer.join()
    names = [(json.loads(d)["name"], json.loads(d)["step"]) for _, e, d in events if e == "metric"]
    assert names == [("loss", 5), ("eval_accuracy", 5), ("loss", 10)]
    assert events[-1][1] == "end"


def test_stream_stops_when_the_client_disconnects(client: TestClient) -> None:
    job_id = submit(client)["id"]
    set_status(job_id, JobStatus.RUNNING)
    add_metrics(job_id, [("loss", 5, 0.9)])
    polls = 0

    async def gone_after_two_polls() -> bool:
        nonlocal polls
        polls += 1
        return polls > 2

    async def collect() -> list[str]:
        return [chunk async for chunk in stream.metric_events(job_id, None, -1, gone_after_two_polls)]

    chunks = asyncio.run(collect())
    assert len(chunks) == 1 and chunks[0].startswith("id: 5\nevent: metric\n")
    assert polls == 3


def test_a_job_deleted_while_streaming_ends_the_stream_with_a_deleted_end_event(client: TestClient) -> None:
    job_id = submit(client)["id"]
    set_status(job_id, JobStatus.RUNNING)
    add_metrics(job_id, [("loss", 5, 0.9)])
    polls = 0

    async def deleted_after_the_first_poll() -> bool:
        # The job ends and is deleted between two polls: the stream never sees it finished.
        nonlocal polls
        polls += 1
        if polls == 2:
            with session_scope() as session:
                session.execute(delete(Job).where(Job.id == job_id))
        return False

    async def collect() -> list[str]:
        return [chunk async for chunk in stream.metric_events(job_id, None, -1, deleted_after_the_first_poll)]

    metric, end = asyncio.run(collect())
    assert metric.startswith("id: 5\nevent: metric\n")
    event, data = end.strip().split("\n")
    assert event == "event: end"
    assert json.loads(data.removeprefix("data: ")) == {
        "status": "deleted",
        "message": f"job {job_id} was deleted",
    }


def test_missing_job_is_a_404_before_streaming(client: TestClient) -> None:
    response = client.get("/v1/jobs/12345/metrics/stream")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
