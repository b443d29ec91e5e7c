"""Every example spec (examples/*.json, and the bundles' examples/*/spec.json) submits as written, and its
retry, from the latest checkpoint and from scratch, stores the same spec (plus checkpoint.resume_from): what
a user copies from the README survives a failure. Data an example reads is written small first; GPU
examples submit here as on a GPU cluster, as no worker registered hosts without them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from tests.unit.app.test_api_retry_user_code import GZIP, assert_retries_as_submitted, fail, submitted
from tests.unit.code_archives import bundle_archive
from tests.unit.trainers.token_corpus import DOCUMENTS, save_tokenizer, write_ids, write_jsonl

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SPECS = sorted(EXAMPLES.glob("*.json")) + sorted(EXAMPLES.glob("*/spec.json"))
# What the API checks of an hf_causal_lm's directory at submit: a config and weights files (never read here).
LLAMA_CONFIG = {"model_type": "llama", "vocab_size": 32, "max_position_embeddings": 2048}


def _image_folder(data_dir: Path) -> None:
    for label in ("cat", "dog"):
        (data_dir / "imagenet" / "train" / label).mkdir(parents=True)


def _hf_lora(data_dir: Path) -> None:
    model = data_dir / "models" / "llama"
    save_tokenizer(model)
    (model / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (model / "model.safetensors").write_bytes(b"")
    write_jsonl(data_dir / "corpus" / "docs.jsonl", DOCUMENTS * 400)


def _tokens(data_dir: Path) -> None:
    write_ids(data_dir / "tokens-demo" / "train.bin", [i % 64 for i in range(64 * 64)])


DATA: dict[str, Callable[[Path], None]] = {
    "image_folder_stream": _image_folder,
    "hf_lora_local": _hf_lora,
    "tokens_lm": _tokens,
}


def _name(path: Path) -> str:
    return path.parent.name if path.name == "spec.json" else path.stem


def _body(path: Path, client: TestClient, data_dir: Path) -> dict[str, Any]:
    """The example as a user submits it: its bundle pushed (a bundle example's folder is the bundle), its
    data in place."""
    body: dict[str, Any] = json.loads(path.read_text())
    if (write := DATA.get(_name(path))) is not None:
        write(data_dir)
    if path.name == "spec.json":
        files = {p.name: p.read_text() for p in path.parent.glob("*.py")}
        pushed = client.post("/v1/code", content=bundle_archive(files), headers=GZIP)
        assert pushed.status_code == 201, pushed.text
        body["code"] = pushed.json()["id"]
    return body


@pytest.mark.parametrize("path", SPECS, ids=[_name(p) for p in SPECS])
def test_every_example_retries_as_submitted(
    data_dir: Path, client: TestClient, session: Session, settings: Settings, path: Path
) -> None:
    body = _body(path, client, data_dir)
    job_id = submitted(client, body)
    fail(session, job_id)
    assert_retries_as_submitted(client, session, settings, job_id, body)
