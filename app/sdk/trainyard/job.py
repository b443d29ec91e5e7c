"""`import trainyard.job as ty`: the in-job library, trainers/job (its docstring shows a whole loop)."""

from trainers.job import (
    Context,
    autocast,
    backward,
    checkpoint_due,
    data_loader,
    init,
    prepare,
    report,
    report_eval,
    restore,
    save,
    should_stop,
    steps,
)

__all__ = [
    "Context",
    "autocast",
    "backward",
    "checkpoint_due",
    "data_loader",
    "init",
    "prepare",
    "report",
    "report_eval",
    "restore",
    "save",
    "should_stop",
    "steps",
]
