"""`trainyard code`: push a folder as a code bundle, list, show and remove bundles."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.table import Table

from app.cli.pack import PackError, pack
from app.cli.render import console, local_time
from app.client import TrainyardClient
from app.schemas import CodeBundleDetail

FolderArgument = click.Path(exists=True, file_okay=False, path_type=Path)


def size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value, unit = count / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def push_folder(client: TrainyardClient, folder: Path) -> CodeBundleDetail:
    """Packs and uploads `folder`; says on stderr what went up, so that stdout can carry the id alone."""
    with tempfile.TemporaryFile() as archive:
        try:
            pack(folder, archive)
        except PackError as exc:
            raise click.ClickException(str(exc)) from exc
        archive.seek(0)
        bundle, created = client.push_code(archive)
    what = "pushed" if created else "already pushed"
    click.echo(f"{what}: {bundle.file_count} files, {size(bundle.size_bytes)}", err=True)
    return bundle


@click.group("code")
def code() -> None:
    """Code bundles: your own modules, which a spec names with `code`."""


@code.command()
@click.argument("folder", metavar="DIR", type=FolderArgument)
@click.pass_obj
def push(client: TrainyardClient, folder: Path) -> None:
    """Pack DIR (minus .trainyardignore's paths) and upload it; prints the bundle's id."""
    console.print(push_folder(client, folder).id)


@code.command("ls")
@click.pass_obj
def list_code(client: TrainyardClient) -> None:
    """Your bundles, newest first (an admin's: everyone's)."""
    bundles = client.list_code().data
    if not bundles:
        console.print("no code bundles; push one with `trainyard code push DIR`")
        return
    table = Table("id", "owner", "files", "size", "unpacked", "created")
    for bundle in bundles:
        table.add_row(
            bundle.id,
            bundle.owner,
            str(bundle.file_count),
            size(bundle.size_bytes),
            size(bundle.unpacked_bytes),
            local_time(bundle.created_at),
        )
    console.print(table)


@code.command()
@click.argument("code_id", metavar="ID")
@click.pass_obj
def show(client: TrainyardClient, code_id: str) -> None:
    """One bundle: who pushed it and when, its files, the jobs that name it."""
    bundle = client.get_code(code_id)
    console.print(f"{bundle.id}: {bundle.owner}, {local_time(bundle.created_at)}")
    unpacked, archive = size(bundle.unpacked_bytes), size(bundle.size_bytes)
    console.print(f"  {bundle.file_count} files, {unpacked} unpacked, {archive} archive")
    console.print(f"  jobs: {', '.join(map(str, bundle.jobs)) or '-'}")
    for entry in bundle.files:
        console.print(f"  {size(entry.size):>10}  {entry.path}")
    if len(bundle.files) < bundle.file_count:
        console.print(f"  ... and {bundle.file_count - len(bundle.files)} more")


@code.command()
@click.argument("code_id", metavar="ID")
@click.pass_obj
def rm(client: TrainyardClient, code_id: str) -> None:
    """Delete a bundle no unfinished job of yours names."""
    client.delete_code(code_id)
    console.print(f"deleted {code_id}")
