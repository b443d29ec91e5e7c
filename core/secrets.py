"""Users' secrets at rest, and their values for a job's ranks.

Each value is sealed with AES-256-GCM under TRAINYARD_SECRETS_KEY, with its owner and name as associated
data: a sealed value copied onto another user's row, or renamed, does not open. The API seals what users
send (app/services/secrets.py); the worker opens them when it launches an attempt (`ranks_env`), into the
ranks' environment alone, and records the values it handed over for that job, sealed under the same key
(`record_launched`); the API opens those only to mask the job's logs (`values_to_mask`), so a secret deleted
or replaced later is still masked in what the job printed.

`python -m core.secrets new-key` prints a fresh key. `python -m core.secrets rotate --new-key-file PATH`
re-seals every secret under the key in PATH in one transaction, with the server's settings (the current key
in TRAINYARD_SECRETS_KEY, the database in TRAINYARD_DATABASE_URL); then give the API and every worker the
new key and restart them (docs/secrets.md).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr
from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from core.config import Settings, get_settings
from core.db import session_scope
from core.models import JobSecretValue, Secret, utcnow
from jobspec.spec import JobSpec
from jobspec.spec_env import MAX_ENV, plain_env, secret_refs

NONCE_BYTES = 12  # GCM's own size; random per seal, so one key seals 2^32 values before a repeat matters
KEY_SETTING = "TRAINYARD_SECRETS_KEY"


class SecretsKeyMissing(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where} has no {KEY_SETTING}, so secrets can be neither stored nor used: set it to 32 bytes in "
            "base64 (`python -m core.secrets new-key`), the same on the API and every worker"
        )


class SecretUnusable(Exception):
    """A job's reference to a secret that is gone, or that its key no longer opens: the job cannot start."""


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def cipher_of(key: SecretStr) -> AESGCM:
    return AESGCM(base64.b64decode(key.get_secret_value()))


def cipher(settings: Settings, where: str) -> AESGCM:
    """The settings' key, checked by Settings (32 bytes); `where` says which process lacks one."""
    if settings.secrets_key is None:
        raise SecretsKeyMissing(where)
    return cipher_of(settings.secrets_key)


def _bound_to(owner: str, name: str) -> bytes:
    return f"{owner}\0{name}".encode()


def _launched_to(job_id: int) -> bytes:
    """What a job's recorded value is bound to: two NULs, where a secret's binding has one (no name has
    any), so neither kind of row opens as the other."""
    return f"job\0{job_id}\0launched".encode()


def _seal_bound(aead: AESGCM, bound: bytes, value: str) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + aead.encrypt(nonce, value.encode(), bound)


def _unseal_bound(aead: AESGCM, sealed: bytes, bound: bytes) -> str:
    """The plain value; InvalidTag when this key did not seal it (a wrong or rotated-away key)."""
    return aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], bound).decode()


def seal(aead: AESGCM, owner: str, name: str, value: str) -> bytes:
    return _seal_bound(aead, _bound_to(owner, name), value)


def unseal(aead: AESGCM, secret: Secret) -> str:
    """The plain value; InvalidTag when this key did not seal it (a wrong or rotated-away key)."""
    return _unseal_bound(aead, secret.sealed, _bound_to(secret.owner, secret.name))


def unseal_launched(aead: AESGCM, row: JobSecretValue) -> str:
    """A value a launch of the job recorded; InvalidTag as `unseal`."""
    return _unseal_bound(aead, row.sealed, _launched_to(row.job_id))


def usable_secret(session: Session, user: str, name: str) -> Secret | None:
    """The secret `name` that `user`'s jobs may use: their own, else one an admin shared. Another user's
    unshared secret is None, exactly as a missing one."""
    query = select(Secret).where(Secret.name == name, or_(Secret.owner == user, Secret.shared.is_(True)))
    found = list(session.scalars(query))
    return next((s for s in found if s.owner == user), found[0] if found else None)


def _opened(session: Session, aead: AESGCM, owner: str, refs: dict[str, str]) -> dict[str, Secret]:
    secrets: dict[str, Secret] = {}
    for variable, name in refs.items():
        secret = usable_secret(session, owner, name)
        if secret is None:
            raise SecretUnusable(
                f"env.{variable}: the secret {name!r} no longer exists (deleted after the job was "
                f"submitted); set it again with `trainyard secret set {name}` and retry the job"
            )
        secrets[variable] = secret
    return secrets


@dataclass(frozen=True)
class RanksEnv:
    env: dict[str, str]  # the spec's env, each secret reference replaced by its value
    secret_values: tuple[str, ...]  # those values: what the worker masks wherever it quotes the ranks' output


def ranks_env(settings: Settings, job_id: int, owner: str, spec: JobSpec) -> RanksEnv:
    """The job's env with each secret reference replaced by its value, for the ranks' environment only;
    marks the secrets used (last_used_at) and records the values for the job (`record_launched`) in a short
    write of its own, outside any transition."""
    refs = secret_refs(spec.env)
    if not refs:
        return RanksEnv(plain_env(spec.env), ())
    aead = cipher(settings, "this worker")
    with session_scope() as session:
        secrets = _opened(session, aead, owner, refs)
        try:
            values = {variable: unseal(aead, secret) for variable, secret in secrets.items()}
        except InvalidTag:
            raise SecretUnusable(
                f"env: this worker's {KEY_SETTING} does not open the job's secrets; give the worker the "
                "API's key (after a rotation, the new one) and retry the job"
            ) from None
        ids = [secret.id for secret in secrets.values()]
        # The first write: on SQLite the rest of this unit holds the writer's lock, so two launches of one
        # job record one after the other.
        session.execute(update(Secret).where(Secret.id.in_(ids)).values(last_used_at=utcnow()))
        record_launched(session, aead, job_id, values.values())
    return RanksEnv({**plain_env(spec.env), **values}, tuple(values.values()))


def _launched(session: Session, job_id: int) -> list[JobSecretValue]:
    query = select(JobSecretValue).where(JobSecretValue.job_id == job_id).order_by(JobSecretValue.id)
    return list(session.scalars(query))


def _opened_launched(aead: AESGCM, rows: Iterable[JobSecretValue]) -> list[str]:
    """The recorded values this key opens: one sealed under a key since replaced without `rotate` masks
    nothing now."""
    values = []
    for row in rows:
        try:
            values.append(unseal_launched(aead, row))
        except InvalidTag:
            continue
    return values


def record_launched(session: Session, aead: AESGCM, job_id: int, values: Iterable[str]) -> None:
    """Add the values not recorded for the job yet, keeping its newest MAX_ENV (a spec's most references):
    only a secret replaced between a job's attempts ever pushes an older value out."""
    rows = _launched(session, job_id)
    known = set(_opened_launched(aead, rows))
    new = [value for value in dict.fromkeys(values) if value not in known]
    session.add_all(
        JobSecretValue(job_id=job_id, sealed=_seal_bound(aead, _launched_to(job_id), v)) for v in new
    )
    if (excess := len(rows) + len(new) - MAX_ENV) > 0:
        session.execute(
            delete(JobSecretValue).where(JobSecretValue.id.in_([row.id for row in rows[:excess]]))
        )


def values_to_mask(session: Session, settings: Settings, job_id: int) -> list[str]:
    """The values the job's launches handed to its ranks (every attempt's), to mask in its logs, whatever
    became of the secrets since; none when the API has no key (no worker could have opened one)."""
    if settings.secrets_key is None:
        return []
    return _opened_launched(cipher_of(settings.secrets_key), _launched(session, job_id))


def rotate(session: Session, old: AESGCM, new: AESGCM) -> int:
    """Re-seal every secret, and every value recorded for a job, under `new`; the caller commits, so all
    change or none. Returns how many secrets."""
    secrets: Iterable[Secret] = session.scalars(select(Secret).with_for_update())
    count = 0
    for secret in secrets:
        secret.sealed = seal(new, secret.owner, secret.name, unseal(old, secret))
        count += 1
    for row in session.scalars(select(JobSecretValue).with_for_update()):
        bound = _launched_to(row.job_id)
        row.sealed = _seal_bound(new, bound, _unseal_bound(old, row.sealed, bound))
    return count


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core.secrets", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("new-key", help=f"print a fresh key for {KEY_SETTING}")
    rotate_verb = verbs.add_parser("rotate", help="re-seal every secret under a new key, in one transaction")
    rotate_verb.add_argument(
        "--new-key-file", type=Path, required=True, help="a file holding the new key (base64, 32 bytes)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.verb == "new-key":
        print(new_key())
        return
    settings = get_settings()
    try:
        old = cipher(settings, "this server")
        new_settings = Settings(secrets_key=SecretStr(args.new_key_file.read_text().strip()))
        new = cipher(new_settings, str(args.new_key_file))
        with session_scope() as session:
            count = rotate(session, old, new)
    except InvalidTag:
        sys.exit(f"{KEY_SETTING} does not open the stored secrets: set it to the key they were sealed with")
    except (SecretsKeyMissing, OSError, ValueError) as exc:
        sys.exit(str(exc))
    print(f"re-sealed {count} secrets; give the API and every worker the new key and restart them")


if __name__ == "__main__":
    main()
