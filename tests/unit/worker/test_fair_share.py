"""Fair share (issue 19 #2): among jobs of one priority, the user who used the cluster less lately starts
first, in the workers' claims and in the queue the API shows, which says why."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from fastapi.testclient import TestClient

from app.main import create_app
from core.config import get_settings
from core.db import session_scope
from core.models import UserUsage, utcnow
from core.usage import Use, use_now
from worker.executors.local.leases import claim_next
from worker.executors.local.telemetry import charge

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

HOUR_S = 3600.0


def test_the_lighter_users_job_starts_first(database: WorkerDb) -> None:
    now, settings = utcnow(), get_settings()
    with session_scope() as session:
        # Bob ran more than Ada, but five half-lives ago: 48 GPU-h then is 1.5 GPU-h now.
        charge(session, "ada", 14.2 * HOUR_S, 0.0, now, settings)
        charge(session, "bob", 48 * HOUR_S, 0.0, now - timedelta(days=5), settings)
    one_gpu = database.spec(num_gpus=1)  # the fake host has 4
    ada_old, ada_new = (database.add_job(one_gpu, owner="ada") for _ in range(2))
    bob = database.add_job(one_gpu, owner="bob")
    urgent = database.add_job(one_gpu, owner="ada", priority=1)  # priority still comes first
    carol = database.add_job(one_gpu, owner="carol")  # never charged: nothing used

    client = TestClient(create_app(), base_url="http://localhost")
    queue = client.get("/v1/queue").json()
    order = [urgent, carol, bob, ada_old, ada_new]
    assert [entry["job_id"] for entry in queue["data"]] == order
    assert queue["fair_share"] == (
        "among jobs of equal priority the users who used less lately start first: "
        "carol has used 0.0 GPU-h, bob 1.5 GPU-h, ada 14.2 GPU-h (use halves every 24 h)"
    )
    positions = [client.get(f"/v1/jobs/{job_id}").json()["queue_position"] for job_id in order]
    assert positions == [1, 2, 3, 4, 5]

    # The GPUs go in that order: Ada's newer job is the one left waiting.
    assert [claim.job_id for claim in iter(claim_next, None)] == order[:4]
    assert client.get("/v1/queue").json()["data"][0]["job_id"] == ada_new


def test_a_charge_adds_to_what_is_left_of_earlier_ones(database: WorkerDb) -> None:
    now, settings = utcnow(), get_settings()
    day = timedelta(seconds=settings.fair_share_half_life_s)
    with session_scope() as session:
        charge(session, "ada", 3600.0, 7200.0, now - day, settings)
        charge(session, "ada", 100.0, 0.0, now, settings)
    with session_scope() as session:
        assert use_now(session.get_one(UserUsage, "ada"), now, settings) == Use(1900.0, 3600.0)


def test_the_sentence_names_the_cpu_core_hours_that_decided(database: WorkerDb) -> None:
    """Issue 33 #8: on a CPU box the order comes from CPU core-hours, a few minutes of which still show."""
    now, settings = utcnow(), get_settings()
    with session_scope() as session:
        charge(session, "alice", 0.0, 90.0, now, settings)
        charge(session, "carol", 0.0, 2 * HOUR_S, now, settings)
    for owner in ("carol", "alice", "bob"):
        database.add_job(database.spec(nproc_per_node=1), owner=owner)

    client = TestClient(create_app(), base_url="http://localhost")
    assert client.get("/v1/queue").json()["fair_share"] == (
        "among jobs of equal priority the users who used less lately start first: "
        "bob has used 0.0 CPU core-h, alice 0.025 CPU core-h, carol 2.0 CPU core-h (use halves every 24 h)"
    )


def test_the_sentence_says_when_no_one_has_used_anything(database: WorkerDb) -> None:
    for owner in ("alice", "bob"):
        database.add_job(database.spec(nproc_per_node=1), owner=owner)
    client = TestClient(create_app(), base_url="http://localhost")
    assert client.get("/v1/queue").json()["fair_share"] == (
        "among jobs of equal priority the users who used less lately start first; none of these has used "
        "any lately, so the oldest job starts first (use halves every 24 h)"
    )
