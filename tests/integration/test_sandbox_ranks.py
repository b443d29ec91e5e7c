"""Ranks work in the sandbox: torchrun's c10d rendezvous and gloo meet over the sandbox's own loopback (a
one-host job has no other network), and the trainer runs to its end there, writing only its run directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jobspec.events import EVENTS_FILE, DoneEvent, MetricsEvent, parse_event
from tests.integration.sandbox_launch import deploy, job_spec, sandboxed_job, start

TIMEOUT_S = 180
GLOO_RANK = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as file:
    json.dump({"sum": total.item(), "world": dist.get_world_size()}, file)
dist.destroy_process_group()
"""


def test_two_gloo_ranks_meet_over_the_sandbox_s_loopback(tmp_path: Path) -> None:
    deployment = deploy(tmp_path / "var")
    script = deployment.run_dir / "gloo.py"
    script.write_text(GLOO_RANK)
    rank = [str(script), str(deployment.run_dir)]
    command, box, _ = sandboxed_job(deployment, rank, dict(os.environ), job_spec(2))
    assert "--unshare-net" in command.argv and not box.share_network
    process = start(command)
    output, _ = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, output.decode(errors="replace")
    for rank in (0, 1):
        assert json.loads((deployment.run_dir / f"rank{rank}.json").read_text()) == {"sum": 3.0, "world": 2}


def test_the_trainer_trains_ddp_in_the_sandbox(tmp_path: Path) -> None:
    deployment = deploy(tmp_path / "var")
    spec = job_spec(
        2,
        data={"dataset": "synthetic"},
        train={"max_steps": 30, "batch_size": 32},
        metrics={"every_n_steps": 5},
    )
    run_dir = deployment.run_dir
    command, box, _ = sandboxed_job(deployment, [], dict(os.environ), spec)
    process = start(command)
    output, _ = process.communicate(timeout=TIMEOUT_S)
    logs = "\n".join(p.read_text() for p in sorted((run_dir / "logs").glob("*.log")))
    assert process.returncode == 0, output.decode(errors="replace") + logs
    events = [parse_event(line) for line in (run_dir / EVENTS_FILE).read_text().splitlines()]
    losses = [e.values["loss"] for e in events if isinstance(e, MetricsEvent) and "loss" in e.values]
    assert len(losses) >= 3 and losses[-1] < losses[0]
    assert isinstance(events[-1], DoneEvent)
    # Written by the ranks as the job's uid (65534 under a root worker); spec.json is the worker's.
    job_uid = box.run_as if box.run_as is not None else os.geteuid()
    written = {path.stat().st_uid for path in run_dir.rglob("*") if path.name != "spec.json"}
    assert written == {job_uid}
