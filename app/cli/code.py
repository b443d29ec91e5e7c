"""`trainyard code`: push a folder as a code bundle, list, show and remove bundles."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.code_ids import resolve_code_id
from app.cli.render import console, local_time, size
from app.cli.table import Column, Output, listing, output_option, print_table, table_wanted
from app.client import TrainyardClient

if TYPE_CHECKING:
    from app.schemas import CodeBundleDetail

FolderArgument = click.Path(exists=True, file_okay=False, path_type=Path)


def push_folder(client: TrainyardClient, folder: Path) -> CodeBundleDetail:
    """Packs and uploads `folder`; says on stderr what went up, so that stdout can carry the id alone."""
    # Imported here, as pathspec with it, by the commands that push alone: every other call loads this module.
    from app.cli.pack import PackError, pack

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


def with_code(client: TrainyardClient, spec: dict[str, Any], folder: Path | None) -> None:
    """The spec's `code`: DIR pushed as a bundle, or the id (or its first digits) the spec names."""
    if folder is not None:
        spec["code"] = push_folder(client, folder).id
    elif isinstance(spec.get("code"), str):
        spec["code"] = resolve_code_id(client, spec["code"])


@click.group("code")
def code() -> None:
    """Code bundles: your own modules, which a spec names with `code`. Wherever a bundle's id is taken, its
    first digits do (`sha256:0383`, or `0383`) if no other bundle of yours starts with them."""


@code.command()
@click.argument("folder", metavar="DIR", type=FolderArgument)
@output_option
@click.pass_obj
def push(client: TrainyardClient, folder: Path, output: Output) -> None:
    """Pack DIR (minus .trainyardignore's paths) and upload it; prints the bundle's id."""
    bundle = push_folder(client, folder)
    if table_wanted(bundle, output):
        console.print(bundle.id)


BUNDLE_COLUMNS = (
    Column("id"),
    Column("owner", rank=2),
    Column("files", rank=3, justify="right"),
    Column("size", rank=4, justify="right"),
    Column("unpacked", rank=5, justify="right"),
    Column("created", rank=1),
)


@code.command("ls")
@listing
@click.pass_obj
def list_code(client: TrainyardClient, wide: bool, output: Output) -> None:
    """Your bundles, newest first (an admin's: everyone's)."""
    bundles = client.list_code()
    if not table_wanted(bundles, output, "no code bundles; push one with `trainyard code push DIR`"):
        return
    rows = [
        (
            bundle.id,
            bundle.owner,
            str(bundle.file_count),
            size(bundle.size_bytes),
            size(bundle.unpacked_bytes),
            local_time(bundle.created_at),
        )
        for bundle in bundles.data
    ]
    print_table(BUNDLE_COLUMNS, rows, wide)


@code.command()
@click.argument("code_id", metavar="ID")
@output_option
@click.pass_obj
def show(client: TrainyardClient, code_id: str, output: Output) -> None:
    """One bundle: who pushed it and when, its files, the jobs that name it."""
    bundle = client.get_code(resolve_code_id(client, code_id))
    if not table_wanted(bundle, output):
        return
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
    whole = resolve_code_id(client, code_id)
    client.delete_code(whole)
    console.print(f"deleted {whole}")
