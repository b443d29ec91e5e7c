"""User names, the one rule that both the key store (core.keys) and the API's request bodies check.

Kept apart from core.keys, which needs the database, so that the schemas the CLI imports can carry the rule
without carrying SQLAlchemy with it.
"""

from __future__ import annotations

import re

# A user name becomes the owner of jobs and appears in messages: keep it to a plain, bounded word.
USER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"
_USER = re.compile(USER_PATTERN)


def check_user(user: str) -> str:
    """`user` itself when it is a valid name; a ValueError that says what a valid one looks like otherwise."""
    # fullmatch: `$` alone would also accept a name with a trailing newline.
    if not _USER.fullmatch(user):
        raise ValueError(
            f"user {user!r} is not a valid name: use 1-128 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return user
