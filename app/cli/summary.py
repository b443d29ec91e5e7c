"""One job's numbers as `trainyard compare` shows them: a module of its own, which both the table
(app/cli/compare.py) and the JSON answer (app/cli/answers.py) use, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    job_id: int
    name: str
    status: str
    strategy: str
    precision: str
    devices: str
    wall_s: float | None  # running -> finished: start-up and queueing are not training
    samples_per_s: float | None  # the median, so warm-up and eval pauses do not pull it around
    final_loss: float | None
    final_eval_accuracy: float | None
    peak_mem_mb: float | None
    gpu_util_pct: float | None  # the mean over every GPU and sample the worker took
    tokens_per_s: float | None  # language models only, like the two below
    mfu: float | None
    final_eval_perplexity: float | None
