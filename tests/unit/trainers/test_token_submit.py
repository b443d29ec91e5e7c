"""A token dataset the job could not read is refused at submit with a 422 naming the field and the fix, from
the files' names and sizes (and one .jsonl line), before anything is stored; a good one plans."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import assert_nothing_stored, assert_problem, job_body
from tests.unit.trainers.token_corpus import DOCUMENTS, save_tokenizer, write_ids, write_jsonl

LM = (Path(__file__).resolve().parents[3] / "examples" / "tokens_lm" / "lm.py").read_text()
TOKENS = {"dataset": "tokens", "root": "ids", "block_size": 8, "vocab_size": 64, "val_fraction": 0}
TEXT = {"dataset": "text", "root": "corpus", "tokenizer": "tok", "block_size": 4}


@pytest.fixture
def lm_job(data_dir: Path, client: TestClient) -> Any:
    """A job body for the examples/tokens_lm bundle, pushed, on the given data section. (The data dir is set
    before the client reads the settings.)"""
    pushed = client.post(
        "/v1/code", content=bundle_archive({"lm.py": LM}), headers={"Content-Type": "application/gzip"}
    )
    assert pushed.status_code == 201, pushed.text
    code = pushed.json()["id"]

    def body(data: dict[str, Any], **sections: Any) -> dict[str, Any]:
        model = {"factory": "lm:build", "kwargs": {"vocab_size": 64}}
        return job_body(
            code=code, model=model, data=data, **{"train": {"loss": "lm:loss", "batch_size": 8}, **sections}
        )

    return body


def dry_run(client: TestClient, body: dict[str, Any]) -> Any:
    return client.post("/v1/jobs", json=body, params={"dry_run": True})


def test_good_token_and_text_datasets_plan(data_dir: Path, client: TestClient, lm_job: Any) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(100))
    assert dry_run(client, lm_job(TOKENS)).status_code == 200
    save_tokenizer(data_dir / "tok")
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS)
    assert dry_run(client, lm_job(TEXT)).status_code == 200


REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("no train.bin", TOKENS, "data.root", "holds no train.bin; put the training token ids there"),
    (
        "a width the file is not",
        {**TOKENS, "root": "odd"},
        "data.token_dtype",
        "is 201 bytes, not a whole number",
    ),
    (
        "a block longer than the data",
        {**TOKENS, "root": "short", "block_size": 1024},
        "data.block_size",
        "needs 1025 tokens for one window, and train.bin holds 100; lower data.block_size to at most 99",
    ),
    (
        "a held-out tail shorter than a block",
        {**TOKENS, "root": "short", "block_size": 40, "val_fraction": 0.1},
        "data.block_size",
        "the last 10% of train.bin holds 10; lower data.block_size to at most 9, hold out more",
    ),
    (
        "no block size",
        {**TOKENS, "root": "short", "block_size": None},
        "data.block_size",
        "set data.block_size",
    ),
    ("no tokenizer", {**TEXT, "tokenizer": None}, "data.tokenizer", "data.tokenizer is not set"),
    (
        "a tokenizer without its file",
        {**TEXT, "tokenizer": "empty"},
        "data.tokenizer",
        "holds no tokenizer.json",
    ),
    ("a tokenizer outside the data dir", {**TEXT, "tokenizer": "out"}, "data.tokenizer", "leads outside"),
    ("no corpus files", {**TEXT, "root": "empty"}, "data.root", "holds no .jsonl or .parquet files"),
    ("another text field", {**TEXT, "text_field": "body"}, "data.text_field", "has no text in 'body'"),
]


@pytest.mark.parametrize(("data", "field", "fragment"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_token_dataset_the_job_could_not_read_is_refused(
    data_dir: Path,
    client: TestClient,
    session: Session,
    settings: Settings,
    tmp_path: Path,
    lm_job: Any,
    data: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    (data_dir / "ids").mkdir()
    (data_dir / "odd").mkdir()
    (data_dir / "odd" / "train.bin").write_bytes(b"\0" * 201)
    write_ids(data_dir / "short" / "train.bin", range(100))
    (data_dir / "empty").mkdir()
    save_tokenizer(data_dir / "tok")
    save_tokenizer(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", data_dir / "out")
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS)
    body = lm_job({key: value for key, value in data.items() if value is not None})
    assert_problem(client.post("/v1/jobs", json=body), field, fragment)
    assert_nothing_stored(session, settings)


def test_a_batch_larger_than_the_windows_is_refused(data_dir: Path, client: TestClient, lm_job: Any) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(100))  # 12 windows of 8
    refused = dry_run(client, lm_job(TOKENS, train={"loss": "lm:loss", "batch_size": 16}))
    assert_problem(refused, "train.batch_size", "is more than the 12 windows of data.block_size=8 tokens")


def test_token_datasets_need_a_model_of_tokens_and_the_loop(
    data_dir: Path, client: TestClient, lm_job: Any
) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(100))
    built_in = dry_run(client, job_body(model={"arch": "mlp"}, data=TOKENS))
    assert_problem(built_in, "data.dataset", "which mlp cannot read; use model.arch gpt")
    hogwild = dry_run(client, job_body(model={"arch": "mlp"}, data=TOKENS, parallel={"strategy": "hogwild"}))
    assert_problem(hogwild, "parallel.strategy", "is read from its files a window at a time")
