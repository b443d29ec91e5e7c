"""What a job leaves behind, to list and download: checkpoints, the exported model, TensorBoard's event files,
the profiler's trace. Downloads stream to a file (the name the API gives, in the current folder, unless
-o names a file or a folder)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from app.cli.render import console, local_time, size, warnings_console
from app.cli.table import Column, Output, listing, output_option, print_table, table_wanted
from app.client import TrainyardClient


def _in_a_folder(_ctx: click.Context, _param: click.Parameter, target: Path) -> Path:
    folder = target if target.is_dir() else target.parent
    if not folder.is_dir():
        raise click.BadParameter(f"{folder} is not a folder; make it first, or name a file in one that is")
    return target


output_file = click.option(
    "-o",
    "--output-file",
    "target",
    type=click.Path(dir_okay=True, path_type=Path),
    callback=_in_a_folder,
    default=Path(),
    help="the file to write, or a folder for the name the API gives  [default: that name, here]",
)


def saved(path: Path, to: Console = console) -> None:
    to.print(f"saved {path} ({size(path.stat().st_size)})")


@click.group()
def checkpoints() -> None:
    """A job's checkpoints: list them, download one."""


CHECKPOINT_COLUMNS = (
    Column("id"),
    Column("step", justify="right"),
    Column("epoch", rank=1, justify="right"),
    Column("size", rank=2, justify="right"),
    Column("created", rank=3),
    Column("download", rank=4),
)


@checkpoints.command("ls")
@click.argument("job_id", type=int)
@listing
@click.pass_obj
def list_checkpoints(client: TrainyardClient, job_id: int, wide: bool, output: Output) -> None:
    """Job JOB_ID's checkpoints, oldest first; `checkpoints download ID` fetches one."""
    listed = client.checkpoints(job_id)
    if not table_wanted(listed, output, f"job {job_id} has no checkpoints yet"):
        return
    rows = [
        (
            str(c.id),
            str(c.step),
            str(c.epoch),
            size(c.size_bytes),
            local_time(c.created_at),
            c.download_url,
        )
        for c in listed.data
    ]
    print_table(CHECKPOINT_COLUMNS, rows, wide)


@checkpoints.command("download")
@click.argument("checkpoint_id", type=int)
@output_file
@click.pass_obj
def download_checkpoint(client: TrainyardClient, checkpoint_id: int, target: Path) -> None:
    """Download checkpoint CHECKPOINT_ID (an id from `checkpoints ls`)."""
    saved(client.download_checkpoint(checkpoint_id, target))


@click.command()
@click.argument("job_id", type=int)
@output_file
@click.pass_obj
def export(client: TrainyardClient, job_id: int, target: Path) -> None:
    """Download a finished hf_causal_lm job's model (model.export): a tar that, unpacked, is a folder
    AutoModelForCausalLM.from_pretrained loads."""
    saved(client.download_export(job_id, target))


@click.command()
@click.argument("job_id", type=int)
@output_file
@click.pass_obj
def tensorboard(client: TrainyardClient, job_id: int, target: Path) -> None:
    """Download a job's TensorBoard event files (metrics.tensorboard) as a tar; unpack it and run
    `tensorboard --logdir .`."""
    saved(client.download_tensorboard(job_id, target))


@click.command()
@click.argument("job_id", type=int)
@output_file
@output_option
@click.pass_obj
def profile(client: TrainyardClient, job_id: int, target: Path, output: Output) -> None:
    """Download a profiled job's Chrome trace (open it in ui.perfetto.dev) and print its summary."""
    summary = client.profile(job_id)
    # With --output json, stdout is the summary's alone: where the trace went is said on stderr.
    saved(
        client.download_profile_trace(job_id, target), console if output is Output.TABLE else warnings_console
    )
    if not table_wanted(summary, output):
        return
    console.print(
        f"{summary.steps} steps from step {summary.first_step} on {summary.device}: "
        f"{summary.step_wall_us / 1000:.1f} ms a step; host-device copies "
        f"{summary.memcpy_share_of_gpu:.0%} of GPU time; waits for the GPU "
        f"{summary.sync_share_of_cpu:.0%} of CPU time"
    )
    for op in summary.top_gpu_ops or summary.top_cpu_ops:
        console.print(f"  {op.self_us / 1000:>9.2f} ms  {op.calls:>6} calls  {op.name}")
