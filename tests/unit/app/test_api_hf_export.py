"""model.arch hf_causal_lm at the API: its directory checked at submit (422s naming the field), and the export
a finished job leaves served to its owner alone, only while its bytes hash to the sha256 written beside it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.keys import create_key
from tests.unit.conftest import assert_problem, job_body, submit

TEXT = {"dataset": "tokens", "root": "ids", "block_size": 8, "vocab_size": 32}


def hf(**model: Any) -> dict[str, Any]:
    return {"model": {"arch": "hf_causal_lm", "path": "llama", **model}, "data": TEXT}


def model_files(data_dir: Path, *names: str) -> None:
    (data_dir / "llama").mkdir()
    (data_dir / "ids").mkdir()
    (data_dir / "ids" / "train.bin").write_bytes(bytes(2 * 1000))
    for name in names:
        (data_dir / "llama" / name).write_text(json.dumps({"vocab_size": 32}))


def test_an_hf_model_directory_is_checked_at_submit(data_dir: Path, client: TestClient) -> None:
    model_files(data_dir)
    missing = client.post("/v1/jobs", json=job_body(**hf()))
    assert_problem(missing, "model.path", "model.path 'llama' holds no config.json")
    assert "holds no *.safetensors weights" in missing.json()["detail"]
    (data_dir / "llama" / "config.json").write_text("{}")
    assert client.post("/v1/jobs", json=job_body(**hf(config_only=True))).status_code == 201
    outside = client.post("/v1/jobs", json=job_body(**hf(path="absent")))
    assert_problem(outside, "model.path", "is not a directory under TRAINYARD_DATA_DIR")
    unset = client.post("/v1/jobs", json=job_body(model={"arch": "hf_causal_lm"}, data=TEXT))
    assert_problem(unset, "model.path", "model.arch hf_causal_lm is read from model.path, and it is not set")
    lora = client.post("/v1/jobs", json=job_body(model={"arch": "mlp", "lora": {"r": 4}}))
    assert_problem(lora, "model.lora", "model.lora applies to model.arch hf_causal_lm, and the job uses")


def export_of(settings: Settings, job_id: int, payload: bytes) -> Path:
    """export.tar and its sidecar, as the job's rank 0 writes them."""
    tar = settings.runs_dir / str(job_id) / "export.tar"
    tar.parent.mkdir(parents=True, exist_ok=True)
    tar.write_bytes(payload)
    tar.with_name("export.tar.sha256").write_text(f"{hashlib.sha256(payload).hexdigest()}  export.tar\n")
    return tar


def test_the_export_is_served_while_its_bytes_are_the_ones_written(
    client: TestClient, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    none = client.get(f"/v1/jobs/{job_id}/export")
    assert none.status_code == 404 and f"job {job_id} has no export" in none.json()["detail"]
    tar = export_of(settings, job_id, b"tar of config.json and model.safetensors")
    served = client.get(f"/v1/jobs/{job_id}/export")
    assert served.status_code == 200 and served.content == tar.read_bytes()
    assert served.headers["content-type"] == "application/x-tar"
    assert f"job{job_id}-export.tar" in served.headers["content-disposition"]
    tar.write_bytes(b"tar of something else, same length as it!")
    changed = client.get(f"/v1/jobs/{job_id}/export")
    assert changed.status_code == 409 and "its sha256 is" in changed.json()["detail"]
    tar.with_name("export.tar.sha256").unlink()
    unsigned = client.get(f"/v1/jobs/{job_id}/export")
    assert unsigned.status_code == 409 and "export.tar.sha256 written beside it is missing" in unsigned.text


def test_an_export_leading_out_of_its_run_directory_is_not_served(
    client: TestClient, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    run_dir = settings.runs_dir / str(job_id)
    run_dir.mkdir(parents=True)
    (run_dir / "export.tar").symlink_to("/etc/passwd")
    refused = client.get(f"/v1/jobs/{job_id}/export")
    assert refused.status_code == 409 and "export.tar is refused" in refused.json()["detail"]


def test_another_users_export_is_a_404(auth_on: Settings, session: Session) -> None:
    ada, bob = (create_key(session, user, admin=False) for user in ("ada", "bob"))
    client = TestClient(create_app())
    created = client.post("/v1/jobs", json=job_body(), headers={"Authorization": f"Bearer {ada}"})
    job_id = created.json()["job"]["id"]
    export_of(auth_on, job_id, b"ada's weights")
    assert (
        client.get(f"/v1/jobs/{job_id}/export", headers={"Authorization": f"Bearer {bob}"}).status_code == 404
    )
    mine = client.get(f"/v1/jobs/{job_id}/export", headers={"Authorization": f"Bearer {ada}"})
    assert mine.content == b"ada's weights"
