"""`trainyard secret`: the secrets a job's env may name (docs/secrets.md). A value is read from stdin or a
prompt that does not echo, never from the command line, where the shell's history and `ps` would keep it."""

from __future__ import annotations

import sys

import click

from app.cli.render import local_time
from app.cli.table import Column, Output, listing, output_option, print_table, table_wanted
from app.client import TrainyardClient


@click.group()
def secret() -> None:
    """Secrets for your jobs: stored sealed, handed to their ranks alone, shown by no command."""


def _value() -> str:
    if sys.stdin.isatty():
        return str(click.prompt("value", hide_input=True, confirmation_prompt=True))
    # A trailing newline is the pipe's (echo, a file), not the secret's.
    return sys.stdin.read().removesuffix("\n").removesuffix("\r")


@secret.command("set")
@click.argument("name")
@output_option
@click.pass_obj
def set_secret(client: TrainyardClient, name: str, output: Output) -> None:
    """Store secret NAME, its value from stdin (or a prompt); replaces a value of yours of that name. A job
    names it in its spec: "env": {"VAR": {"secret": "NAME"}}."""
    value = _value()
    if not value:
        raise click.ClickException(
            'the value is empty: pipe it in (printf %s "$TOKEN" | trainyard secret set NAME)'
        )
    made = client.set_secret(name, value)
    if table_wanted(made, output):
        click.echo(f'stored secret {made.name}; a job names it as {{"secret": "{made.name}"}}')


SECRET_COLUMNS = (
    Column("name"),
    Column("owner"),
    Column("shared", rank=2),
    Column("created", rank=3),
    Column("last used", rank=1),
)


@secret.command("ls")
@listing
@click.pass_obj
def list_secrets(client: TrainyardClient, wide: bool, output: Output) -> None:
    """Your secrets and the shared ones (an admin's: everyone's): names and times, never values."""
    secrets = client.list_secrets()
    if not table_wanted(secrets, output):
        return
    rows = [
        (
            s.name,
            s.owner,
            "yes" if s.shared else "no",
            local_time(s.created_at),
            local_time(s.last_used_at) if s.last_used_at else "-",
        )
        for s in secrets.data
    ]
    print_table(SECRET_COLUMNS, rows, wide)


@secret.command("rm")
@click.argument("name")
@click.pass_obj
def remove(client: TrainyardClient, name: str) -> None:
    """Delete your secret NAME; a job waiting to start with it then fails at its start."""
    client.delete_secret(name)
    click.echo(f"deleted secret {name}")
