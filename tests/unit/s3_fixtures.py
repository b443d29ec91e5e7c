"""An object store for unit tests (load with `pytest_plugins`): settings switched to artifact_store=s3 and
boto3 answered in-process by moto, with the bucket created."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from core.config import get_settings
from core.storage import ObjectStore, object_store

BUCKET = "artifacts"


@pytest.fixture
def s3_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectStore]:
    for name, value in {
        "TRAINYARD_ARTIFACT_STORE": "s3",
        "TRAINYARD_S3_BUCKET": BUCKET,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TRAINYARD_S3_ENDPOINT_URL", raising=False)
    get_settings.cache_clear()
    with mock_aws():
        store = object_store(get_settings())
        assert store is not None
        store.client.create_bucket(Bucket=BUCKET)
        yield store
    get_settings.cache_clear()
