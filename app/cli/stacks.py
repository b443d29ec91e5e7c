"""`trainyard stacks ID`: every rank's Python stacks, as the job's latest capture holds them (a stall's, or
one asked for with --now), each frame on one line of at most 80 columns."""

from __future__ import annotations

import re
import textwrap
import time
from typing import TYPE_CHECKING

import click

from app.cli.render import console, local_time
from app.cli.table import Output, output_option, table_wanted
from app.client import ApiError, TrainyardClient

if TYPE_CHECKING:
    from app.schemas import StacksPublic

WIDTH = 80
WAIT_S = 20.0  # the worker looks at a running job every half second; the ranks dump in well under a second
POLL_S = 0.5
# faulthandler's frame: `  File "/path/to/file.py", line 12 in name`
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+) in (?P<name>.*)$')


def frame_line(line: str, width: int = WIDTH) -> str:
    """A dump's line within `width` columns: a frame's file shortened from its start, where the folders
    every rank shares are."""
    found = _FRAME.match(line)
    if found is None or len(line) <= width:
        return line[:width]
    where = f":{found['line']} in {found['name']}"
    room = width - 2 - len(where)
    path = found["path"]
    if len(path) > room:
        path = "…" + path[-max(room - 1, 1) :]
    return f"  {path}{where}"[:width]


def shown(stacks: StacksPublic) -> str:
    said = [f"captured {local_time(stacks.captured_at)} ({stacks.reason})", stacks.message or ""]
    said += [
        f"process group {missing['pg']}: ranks {missing['missing']} missing from {missing['collective']} "
        f"#{missing['seq']}, where ranks {missing['waiting']} wait"
        for missing in stacks.collectives
    ]
    lines = [wrapped for text in said if text for wrapped in textwrap.wrap(text, WIDTH)]
    for rank in stacks.ranks:
        lines += ["", f"rank {rank.rank} on {rank.host}"]
        lines += [frame_line(line) for line in rank.stack.splitlines() if line.strip()]
    return "\n".join(lines)


def newer_capture(client: TrainyardClient, job_id: int, asked_at: float) -> StacksPublic:
    """The capture taken after `asked_at` (epoch seconds), waited for up to WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            stacks = client.stacks(job_id)
            if stacks.captured_at.timestamp() >= asked_at:
                return stacks
        except ApiError as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"job {job_id}'s worker took no capture in {WAIT_S:g} s; it may have ended meanwhile: "
                f"`trainyard status {job_id}`, and `trainyard stacks {job_id}` for the latest capture"
            )
        time.sleep(POLL_S)


@click.command()
@click.argument("job_id", type=int)
@click.option("--now", is_flag=True, help="capture them now from the running job, and wait for it")
@output_option
@click.pass_obj
def stacks(client: TrainyardClient, job_id: int, now: bool, output: Output) -> None:
    """Print every rank's Python stacks: the job's latest capture (taken when it stalled, or asked for)."""
    if now:
        asked_at = time.time() - 1.0  # the API's clock may be a little behind this one
        client.ask_stacks(job_id)
        answer = newer_capture(client, job_id, asked_at)
    else:
        answer = client.stacks(job_id)
    if table_wanted(answer, output):
        console.print(shown(answer), markup=False, highlight=False, soft_wrap=True)
