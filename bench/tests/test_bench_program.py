"""bench.program's pure parts: the program job it submits plans as the script's own runs, and the rate each
run prints is read back from its output."""

from __future__ import annotations

from bench.program import SCRIPT, program_spec, rate_in, setup, table
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec, Precision, Strategy

CODE = "sha256:" + "0" * 64


def test_the_job_runs_the_script_with_its_args_on_as_many_ranks_as_bare_torchrun() -> None:
    for run, ranks, precision in (
        (setup(300, 4, smoke=False), 4, Precision.BF16),
        (setup(0, 0, True), 2, Precision.FP32),
    ):
        spec = JobSpec.model_validate(program_spec(CODE, run))
        plan = resolve_plan(spec)
        assert (plan.strategy, plan.world_size, plan.precision) == (Strategy.DDP, ranks, precision)
        assert spec.program is not None and spec.program.entrypoint == ["python", "train.py", *run.args]
        assert spec.train.max_steps == int(run.args[run.args.index("--steps") + 1])
    compile(SCRIPT, "train.py", "exec")


def test_the_rate_is_the_last_one_printed_and_shown_against_bare_torchrun() -> None:
    assert rate_in("noise\nBENCH img/s 12.50\nBENCH img/s 13.25\n") == 13.25
    assert rate_in("it crashed") is None
    shown = table("H100", 100.0, 99.5, 30)
    assert "| program job (service + trainyard.job) | 99.5 | 0.99x | 30 | ≥ 0.99x |" in shown
