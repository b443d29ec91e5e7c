"""API keys: created for a user, stored as a SHA-256 hash, and turned back into a caller on each request."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import ApiKey

TOKEN_PREFIX = "ty_"
# A user name becomes the owner of jobs and appears in messages: keep it to a plain, bounded word.
_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
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


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast unsalted hash is enough: there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def create_key(session: Session, user: str, admin: bool) -> str:
    """Store a new key for `user` and return its plaintext token, which is never stored or shown again."""
    if not _USER.fullmatch(user):
        raise ValueError(
            f"user {user!r} is not a valid name: use 1-128 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(user=user, key_hash=hash_token(token), is_admin=admin))
    session.commit()
    return token


def caller_for_token(session: Session, token: str) -> Caller | None:
    key = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_token(token)))
    return Caller(key.user, key.is_admin) if key else None
