"""An s3:// data.root's credentials reach the ranks' environment alone, and their keys are masked where the
job's output is quoted and recorded for its logs as a spec's env secrets are (core/data_credentials.py): a
job that printed its store's keys showed them in its logs and failure message."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from core.config import Settings
from core.data_credentials import data_env
from core.secrets import cipher, values_to_mask
from jobspec.data_store import CREDENTIALS_ENV
from jobspec.spec import JobSpec
from tests.unit.core.test_secrets import job_of, keyed, stored

KEYS = {"access_key_id": "AKIA-test-0001", "secret_access_key": "very-secret-key", "region": "us-east-1"}


def test_the_store_keys_reach_the_ranks_and_are_masked_and_recorded(
    settings: Settings, session: Session
) -> None:
    with_key = keyed(settings)
    stored(session, cipher(with_key, "test"), "alice", "s3-key", json.dumps(KEYS))
    data = {"dataset": "shards", "root": "s3://bucket/set", "credentials": {"secret": "s3-key"}}
    spec = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": data})
    job_id = job_of(session, "alice", spec)
    store = data_env(with_key, job_id, "alice", spec)
    assert json.loads(store.env[CREDENTIALS_ENV]) == KEYS
    masked = set(store.secret_values)
    assert {KEYS["access_key_id"], KEYS["secret_access_key"], store.env[CREDENTIALS_ENV]} == masked
    assert masked <= set(values_to_mask(session, with_key, job_id))  # what the API masks its logs with
    on_disk = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}})
    assert data_env(with_key, job_id, "alice", on_disk).env == {}
