"""The soak's report: the table of checks printed, the whole outcome as JSON (kills, jobs, answers, every
figure and series), and a short Markdown summary for a closing note."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.soak.run import Outcome


def table(outcome: Outcome) -> str:
    rows = [
        ["ok" if check.ok else ("missed" if check.kind == "target" else "FAIL"), check.name, check.figure]
        for check in outcome.checks
    ]
    lines = ["| result | check | figure |", "| --- | --- | --- |"]
    return "\n".join([*lines, *(f"| {' | '.join(row)} |" for row in rows)])


def offenders(outcome: Outcome) -> list[str]:
    return [f"{check.name}: {line}" for check in outcome.checks if not check.ok for line in check.offenders]


def markdown(outcome: Outcome) -> str:
    kills: dict[str, int] = {}
    for kill in outcome.kills:
        target = str(kill["target"]) + ("" if kill["pid"] is not None else " (missed)")
        kills[target] = kills.get(target, 0) + 1
    lines = [
        f"# Soak: {outcome.minutes:g} min on {outcome.db}, seed {outcome.seed}",
        "",
        f"**{'passed' if outcome.ok else 'FAILED'}**. Kills: {len(outcome.kills)} ({kills}). "
        f"Jobs accepted: {outcome.jobs}. Drained in {outcome.drained_s:g} s"
        + (f", still left: {outcome.drain_left}." if outcome.drain_left else "."),
        "",
        table(outcome),
    ]
    if found := offenders(outcome):
        lines += ["", "Offenders:", "", *(f"- {line}" for line in found)]
    return "\n".join(lines) + "\n"


def write(outcome: Outcome, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({**asdict(outcome), "ok": outcome.ok}, indent=2, default=str))
    (out / "summary.md").write_text(markdown(outcome))
