"""The credentials a job's ranks read an s3:// data.root with, resolved by the worker when it launches an
attempt, into the ranks' environment alone (as the secrets of a spec's env, core/secrets.py): the JSON of the
data.credentials secret in one variable that the data layer reads (jobspec/data_store.py), or, without one,
the worker's own AWS_* variables, which the API gives only to jobs that run no code of their user's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag

from core.config import Settings
from core.db import session_scope
from core.secrets import (
    KEY_SETTING,
    RanksEnv,
    SecretUnusable,
    cipher,
    record_launched,
    unseal,
    usable_secret,
)
from jobspec.data_store import CREDENTIALS_ENV, is_store_root
from jobspec.spec import JobSpec

AWS_PREFIX = "AWS_"
SECRET_FIELDS = ("access_key_id", "secret_access_key", "session_token")


def masked_parts(credentials: str) -> tuple[str, ...]:
    """What of a data.credentials secret is masked where the job's output is quoted: the whole JSON and each
    key in it (printed one by one), not its endpoint or region, which say nothing secret."""
    try:
        fields = json.loads(credentials)
    except ValueError:
        fields = {}
    keys = [fields.get(name) for name in SECRET_FIELDS] if isinstance(fields, dict) else []
    return (credentials, *(key for key in keys if isinstance(key, str) and key))


def data_env(
    settings: Settings,
    job_id: int,
    owner: str,
    spec: JobSpec,
    worker_env: Mapping[str, str] | None = None,
) -> RanksEnv:
    """The variables that open the job's object store (none for data on disk), and the secret's values to
    mask, recorded for the job as a spec's env secrets are (core/secrets.py::record_launched)."""
    data = spec.data
    if data is None or not is_store_root(data.root):
        return RanksEnv({}, ())
    if data.credentials is None:
        own = os.environ if worker_env is None else worker_env
        return RanksEnv({name: value for name, value in own.items() if name.startswith(AWS_PREFIX)}, ())
    name = data.credentials.secret
    aead = cipher(settings, "this worker")
    with session_scope() as session:
        secret = usable_secret(session, owner, name)
        if secret is None:
            raise SecretUnusable(
                f"data.credentials: the secret {name!r} no longer exists (deleted after the job was "
                f"submitted); set it again with `trainyard secret set {name}` and retry the job"
            )
        try:
            credentials = unseal(aead, secret)
        except InvalidTag:
            raise SecretUnusable(
                f"data.credentials: this worker's {KEY_SETTING} does not open the secret {name!r}; give the "
                "worker the API's key and retry the job"
            ) from None
        masked = masked_parts(credentials)
        record_launched(session, aead, job_id, masked)
    return RanksEnv({CREDENTIALS_ENV: credentials}, masked)
