"""The shared resources: GPUs, the queue, and the API keys that let people in."""

from __future__ import annotations

import click
from rich.table import Table

from app.cli.render import console, duration
from app.client import TrainyardClient
from app.services.keys import create_key
from core.db import new_session
from core.models import utcnow


@click.command()
@click.pass_obj
def gpus(client: TrainyardClient) -> None:
    """GPUs of every worker host (up or down, with its address) and the job holding each."""
    hosts = client.gpus().data
    if not hosts:
        console.print("no worker host has registered; start one with `python -m worker`")
        return
    table = Table("host", "address", "status", "gpu", "name", "memory MB", "job")
    for host in hosts:
        where = (host.host, host.address, host.status)
        if not host.gpus:
            table.add_row(*where, "-", "no GPUs (CPU jobs only)", "-", "-")
        for gpu in host.gpus:
            job = str(gpu.job_id) if gpu.job_id is not None else "free"
            table.add_row(*where, str(gpu.index), gpu.name or "-", str(gpu.memory_total_mb or "-"), job)
    console.print(table)


@click.command()
@click.pass_obj
def queue(client: TrainyardClient) -> None:
    """Jobs waiting to start, in the order they will start, and why each waits."""
    entries = client.queue().data
    if not entries:
        console.print("the queue is empty")
        return
    now = utcnow()
    table = Table("#", "job", "name", "owner", "priority", "wants", "waited", "reason")
    for entry in entries:
        waited = duration((now - entry.created_at).total_seconds())
        table.add_row(
            str(entry.position),
            str(entry.job_id),
            entry.name,
            entry.owner,
            str(entry.priority),
            entry.wants,
            waited,
            entry.reason,
        )
    console.print(table)


@click.group()
def keys() -> None:
    """API keys (talks to the database directly: it is how the first key comes to exist)."""


@keys.command("create")
@click.option("--user", required=True, help="who the key acts as; their jobs are theirs alone")
@click.option("--admin", is_flag=True, help="an admin sees and manages every user's jobs")
def create(user: str, admin: bool) -> None:
    """Create a key and print it once; only its hash is stored."""
    try:
        with new_session() as session:
            token = create_key(session, user, admin)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(token)
