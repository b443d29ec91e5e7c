"""Secrets at rest and at launch: a sealed value opens only under its key and on its own row; rotation
re-seals every row at once; the worker hands a job's secrets to its ranks' environment alone, records the
values for the job (what its logs are masked with, whatever becomes of the secrets) and fails the launch
with a clear reason when one was deleted meanwhile; a job's env can replace nothing the launcher sets."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.config import Settings, get_settings
from core.launch import build_launch
from core.models import Job, JobSecretValue, Secret
from core.secrets import (
    SecretsKeyMissing,
    SecretUnusable,
    cipher,
    cipher_of,
    main,
    new_key,
    ranks_env,
    record_launched,
    rotate,
    seal,
    unseal,
    values_to_mask,
)
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from jobspec.spec_env import MAX_ENV, reserved

VALUE = "s3cr3t-value"


def keyed(settings: Settings, key: str | None = None) -> Settings:
    return settings.model_copy(update={"secrets_key": SecretStr(key or new_key())})


def stored(session: Session, aead: AESGCM, owner: str, name: str, value: str = VALUE) -> Secret:
    secret = Secret(owner=owner, name=name, sealed=seal(aead, owner, name, value))
    session.add(secret)
    session.commit()
    return secret


def spec_with(env: dict[str, object]) -> JobSpec:
    return JobSpec.model_validate({"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "env": env})


def job_of(session: Session, owner: str, spec: JobSpec) -> int:
    job = Job(name="test", owner=owner, spec=spec.model_dump(mode="json"), plan={})
    session.add(job)
    session.commit()
    return job.id


def test_a_sealed_value_opens_only_on_its_own_row_and_key(settings: Settings, session: Session) -> None:
    aead = cipher(keyed(settings), "test")
    secret = stored(session, aead, "alice", "token")
    assert unseal(aead, secret) == VALUE and VALUE.encode() not in secret.sealed
    secret.owner = "bob"  # a row's ciphertext moved to another user's row
    with pytest.raises(InvalidTag):
        unseal(aead, secret)
    secret.owner = "alice"
    with pytest.raises(InvalidTag):
        unseal(cipher(keyed(settings), "test"), secret)


def test_a_key_must_be_32_bytes_and_none_refuses(settings: Settings) -> None:
    with pytest.raises(ValidationError, match="TRAINYARD_SECRETS_KEY must be 32 bytes"):
        Settings(secrets_key=SecretStr("c2hvcnQ="))
    with pytest.raises(SecretsKeyMissing, match="this worker has no TRAINYARD_SECRETS_KEY"):
        cipher(settings, "this worker")


def test_rotation_re_seals_every_secret_under_the_new_key(
    settings: Settings, session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_key, new = new_key(), new_key()
    old = cipher_of(SecretStr(old_key))
    for owner, name in (("alice", "a"), ("bob", "b")):
        stored(session, old, owner, name)
    job_id = job_of(session, "alice", spec_with({}))
    record_launched(session, old, job_id, ["launched-value"])
    session.commit()
    (tmp_path / "new.key").write_text(new + "\n")
    monkeypatch.setenv("TRAINYARD_SECRETS_KEY", old_key)
    get_settings.cache_clear()
    main(["rotate", "--new-key-file", str(tmp_path / "new.key")])
    session.expire_all()
    rows = list(session.scalars(select(Secret)))
    assert [unseal(cipher_of(SecretStr(new)), row) for row in rows] == [VALUE, VALUE]
    # The values recorded for a job's logs are re-sealed with them, else the API could mask nothing.
    assert values_to_mask(session, keyed(settings, new), job_id) == ["launched-value"]
    assert values_to_mask(session, keyed(settings, old_key), job_id) == []
    with pytest.raises(InvalidTag):
        rotate(session, old, cipher_of(SecretStr(new)))  # nothing is sealed under the old key any more


def test_the_ranks_get_the_values_and_a_deleted_secret_fails_the_launch(
    settings: Settings, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_key = keyed(settings)
    aead = cipher(with_key, "test")
    stored(session, aead, "alice", "mine")
    stored(session, aead, "bob", "bobs")
    spec = spec_with({"TOKEN": {"secret": "mine"}, "MODE": "fast"})
    job_id = job_of(session, "alice", spec)
    launch_env = ranks_env(with_key, job_id, "alice", spec)
    env = launch_env.env
    assert env == {"TOKEN": VALUE, "MODE": "fast"} and launch_env.secret_values == (VALUE,)
    assert session.scalar(select(Secret.last_used_at).where(Secret.name == "mine")) is not None
    launched = build_launch(
        resolve_plan(spec),
        job_id=1,
        attempt=1,
        host="h",
        run_dir=Path("/runs/1"),
        data_dir=Path("/data"),
        gpu_ids=[],
        python="python",
        worker_env={},
        job_env=env,
    )
    assert launched.env["TOKEN"] == VALUE and VALUE not in " ".join(launched.argv)
    # Bob's secret is not Alice's to use, and reads as one deleted.
    with pytest.raises(SecretUnusable, match=r"env\.T: the secret 'bobs' no longer exists"):
        ranks_env(with_key, job_id, "alice", spec_with({"T": {"secret": "bobs"}}))


def test_a_jobs_logs_are_masked_with_what_it_was_given_after_its_secret_changes_or_goes(
    settings: Settings, session: Session
) -> None:
    with_key = keyed(settings)
    aead = cipher(with_key, "test")
    secret = stored(session, aead, "alice", "mine")
    spec = spec_with({"TOKEN": {"secret": "mine"}})
    job_id, other = job_of(session, "alice", spec), job_of(session, "alice", spec)
    ranks_env(with_key, job_id, "alice", spec)
    assert values_to_mask(session, with_key, job_id) == [VALUE]
    assert values_to_mask(session, with_key, other) == []  # never launched: given nothing
    assert values_to_mask(session, settings, job_id) == []  # an API without the key opens nothing
    # Replaced between two attempts: both values masked, each recorded once however often it launched.
    secret.sealed = seal(aead, "alice", "mine", "replaced")
    session.commit()
    for _ in range(2):
        ranks_env(with_key, job_id, "alice", spec)
    session.delete(secret)
    session.commit()
    assert sorted(values_to_mask(session, with_key, job_id)) == sorted([VALUE, "replaced"])
    assert VALUE.encode() not in b"".join(session.scalars(select(JobSecretValue.sealed)))
    # A sealed value moved onto another job's row does not open there.
    row = session.scalars(select(JobSecretValue).where(JobSecretValue.job_id == job_id)).first()
    assert row is not None
    session.add(JobSecretValue(job_id=other, sealed=row.sealed))
    session.commit()
    assert values_to_mask(session, with_key, other) == []
    # Bounded: the newest MAX_ENV values of a job, the oldest pushed out first.
    record_launched(session, aead, job_id, [f"v{n}" for n in range(MAX_ENV)])
    session.commit()
    assert values_to_mask(session, with_key, job_id) == [f"v{n}" for n in range(MAX_ENV)]
    # Deleted with the job.
    session.delete(session.get_one(Job, job_id))
    session.commit()
    assert session.scalars(select(JobSecretValue.job_id)).all() == [other]


def test_every_name_the_launcher_sets_is_reserved() -> None:
    for device in ({}, {"num_gpus": 2}):
        spec = JobSpec.model_validate(
            {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "parallel": device}
        )
        plan = resolve_plan(spec)
        launched = build_launch(
            plan,
            job_id=1,
            attempt=1,
            host="h",
            run_dir=Path("/runs/1"),
            data_dir=Path("/data"),
            gpu_ids=[0, 1][: plan.num_gpus],
            python="python",
            worker_env={},
            compile_cache=Path("/cache"),
        )
        assert [name for name in launched.env if not reserved(name)] == []
