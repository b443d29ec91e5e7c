"""Who sent a request: a stored API key (see core.keys) turned back into a user, or the local admin."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.keys import hash_token
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
