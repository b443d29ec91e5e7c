"""A program job that prints its secret, through the whole service (embedded stack, 2 gloo ranks): its logs
show `****` where the value was, while the sha256 it prints of the value matches; the value is in no route's
output, no webhook body and nowhere in the API's SQLite file. A job that prints its secret and then fails
holds `****` in its message and events, and its logs stay masked once the secret is deleted. A secret
deleted while its job waits fails that job at its start with a reason that names it."""

from __future__ import annotations

import hashlib
import secrets
import time
from pathlib import Path

import pytest

from tests.integration.jobs import submit, wait_status
from tests.integration.servers import Stack
from tests.integration.test_program_e2e import program, push
from tests.unit.core.test_webhook_outbox import SECRET, Receiver

pytestmark = pytest.mark.integration

SCRIPT = (
    "import hashlib, os, sys, time\n"
    "value = os.environ['HF_TOKEN']\n"
    "digest = hashlib.sha256(value.encode()).hexdigest()\n"
    "print('token is', value, 'sha256', digest, os.environ['MODE'], flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
    "if sys.argv[2:]:\n"
    "    print(f'Error: the token {value} was refused', flush=True)\n"
    "    os._exit(3)\n"
)


def database_bytes(stack: Stack) -> bytes:
    path = Path(stack.env["TRAINYARD_DATABASE_URL"].removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_a_printed_secret_is_masked_and_stored_nowhere(embedded_stack: Stack, tmp_path: Path) -> None:
    value = "hf_" + secrets.token_urlsafe(24)
    (tmp_path / "show.py").write_text(SCRIPT)
    code = push(embedded_stack, tmp_path)
    receiver = Receiver()
    try:
        with embedded_stack.client() as client:
            made = client.post("/v1/secrets", json={"name": "hf-token", "value": value})
            assert made.status_code == 201, made.text
            hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["*"], "secret": SECRET})
            env = {"HF_TOKEN": {"secret": "hf-token"}, "MODE": "fast"}
            spec = program(code, 1, program={"entrypoint": ["python", "show.py", "0"]}, env=env)
            job_id = submit(client, spec)["id"]
            job = wait_status(client, job_id, {"succeeded", "failed"})
            assert job["status"] == "succeeded", job
            logs = [
                client.get(f"/v1/jobs/{job_id}/logs", params=params).json()["text"]
                for params in ({"rank": 0}, {"rank": 1}, {})
            ]
            digest = hashlib.sha256(value.encode()).hexdigest()
            assert f"token is **** sha256 {digest} fast" in logs[0], logs[0]
            deadline = time.monotonic() + 15
            while not any(b'"job.succeeded"' in body for _, body in receiver.received):
                assert time.monotonic() < deadline, "no job.succeeded delivery"
                time.sleep(0.1)
            client.delete(f"/v1/webhooks/{hook.json()['id']}")
            shown = [
                *logs,
                made.text,
                client.get(f"/v1/jobs/{job_id}").text,
                client.get("/v1/jobs").text,
                client.get(f"/v1/jobs/{job_id}/events").text,
                client.get(f"/v1/jobs/{job_id}/metrics").text,
                client.get(f"/v1/jobs/{job_id}/checkpoints").text,
                client.get("/v1/queue").text,
                client.get("/v1/secrets").text,
                client.get("/metrics").text,
                client.post("/v1/jobs", params={"dry_run": "true"}, json=spec).text,
            ]
        assert all(value not in text for text in shown)
        assert all(value.encode() not in body for _, body in receiver.received)
        assert b"hf-token" in database_bytes(embedded_stack)
        assert value.encode() not in database_bytes(embedded_stack)
    finally:
        receiver.close()


def test_a_failed_job_s_message_and_its_logs_after_the_secret_is_gone_stay_masked(
    embedded_stack: Stack, tmp_path: Path
) -> None:
    value = "tok_" + secrets.token_urlsafe(24)
    (tmp_path / "show.py").write_text(SCRIPT)
    code = push(embedded_stack, tmp_path)
    with embedded_stack.client() as client:
        assert client.post("/v1/secrets", json={"name": "refused", "value": value}).status_code == 201
        env = {"HF_TOKEN": {"secret": "refused"}, "MODE": "fails"}
        spec = program(code, 1, program={"entrypoint": ["python", "show.py", "0", "fail"]}, env=env)
        job_id = submit(client, spec)["id"]
        job = wait_status(client, job_id, {"succeeded", "failed"})
        assert job["status"] == "failed", job
        # No error recorded: the message quotes the last lines of the log of the rank that failed first.
        assert "Error: the token **** was refused" in job["message"], job
        events = client.get(f"/v1/jobs/{job_id}/events").text
        assert "Error: the token **** was refused" in events
        # Deleted after the job ran: its logs are masked with the value the job was given. The first rank
        # to fail may take the other down before it printed.
        assert client.delete("/v1/secrets/refused").status_code == 204
        logs = "".join(
            client.get(f"/v1/jobs/{job_id}/logs", params={"rank": rank}).json()["text"] for rank in (0, 1)
        )
        shown = [logs, client.get(f"/v1/jobs/{job_id}").text, events, client.get("/v1/jobs").text]
    assert "token is **** sha256" in logs and "Error: the token **** was refused" in logs, logs
    assert all(value not in text for text in shown)
    assert value.encode() not in database_bytes(embedded_stack)


def test_a_secret_deleted_while_its_job_waits_fails_the_job_at_start(
    embedded_stack: Stack, tmp_path: Path
) -> None:
    (tmp_path / "show.py").write_text(SCRIPT)
    code = push(embedded_stack, tmp_path)
    with embedded_stack.client() as client:
        assert client.post("/v1/secrets", json={"name": "short-lived", "value": "v4lue"}).status_code == 201
        # The first job names no secret: the second waits for it, and its secret goes meanwhile.
        plain = {"HF_TOKEN": "not-a-secret", "MODE": "a"}
        first = submit(
            client, program(code, 1, program={"entrypoint": ["python", "show.py", "0"]}, env=plain)
        )
        named = {"HF_TOKEN": {"secret": "short-lived"}, "MODE": "b"}
        spec = program(code, 1, program={"entrypoint": ["python", "show.py", "0"]}, env=named)
        waiting = submit(client, {**spec, "depends_on": [first["id"]]})["id"]
        assert client.delete("/v1/secrets/short-lived").status_code == 204
        assert wait_status(client, first["id"], {"succeeded"})["status"] == "succeeded"
        failed = wait_status(client, waiting, {"failed", "succeeded"})
    assert (failed["status"], failed["status_reason"]) == ("failed", "launch_error")
    assert "env.HF_TOKEN: the secret 'short-lived' no longer exists" in failed["message"]
