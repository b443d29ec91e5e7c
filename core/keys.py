"""API keys at rest: a user, an admin flag and the SHA-256 of a token that is shown once, when it is made.

`python -m core.keys create --user NAME [--admin]` makes one on the server, in the database the server's
settings name (TRAINYARD_DATABASE_URL): it is how the first admin key comes to exist. Admins make the others
through the API (POST /v1/keys, `trainyard keys create`), so no client ever needs the database.
"""

from __future__ import annotations

import argparse
import hashlib
import secrets
import sys
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session

from core.db import new_session
from core.models import ApiKey
from core.users import check_user

TOKEN_PREFIX = "ty_"


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast unsalted hash is enough: there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def create_key(session: Session, user: str, admin: bool) -> str:
    """Store a new key for `user` and return its plaintext token, which is never stored or shown again."""
    check_user(user)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(user=user, key_hash=hash_token(token), is_admin=admin))
    session.commit()
    return token


def list_keys(session: Session, user: str | None = None) -> list[ApiKey]:
    """The stored keys (of `user` alone, when given), oldest first: who holds one, never a token (only
    hashes are stored)."""
    query = select(ApiKey).order_by(ApiKey.id)
    return list(session.scalars(query if user is None else query.where(ApiKey.user == user)))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core.keys",
        description="Make API keys on the server, in the database TRAINYARD_DATABASE_URL names.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a key and print its token once; only its hash is kept")
    create.add_argument("--user", required=True, help="who the key acts as; their jobs are theirs alone")
    create.add_argument(
        "--admin",
        action="store_true",
        help="an admin sees every user's jobs and creates keys through the API",
    )
    return parser


def _store_failed(exc: SQLAlchemyError) -> str:
    # The driver's own words (no such table, connection refused), not SQLAlchemy's wrapper with the SQL;
    # the URL is left out because it may hold the database password.
    reason = exc.orig if isinstance(exc, DBAPIError) else exc
    return (
        f"could not store the key ({reason}); check that TRAINYARD_DATABASE_URL names the server's database "
        "and that its migrations ran (`make migrate`, or `alembic -c migrations/alembic.ini upgrade head`)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        with new_session() as session:
            token = create_key(session, args.user, args.admin)
    except ValueError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    except SQLAlchemyError as exc:
        parser.exit(1, f"{parser.prog}: error: {_store_failed(exc)}\n")
    # The token alone on stdout, so a script can capture it; the note is for the person at the terminal.
    print(token)
    role = "an admin key" if args.admin else "a key"
    print(f"{role} for {args.user}; it is shown this once and only its hash is stored", file=sys.stderr)


if __name__ == "__main__":
    main()
