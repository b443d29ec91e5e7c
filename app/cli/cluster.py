"""The shared resources: GPUs, the queue, and the API keys that let people in."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from rich.table import Table

from app.cli.render import console, duration, local_time
from app.client import TrainyardClient


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
    now = datetime.now(UTC)
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
    """API keys: admins make them; everyone lists and revokes their own. The first admin key is made on the
    server: `python -m core.keys create`."""


@keys.command("create")
@click.option("--user", required=True, help="who the key acts as; their jobs are theirs alone")
@click.option("--admin", is_flag=True, help="an admin sees and manages every user's jobs, and makes keys")
@click.pass_obj
def create(client: TrainyardClient, user: str, admin: bool) -> None:
    """Create a key and print it once; the API stores only its hash."""
    click.echo(client.create_key(user, admin).token)


@keys.command("ls")
@click.pass_obj
def list_keys(client: TrainyardClient) -> None:
    """Your keys (an admin's: everyone's), and since when; tokens cannot be shown again (only their hashes
    are stored)."""
    table = Table("id", "user", "admin", "created")
    for key in client.list_keys().data:
        table.add_row(str(key.id), key.user, "yes" if key.admin else "no", local_time(key.created_at))
    console.print(table)


@keys.command("revoke")
@click.argument("key_id", type=int)
@click.pass_obj
def revoke(client: TrainyardClient, key_id: int) -> None:
    """Revoke key KEY_ID (from `trainyard keys ls`): an admin any, anyone else one of their own."""
    client.revoke_key(key_id)
    # The API keeps keys it has seen for a few seconds, so requests already underway may still pass.
    click.echo(f"revoked key {key_id}; the API refuses it within seconds")
