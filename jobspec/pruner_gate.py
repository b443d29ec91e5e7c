"""The pruner's gate between a sweep's trial and its worker: a trial never trains more than GATE_LAG_S past
a report of its objective that the worker has not judged yet. Without it a trial's small steps ran on for
epochs past a rung while its verdict was on its way, and on a busy worker the verdicts came too late to save
the steps ASHA exists to save (ASHA's acceptance test ran 65 % of the unpruned steps, against under half).

The worker writes `verdicts/pruner.json` in the run directory of each trial it judges: the objective's name,
and the last step of it judged (a trial told to stop is also SIGTERMed). Rank 0 reads it at every report
(trainers/pruner_wait.py) and waits there while a report of `metric` older than GATE_LAG_S is unjudged, for
at most GATE_WAIT_S, after which the trial trains on (a worker gone is the reaper's to notice, not the
trial's). A job with no such file never waits. The worker never reads this file back."""

from __future__ import annotations

from pydantic import BaseModel, Field

GATE_DIR = "verdicts"
GATE_FILE = "pruner.json"
GATE_LAG_S = 1.0
GATE_WAIT_S = 30.0
GATE_POLL_S = 0.02


class PrunerGate(BaseModel):
    metric: str = Field(max_length=256)
    judged: int = Field(ge=-1)  # the last step of `metric` the pruner judged; -1: none yet
