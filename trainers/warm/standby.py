"""The warm standby's own process (`python -m trainers.warm.standby`):
worker/executors/local/warm/launcher.py's WarmLauncher starts it ahead of its job and hands it the job as one
JSON line on its stdin, a socket, with descriptors beside it.

It imports torchrun's module and what every rank of a built-in job imports, blocks on its stdin, then takes
on the job's environment and log and runs torchrun's main() with the job's arguments, the ranks of
`-m trainers.run` forked from it (torchrun's fork start method). A sandboxed job's torchrun runs in a child
that entered the job's sandbox (trainers/warm/enter.py), and this process waits for it. It lives beside the
runtime it imports, so that the worker's own package never imports torch (pyproject.toml's import contracts);
nothing here may initialise CUDA, which a forked rank could not use.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import trainers.run
from trainers.warm.enter import Confinement, run_inside

RANK_ENTRY = ["-m", "trainers.run"]
TORCHRUN_MODULE = "torch.distributed.run"
MAX_FDS = 16  # the log, and for a sandboxed job its lifeline, bwrap's output and five namespaces
REQUEST_BYTES = 1 << 16
# What every rank of a built-in job imports before its first step (trainers/run.py), imported once by the
# standby so that its forked ranks start with it. torch._dynamo too: torch's optimizers import it at their
# first construction (Optimizer.__init__ runs under torch._disable_dynamo), so every rank of every job paid
# that import, about half of torch's own, before its first step. Not the Hugging Face libraries, which read
# HF_* variables at import where a rank must see its job's, nor torch._inductor, which only compiled jobs
# need, nor torchvision, which only the vision models and the GPU's JPEG decoding need.
RANK_MODULES = (
    "torch",
    "torch._dynamo",
    "torch.distributed.elastic.multiprocessing.errors",
    "trainers.dist_env",
    "trainers.loop",
    "trainers.user_errors",
    "trainers.strategies.single",
    "trainers.strategies.ddp",
    "trainers.data.digits",
)


def forked_ranks(args: list[str]) -> list[str] | None:
    """torchrun's `args` with the ranks of `-m trainers.run` forked from torchrun's own process, which runs
    trainers/run.py in each with runpy (torchrun's --run-path); None when they start something else."""
    for at in range(len(args) - 1):
        if args[at : at + 2] == RANK_ENTRY:
            entry = str(Path(trainers.run.__file__).resolve())
            return [*args[:at], "--start-method", "fork", "--run-path", entry, *args[at + 2 :]]
    return None


def _receive() -> tuple[dict[str, Any], dict[str, int]] | None:
    """The job's request and its descriptors by the names the request gives them; None when the worker
    went away without needing this standby."""
    channel = socket.socket(fileno=0)
    data, fds, _, _ = socket.recv_fds(channel, REQUEST_BYTES, MAX_FDS)
    while data and not data.endswith(b"\n"):
        more = channel.recv(REQUEST_BYTES)
        if not more:
            break
        data += more
    channel.detach()  # fd 0 becomes /dev/null (_take_on)
    if not data:
        return None
    request = json.loads(data)
    return request, dict(zip(request["fds"], fds, strict=True))


def _take_on(request: dict[str, Any], log: int) -> None:
    """Become the job's torchrun process: its environment, its log on stdout and stderr (the worker opened
    it, never through a link the job left), no stdin."""
    os.environ.clear()
    os.environ.update(request["env"])
    for fd in (1, 2):
        os.dup2(log, fd)
    os.close(log)
    # A file is block-buffered by default; the API tails it while training runs.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def import_rank_modules() -> bool:
    """Import torchrun's module and RANK_MODULES; True if ranks may be forked from here: a child cannot use a
    CUDA context its parent made, so nothing here may have initialised CUDA (the ranks pick their GPUs after
    the fork)."""
    for name in (TORCHRUN_MODULE, *RANK_MODULES):
        importlib.import_module(name)
    import torch

    return not torch.cuda.is_initialized()


def _torchrun(args: list[str]) -> None:
    """torchrun's main() with `args`, then the exit of a successful job: tearing down an interpreter that has
    loaded torch and the trainer would keep the worker waiting for a second or more. (A failure raises past
    this, and the interpreter prints torchrun's report, which the worker reads.)"""
    import torch.distributed.run as torchrun

    torchrun.main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve(may_fork: bool) -> None:
    """Wait for the job on stdin and run its torchrun; `may_fork`: import_rank_modules()'s answer."""
    received = _receive()
    if received is None:
        return
    request, fds = received
    _take_on(request, fds.pop("log"))
    args = request["args"]
    forked = forked_ranks(args) if may_fork else None
    if forked is not None:
        # torchrun's agent asks whether a GPU is there (for its NUMA default). Through CUDA's runtime that
        # starts the driver, which a forked child cannot use; through NVML, as torch documents, it does not.
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        print(f"standby {os.getpid()}: ranks forked from it, with torch and the trainer imported", flush=True)
    args = args if forked is None else forked
    if request.get("sandbox") is None:
        _torchrun(args)
    status = run_inside(lambda: _torchrun(args), fds, Confinement(**request["sandbox"]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
