"""One running Trainyard service for a series of benchmark jobs: API, SQL, Celery worker, torchrun, trainer.

Starts the embedded stack (SQLite database and broker, a real uvicorn and Celery worker) in a temporary
directory and runs jobs through it one after another, so no two share a GPU. What a job did is read from the
trainer's own event file (runs/<job>/events.jsonl): its times come from the trainer's clock, not from when
the worker happened to tail them into SQL.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.budget import Budget
from bench.result import SKIPPED, Result, failed
from jobspec.events import EVENTS_FILE, DoneEvent, Event, MetricsEvent, PhaseEvent, parse_event
from jobspec.spec import JobSpec
from tests.integration.jobs import TERMINAL, submit, wait_status
from tests.integration.servers import Stack

MESSAGE_CHARS = 160  # of a failed job's message in a table cell; the whole of it goes to stderr
CANCEL_WAIT_S = 60  # a cancelled job must let go of its GPUs before the next one starts


@dataclass(frozen=True)
class Finished:
    """A job that succeeded: its row from the API and the events its trainer wrote."""

    job: dict[str, Any]
    events: list[Event]

    def metric(self, name: str) -> list[tuple[int, float]]:
        return [
            (e.step, e.values[name]) for e in self.events if isinstance(e, MetricsEvent) and name in e.values
        ]

    def _time(self, kind: type[PhaseEvent] | type[DoneEvent]) -> float | None:
        return next((e.time for e in self.events if isinstance(e, kind)), None)

    def steady_rate(self, warmup: int) -> float | None:
        """The median samples/s of the reports after warm-up (the first windows hold cudnn autotuning and
        compilation); the last report when none comes after it."""
        rates = self.metric("samples_per_s")
        steady = [value for step, value in rates if step > warmup] or [value for _, value in rates[-1:]]
        return statistics.median(steady) if steady else None

    def start_latency_s(self) -> float | None:
        """From the POST (the job's created_at) to the trainer saying it is about to take its first step."""
        first_step = self._time(PhaseEvent)
        if first_step is None:
            return None
        return first_step - datetime.fromisoformat(self.job["created_at"]).timestamp()

    def _report_time(self, step: int) -> float | None:
        return next((e.time for e in self.events if isinstance(e, MetricsEvent) and e.step == step), None)

    def seconds_between(self, start: int, end: int) -> float | None:
        """The trainer's clock from its report at step `start` to its report at step `end`: the steps in
        between, with whatever they reported or saved (a report waits for the GPU, so the work is done)."""
        begin, finish = self._report_time(start), self._report_time(end)
        return None if begin is None or finish is None else finish - begin

    def seconds_to_done(self, step: int) -> float | None:
        """From the report at `step` to the done event: after the last step, the final checkpoint's write."""
        begin, done = self._report_time(step), self._time(DoneEvent)
        return None if begin is None or done is None else done - begin

    def peak_mem_mb(self) -> float | None:
        peaks = [value for _, value in self.metric("peak_mem_mb")]
        return max(peaks) if peaks else None


def job_result(variant: str, finished: Finished, warmup: int, on_gpu: bool, world_size: int) -> Result:
    """The benchmark row of a job: steady img/s, peak GPU memory (none on the CPU), POST→first step."""
    return Result(
        variant=variant,
        images_per_s=finished.steady_rate(warmup),
        peak_mem_mb=finished.peak_mem_mb() if on_gpu else None,
        latency_s=finished.start_latency_s(),
        world_size=world_size,
        final_loss=finished.job["latest_metrics"].get("loss"),
        phases=tuple(
            (p["phase"], p["seconds"]) for p in (finished.job.get("timings") or {}).get("phases", [])
        ),
    )


class JobFailed(Exception):
    """The job did not succeed in its time; the message says how it ended."""


@dataclass
class Service:
    stack: Stack
    client: httpx.Client

    @classmethod
    @contextmanager
    def started(cls, gpus: int, on_gpu: bool, **env: str) -> Iterator[Service]:
        """The stack with GPUs 0..gpus-1 visible to its worker (none on the CPU), stopped on the way out;
        `env` adds settings of the API's and the worker's (TRAINYARD_SANDBOX=off, say)."""
        visible = ",".join(str(i) for i in range(gpus)) if on_gpu else ""
        with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
            workdir = Path(tmp)
            stack = Stack.embedded(workdir, None, CUDA_VISIBLE_DEVICES=visible, **env)
            try:
                with stack.client() as client:
                    yield cls(stack, client)
            finally:
                stack.stop()

    def device(self) -> str:
        """The GPU model the worker reported, for the RESULTS.md heading."""
        hosts = self.client.get("/v1/gpus").json()["data"]
        names = [gpu.get("name") for host in hosts for gpu in host["gpus"]]
        return next((name for name in names if name), "cpu")

    def run(self, spec: dict[str, Any], timeout: float) -> Finished:
        JobSpec.model_validate(spec)  # a spec that drifted from jobspec/spec.py fails here, naming the field
        job = submit(self.client, spec)
        try:
            job = wait_status(self.client, job["id"], {"succeeded"}, timeout=timeout)
        except AssertionError as exc:
            why = self._diagnose(job["id"])
            self._cancel(job["id"])
            raise JobFailed(why) from exc
        events_file = Path(self.stack.env["TRAINYARD_RUNS_DIR"]) / str(job["id"]) / EVENTS_FILE
        events = [parse_event(line) for line in events_file.read_text().splitlines() if line.strip()]
        return Finished(job, events)

    def attempt(self, variant: str, spec: dict[str, Any], budget: Budget, cap_s: float) -> Finished | Result:
        """Run one variant as a job within the budget; a failure or a spent budget gives the row saying so."""
        timeout = budget.timeout(cap_s)
        if timeout is None:
            return failed(variant, f"{SKIPPED}: out of time")
        print(f"\n>>> {variant}", file=sys.stderr, flush=True)
        try:
            return self.run(spec, timeout)
        except JobFailed as exc:
            return failed(variant, f"job {exc}")

    def result(
        self, variant: str, spec: dict[str, Any], budget: Budget, cap_s: float, warmup: int, on_gpu: bool
    ) -> Result:
        """The job's row: steady img/s, peak memory, POST→first step (see job_result)."""
        outcome = self.attempt(variant, spec, budget, cap_s)
        if isinstance(outcome, Result):
            return outcome
        world = len(spec["parallel"].get("gpus") or []) or spec["parallel"].get("nproc_per_node") or 1
        return job_result(variant, outcome, warmup, on_gpu, world)

    def _cancel(self, job_id: int) -> None:
        """Stop a job that ran out of time, and wait until it holds no GPU the next job needs."""
        self.client.post(f"/v1/jobs/{job_id}/cancel")
        try:
            wait_status(self.client, job_id, TERMINAL, timeout=CANCEL_WAIT_S)
        except AssertionError:
            print(f"job {job_id} did not stop within {CANCEL_WAIT_S}s", file=sys.stderr)

    def _diagnose(self, job_id: int) -> str:
        """Print what the person at the GPU machine needs to see why the job did not succeed; return its
        status and message, short enough for a table cell."""
        job = self.client.get(f"/v1/jobs/{job_id}").json()
        status = f"{job.get('status')} ({job.get('status_reason')}): {job.get('message')}"
        print(f"job {job_id}: {status}", file=sys.stderr)
        log = self.client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0})
        if log.status_code == 200:
            print("rank 0 log:\n" + log.json().get("text", "")[-4000:], file=sys.stderr)
        print("worker log:\n" + self.stack.log("worker")[-4000:], file=sys.stderr)
        # One line without "|": anything else would break the markdown row it goes into.
        return " ".join(status.split()).replace("|", "/")[:MESSAGE_CHARS]


def run_series(
    gpus: int, on_gpu: bool, series: Callable[[Service], list[Result]], **env: str
) -> tuple[str, list[Result]]:
    """The device name and the rows of `series` run in one service; a service that does not even start
    gives one row saying why, so a suite of benchmarks goes on to the next."""
    try:
        with Service.started(gpus, on_gpu, **env) as service:
            return service.device(), series(service)
    except Exception as exc:  # any failure to start or to talk to the stack: recorded, not raised
        return "unknown device", [failed("service", repr(exc))]
