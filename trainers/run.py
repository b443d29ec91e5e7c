"""What torchrun starts once per rank: `python -m trainers.run --run-dir DIR`."""

from __future__ import annotations

import argparse
import io
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from jobspec import startup
from jobspec.events import LOG_DIR, SPEC_FILE, rank_log_name
from jobspec.plan import RunConfig
from jobspec.session_nice import give_session_my_nice
from jobspec.spec import Strategy
from trainers.stack_dump import register_stack_dump
from trainers.warm import forked

# The exit status of a rank that stopped early on request (SIGTERM) after its final checkpoint: not a success,
# so a run stopped from outside is never mistaken for a finished one.
STOPPED_EXIT = 128 + 15


def append_output_to(log: Path) -> None:
    """Point fds 1 and 2 at `log`, appending, so C++ and CUDA output lands there as well as Python's."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # A file is block-buffered by default; the API tails it while training runs.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)


def redirect_output(run_dir: Path, rank: int) -> None:
    """This rank's output into its log."""
    log_dir = run_dir / LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    append_output_to(log_dir / rank_log_name(rank))


def read_config(run_dir: Path) -> RunConfig:
    return RunConfig.model_validate_json((run_dir / SPEC_FILE).read_text(encoding="utf-8"))


def train_rank(run_dir: Path) -> int:
    """The rank's exit status: 0 when training ran to its end, STOPPED_EXIT when a SIGTERM stopped it after
    a final checkpoint, or a program's own."""
    from trainers.dist_env import rank_env
    from trainers.loop import train
    from trainers.user_errors import blaming

    startup.mark(startup.Mark.IMPORTS_DONE)
    config = read_config(run_dir)
    if config.spec.program is not None:
        from trainers.program import run_program

        return run_program(config, run_dir, STOPPED_EXIT)
    if config.plan.strategy is Strategy.HOGWILD:
        # The one alternative loop: one torchrun rank that drives its own worker processes.
        from trainers.hogwild import train_hogwild as train
    # The strategy joins the ranks' process group, if it has one, and leaves it after a clean finish. An
    # exception from inside the code bundle leaves as a UserCodeError, which the worker does not retry.
    with blaming(config.code_dir):
        return 0 if train(config, run_dir, rank_env(config.plan)) else STOPPED_EXIT


def main(argv: list[str] | None = None) -> None:
    startup.restart()  # a rank forked from a warm process starts its own clock
    give_session_my_nice()  # torchrun started this rank in a session of its own
    parser = argparse.ArgumentParser(prog="python -m trainers.run")
    parser.add_argument("--run-dir", type=Path, required=True, help="holds spec.json; events, logs go here")
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    redirect_output(args.run_dir, rank)
    register_stack_dump(args.run_dir, rank)  # before torch's import, which a hung rank may be stuck in
    # torch is imported only now, so that whatever it prints while loading lands in the rank's log too.
    import torch
    from torch.distributed.elastic.multiprocessing.errors import record

    # libgomp read OMP_NUM_THREADS when torch was loaded, which for a rank forked from the warm standby
    # (worker/executors/local/warm/launcher.py) was with the worker's environment rather than this job's.
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # record writes any exception to TORCHELASTIC_ERROR_FILE, where torchrun and the worker find it.
    try:
        status = record(train_rank)(args.run_dir)
    except BaseException:
        # record has written the error file; a normal exit would run NCCL's destructors, which can block
        # while a peer waits in a collective, so torchrun would never learn that this rank failed.
        traceback.print_exc()
        sys.stderr.flush()
        _exit(1)
    # Training is over and every event and checkpoint is fsynced. Skip interpreter finalization: gloo's
    # worker threads can still hold tensors then, and tearing them down aborts the process now and again
    # (pytorch/pytorch#179291), which would turn a finished job into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    if status or not forked.is_forked():
        _exit(status or 0)  # record's wrapper is typed to return None too
    # Forked from the standby by torchrun, whose wrapper hands this function's return to the agent and then
    # ends the process with os._exit itself: a rank that exits before returning leaves the agent waiting.


def _exit(status: int) -> NoReturn:
    """End the rank at once (see main); a failed rank forked from the standby first lets torchrun reap any
    rank that died before it, so that torchrun reports the first failure."""
    try:
        if status and forked.is_forked():
            forked.wait_for_dead_siblings()
    finally:
        os._exit(status)


if __name__ == "__main__":
    main()
