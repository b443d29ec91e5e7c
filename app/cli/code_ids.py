"""Code bundle ids by a unique prefix, as git takes commit ids: `sha256:0383` or `0383` names the one bundle
of yours whose id starts with it. The API looks bundles up by whole id only, so the prefix is resolved here,
from the listing, before anything is sent."""

from __future__ import annotations

import re

import click

from app.client import TrainyardClient

ID_PREFIX = "sha256:"
MIN_DIGITS = 4
HEX = re.compile(r"[0-9a-f]+")


def resolve_code_id(client: TrainyardClient, given: str) -> str:
    """The whole id that `given` (a whole id, or its first hex digits with or without `sha256:`) names."""
    # Imported here: jobspec.spec builds the job spec's pydantic models, which no other step of a call needs.
    from jobspec.spec import CODE_ID_PATTERN

    if re.fullmatch(CODE_ID_PATTERN, given):
        return given
    digits = given.removeprefix(ID_PREFIX)
    if not HEX.fullmatch(digits) or len(digits) < MIN_DIGITS:
        raise click.ClickException(
            f"{given!r} is not a code bundle id: give `sha256:` and at least {MIN_DIGITS} of its lowercase "
            "hex digits, as `trainyard code ls` shows them"
        )
    matches = [bundle.id for bundle in client.list_code().data if bundle.id.startswith(ID_PREFIX + digits)]
    if not matches:
        raise click.ClickException(
            f"no code bundle of yours starts with {ID_PREFIX}{digits}; list them with `trainyard code ls`"
        )
    if len(matches) > 1:
        raise click.ClickException(
            f"{ID_PREFIX}{digits} is ambiguous: it starts {len(matches)} bundles ({', '.join(matches)}); "
            "give more of its digits"
        )
    return matches[0]
