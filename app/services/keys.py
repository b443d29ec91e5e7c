"""Who sent a request: a stored API key (see core.keys) turned back into a user, or the local admin."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.errors import KeyNotFound
from core.keys import hash_token, list_keys
from core.models import ApiKey

# Who owns the jobs when auth is off: `make run` on loopback is one person's machine.
LOCAL_USER = "local"


@dataclass(frozen=True)
class Caller:
    """Who sent a request: their jobs are the only ones they see, unless they are an admin."""

    user: str
    is_admin: bool = False

    def may_see(self, owner: str) -> bool:
        return self.is_admin or owner == self.user


LOCAL_CALLER = Caller(LOCAL_USER, is_admin=True)


def caller_for_token(session: Session, token: str) -> Caller | None:
    key = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_token(token)))
    return Caller(key.user, key.is_admin) if key else None


def keys_seen_by(session: Session, caller: Caller) -> list[ApiKey]:
    """An admin sees every key; anyone else their own, so they can revoke one."""
    return list_keys(session, None if caller.is_admin else caller.user)


def revoke_key(session: Session, key_id: int, caller: Caller) -> None:
    """Delete a key: an admin any, anyone else one of their own (another user's is a 404, like a missing
    one). Requests that send it are refused once the API's cache of known keys lapses (app/api/auth.py)."""
    key = session.get(ApiKey, key_id)
    if key is None or not caller.may_see(key.user):
        raise KeyNotFound(key_id)
    session.delete(key)
    session.commit()
