"""Users' secrets over the API: set, list and delete them, and check a spec's references at submission. A
value goes in sealed (core/secrets.py) and never comes out here: the worker opens it for the ranks.

Another user's secret (unless an admin shared it) is answered exactly as a missing one, everywhere: a user
can neither use, list, delete nor learn of it."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.secret_schemas import SecretCreate
from app.services.errors import DomainError, InvalidSpec
from app.services.keys import Caller
from core.config import Settings
from core.executors import executor_traits
from core.models import Secret
from core.secrets import cipher, seal, usable_secret
from jobspec.spec import JobSpec
from jobspec.spec_env import secret_refs


class SecretNotFound(DomainError):
    def __init__(self, name: str) -> None:
        super().__init__(f"you have no secret {name!r}; list yours with `trainyard secret ls`", "name")


class SecretLimitReached(DomainError):
    def __init__(self, user: str, limit: int) -> None:
        super().__init__(
            f"user {user} already has {limit} secrets, the most allowed (TRAINYARD_SECRETS_MAX_PER_USER="
            f"{limit}); delete one (`trainyard secret rm NAME`) or have an admin raise the limit",
            "name",
        )


class SecretNameTaken(DomainError):
    def __init__(self, name: str, owner: str) -> None:
        super().__init__(
            f"{owner} already shares a secret named {name!r}, and a job's reference must name one; pick "
            "another name",
            "name",
        )


class SharingRefused(DomainError):
    def __init__(self, user: str) -> None:
        super().__init__(
            f"shared: only an admin's secret may be shared with every user, and {user!r} is not one; leave "
            "shared out to keep it yours",
            "shared",
        )


def set_secret(session: Session, settings: Settings, body: SecretCreate, caller: Caller) -> Secret:
    """The caller's secret `body.name`, made or given the new value, sealed before it reaches the session.
    The count is a read, so requests at the same instant may pass it together: bounded by the concurrent
    requests, as for webhooks."""
    if body.shared and not caller.is_admin:
        raise SharingRefused(caller.user)
    aead = cipher(settings, "this server")
    secret = session.scalar(select(Secret).where(Secret.owner == caller.user, Secret.name == body.name))
    if body.shared:
        other = select(Secret.owner).where(Secret.shared.is_(True), Secret.name == body.name)
        if (owner := session.scalar(other.where(Secret.owner != caller.user))) is not None:
            raise SecretNameTaken(body.name, owner)
    if secret is None:
        owned = session.scalar(select(func.count()).where(Secret.owner == caller.user)) or 0
        if owned >= settings.secrets_max_per_user:
            raise SecretLimitReached(caller.user, settings.secrets_max_per_user)
        secret = Secret(owner=caller.user, name=body.name)
        session.add(secret)
    secret.sealed = seal(aead, caller.user, body.name, body.value)
    secret.shared = body.shared
    session.commit()
    return secret


def secrets_seen_by(session: Session, caller: Caller) -> list[Secret]:
    """An admin sees every secret's name; anyone else their own and the shared ones."""
    query = select(Secret).order_by(Secret.owner, Secret.name)
    if not caller.is_admin:
        query = query.where((Secret.owner == caller.user) | Secret.shared.is_(True))
    return list(session.scalars(query))


def delete_secret(session: Session, name: str, caller: Caller) -> None:
    """The caller's own secret `name`; a job waiting to start with it then fails at its launch."""
    secret = session.scalar(select(Secret).where(Secret.owner == caller.user, Secret.name == name))
    if secret is None:
        raise SecretNotFound(name)
    session.delete(secret)
    session.commit()


def check_secret_refs(session: Session, settings: Settings, spec: JobSpec, caller: Caller) -> None:
    """Each secret the spec's env names is the caller's or shared; another user's reads as missing."""
    refs = secret_refs(spec.env)
    if refs and not executor_traits(settings).places_jobs:
        # The node task reads no database and holds no key: a value would have to cross the cluster's
        # shared filesystem in the clear (docs/secrets.md).
        variable = next(iter(refs))
        raise InvalidSpec(
            "env",
            f"env.{variable}: secrets do not reach jobs run by {executor_traits(settings).placed_by} here "
            f"(TRAINYARD_EXECUTOR={settings.executor}); pass a plain value, or run on the local executor",
        )
    for variable, name in refs.items():
        if usable_secret(session, caller.user, name) is None:
            raise InvalidSpec(
                "env",
                f"env.{variable}: you have no secret {name!r} and none is shared by that name; set it with "
                f"`trainyard secret set {name}` (list yours with `trainyard secret ls`)",
            )
