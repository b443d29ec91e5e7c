"""This checkout, as the processes Trainyard starts see it: torchrun starts in it and the ranks import
`trainers` from it, on every node of a Slurm job too (a shared filesystem). Defined once, below everything
that starts ranks (the local runner, the Slurm script and node), so that a module moved deeper cannot count
its way to another folder."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
