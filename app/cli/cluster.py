"""The shared resources: GPUs, the queue, recent use, and the API keys that let people in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from app.cli.render import console, duration, local_time
from app.cli.table import Column, Output, listing, output_option, print_table, table_wanted
from app.client import TrainyardClient

if TYPE_CHECKING:
    from app.schemas import GpuHealthChanged, HostGpus, QueueEntry

GPU_COLUMNS = (
    Column("host"),
    Column("address", rank=3),
    Column("status"),
    Column("gpu"),
    Column("name", rank=2, free_text=True),
    Column("memory MB", rank=4, justify="right"),
    Column("job", rank=1),
    Column("health"),
    Column("why", rank=5, wraps=True),
)


def gpu_rows(host: HostGpus) -> list[tuple[str, ...]]:
    where = (host.host, host.address, host.status)
    if not host.gpus:
        return [(*where, "-", "no GPUs (CPU jobs only)", "-", "-", "-", "")]
    return [
        (
            *where,
            str(gpu.index),
            gpu.name or "-",
            str(gpu.memory_total_mb or "-"),
            "free" if gpu.job_id is None else str(gpu.job_id),
            gpu.health,
            gpu.health_reason or "",
        )
        for gpu in host.gpus
    ]


@click.group(invoke_without_command=True)
@listing
@click.pass_context
def gpus(context: click.Context, wide: bool, output: Output) -> None:
    """GPUs of every worker host (up or down, with its address), their health and the job holding each;
    `drain` and `undrain` (admins) take a GPU out of placement and put it back."""
    if context.invoked_subcommand is not None:
        return
    hosts = context.obj.gpus()
    if not table_wanted(hosts, output, "no worker host has registered; start one with `python -m worker`"):
        return
    print_table(GPU_COLUMNS, [row for host in hosts.data for row in gpu_rows(host)], wide)


def _said(changed: GpuHealthChanged) -> str:
    stopped = ", ".join(str(job) for job in changed.jobs_stopped)
    requeued = (
        f"; job {stopped} asked to stop at its next checkpoint and requeued elsewhere" if stopped else ""
    )
    return f"GPU {changed.index} of {changed.host}: {changed.health}{requeued}"


@gpus.command("drain")
@click.argument("host")
@click.argument("index", type=click.IntRange(min=0))
@click.option("--reason", required=True, help="why, shown to everyone who lists the GPUs")
@click.pass_obj
def drain(client: TrainyardClient, host: str, index: int, reason: str) -> None:
    """Place nothing new on GPU INDEX of HOST; its running job stops at its next checkpoint and resumes on
    other GPUs. Admins only; it stays drained until `undrain`."""
    click.echo(_said(client.drain_gpu(host, index, reason)))


@gpus.command("undrain")
@click.argument("host")
@click.argument("index", type=click.IntRange(min=0))
@click.pass_obj
def undrain(client: TrainyardClient, host: str, index: int) -> None:
    """GPU INDEX of HOST is sound again (after a reset, say): jobs are placed on it again. Admins only."""
    click.echo(_said(client.undrain_gpu(host, index)))


# Why a job waits is what this listing is for: its reason is never dropped nor cut, and a long name gives
# way to it first.
QUEUE_COLUMNS = (
    Column("#", rank=1, justify="right"),
    Column("job"),
    Column("name", free_text=True),
    Column("owner", rank=6),
    Column("priority", rank=5, justify="right"),
    Column("wants", rank=3),
    Column("waited", rank=4, justify="right"),
    Column("starts in", rank=2, justify="right"),
    Column("reason", wraps=True),
)


def starts_in(entry: QueueEntry) -> str:
    """When the job would start if the jobs ahead run as long as forecast; '-' where that is not known."""
    if entry.starts_in_s is None:
        return "-"
    return "now" if entry.starts_in_s == 0 else duration(entry.starts_in_s)


@click.command()
@listing
@click.pass_obj
def queue(client: TrainyardClient, wide: bool, output: Output) -> None:
    """Jobs waiting to start, in the order they will start, when each would start if the jobs ahead run as
    long as forecast, and why each waits: the reason wrapped onto further lines to fit, never cut (on one
    line with --wide)."""
    entries = client.queue()
    if not table_wanted(entries, output, "the queue is empty"):
        return
    now = datetime.now(UTC)
    rows = [
        (
            str(entry.position),
            str(entry.job_id),
            entry.name,
            entry.owner,
            str(entry.priority),
            entry.wants,
            duration((now - entry.created_at).total_seconds()),
            starts_in(entry),
            entry.reason,
        )
        for entry in entries.data
    ]
    print_table(QUEUE_COLUMNS, rows, wide)
    if entries.fair_share:
        console.print(entries.fair_share)


USAGE_COLUMNS = (Column("user"), Column("GPU-h", justify="right"), Column("CPU core-h", justify="right"))


@click.command()
@listing
@click.pass_obj
def usage(client: TrainyardClient, wide: bool, output: Output) -> None:
    """Recent GPU and CPU use per user (yours; an admin sees everyone's), least used first: the order in which
    fair share starts jobs of equal priority."""
    uses = client.usage()
    if not table_wanted(uses, output, "no job has run lately"):
        return
    rows = [(use.user, f"{use.gpu_hours:.2f}", f"{use.cpu_core_hours:.2f}") for use in uses.data]
    print_table(USAGE_COLUMNS, rows, wide)
    console.print(f"use counts half after {uses.half_life_h:g} h")


@click.group()
def keys() -> None:
    """API keys: admins make them; everyone lists and revokes their own. The first admin key is made on the
    server: `python -m core.keys create`."""


@keys.command("create")
@click.option("--user", required=True, help="who the key acts as; their jobs are theirs alone")
@click.option("--admin", is_flag=True, help="an admin sees and manages every user's jobs, and makes keys")
@output_option
@click.pass_obj
def create(client: TrainyardClient, user: str, admin: bool, output: Output) -> None:
    """Create a key and print it once; the API stores only its hash."""
    made = client.create_key(user, admin)
    if table_wanted(made, output):
        click.echo(made.token)


KEY_COLUMNS = (Column("id"), Column("user"), Column("admin", rank=1), Column("created", rank=2))


@keys.command("ls")
@listing
@click.pass_obj
def list_keys(client: TrainyardClient, wide: bool, output: Output) -> None:
    """Your keys (an admin's: everyone's), and since when; tokens cannot be shown again (only their hashes
    are stored)."""
    keys = client.list_keys()
    if not table_wanted(keys, output):
        return
    rows = [
        (str(key.id), key.user, "yes" if key.admin else "no", local_time(key.created_at)) for key in keys.data
    ]
    print_table(KEY_COLUMNS, rows, wide)


@keys.command("revoke")
@click.argument("key_id", type=int)
@click.pass_obj
def revoke(client: TrainyardClient, key_id: int) -> None:
    """Revoke key KEY_ID (from `trainyard keys ls`): an admin any, anyone else one of their own."""
    client.revoke_key(key_id)
    # The API keeps keys it has seen for a few seconds, so requests already underway may still pass.
    click.echo(f"revoked key {key_id}; the API refuses it within seconds")
