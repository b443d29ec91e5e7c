"""data.decode=auto's rule (issue 48): where the rank's loader workers cannot decode as many images a second
as its model takes, each batch is split: the workers decode a part in proportion to their rate and the GPU
the rest, both at once; the workers alone otherwise. No torch: the plan states the rule, and the trainer
applies it at start (trainers/data/decode_choice.py) once it has timed one worker's decoding on the job's
own images and knows the host's cores.

What the model takes comes from the forecast (plan.forecast): per_rank_batch images per forecast step time.
A job without one decodes on its loader workers, as every job did before auto: nothing then says that the
CPUs fall short, and they cost the GPU nothing, where decoding on it slows every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobspec.spec_augment import Decode

# Of the images a second a model takes held whole, what it still trains at while its GPU decodes its JPEGs
# too (nvJPEG and the resize share the GPU with the step): 0.87 for ResNet-50 at 128 px on an H200, 9,329
# against 10,755 img/s (issue 48). The GPU pays once the CPUs supply less than that share; at the crossing
# both give about the same, and a little under it leaves a near tie to the CPUs, which take nothing from
# the GPU.
GPU_DECODE_KEEPS = 0.85
# The workers' share of a split is rounded down to sixteenths: a rank's timing varies a little from start to
# start, and a job resumed elsewhere should mostly decode each sample where it was decoded before.
SHARE_STEPS = 16
WORKERS_DECODE_ALL, GPU_DECODES_ALL = 1.0, 0.0  # the workers' share under data.decode cpu, gpu


@dataclass(frozen=True)
class DecodeChoice:
    workers_share: float  # of each batch, what the loader workers decode; the GPU decodes the rest
    reason: str  # the figures and the rule, as one log line says them

    @property
    def decode(self) -> Decode:
        """CPU where the workers decode everything, else GPU (which decodes all or part), never AUTO."""
        return Decode.CPU if self.workers_share >= WORKERS_DECODE_ALL else Decode.GPU


def split_share(supplied: float, needed: float) -> float:
    """The workers' share of each batch (needed > 0): supplied / (supplied + needed), rounded down, so that
    they and the GPU take as long over their parts when the GPU decodes as many images a second as the
    model takes, as it must to keep up. The GPU's own rate is not timed: alone at start its decoder would
    not run as it does beside the training step. Nor is `supplied` what the workers deliver: one worker
    decoding alone is timed, where the workers also read, batch and hand over files; so the share leans to
    the GPU, whose part is the larger, where a few images more slow each batch less than on the workers'."""
    return math.floor(SHARE_STEPS * supplied / (supplied + needed)) / SHARE_STEPS


def decoding_workers(loader_workers: int, cores: int, ranks_per_host: int) -> int:
    """Loader workers one rank can keep decoding at once: its data.loader_workers (with none, its own
    process decodes), no more than its share of the host's cores less the one its training loop takes."""
    return max(1, min(loader_workers, cores // ranks_per_host - 1))


def images_needed(per_rank_batch: int, step_time_s: float | None) -> float | None:
    """Images a second one rank's model takes, by the forecast's step time; None without a forecast."""
    return None if not step_time_s else per_rank_batch / step_time_s


@dataclass(frozen=True)
class Supply:
    """What the rank's loader workers decode: one worker's images a second at the load size, timed, and how
    many decode at once."""

    per_worker: float
    workers: int
    asked: int  # data.loader_workers: more than `workers` where the host has too few cores per rank

    def __str__(self) -> str:
        busy = f"{self.workers} loader worker{'s' if self.workers > 1 else ''}"
        capped = f" at once (of {self.asked}: the host's cores per rank)" if self.workers < self.asked else ""
        verb = "decode" if self.workers > 1 else "decodes"
        decoded = self.per_worker * self.workers
        return f"{busy}{capped} {verb} {decoded:,.0f} img/s ({self.per_worker:,.0f} each, timed)"


def choose_decode(device: str, needed: float | None, supply: Supply | str | None) -> DecodeChoice:
    """auto's choice: `needed` images a second the model takes (None: no forecast), against the workers'
    `supply` (a reason in words where the job's images could not be timed; None where nothing was timed
    because nothing needed it). Its reason starts with cpu, gpu or split (with the shares)."""
    if device != "cuda":
        return DecodeChoice(WORKERS_DECODE_ALL, "cpu: a CPU job's loader workers decode")
    if needed is None:
        return DecodeChoice(
            WORKERS_DECODE_ALL,
            "cpu: the job has no forecast step time, so nothing says how many images a second the model "
            "takes; the loader workers decode (set data.decode gpu to decode on the GPU)",
        )
    if not isinstance(supply, Supply):
        return DecodeChoice(
            WORKERS_DECODE_ALL, f"cpu: {supply or 'nothing was timed'}; the loader workers decode"
        )
    supplied = supply.per_worker * supply.workers
    enough = supplied >= needed * GPU_DECODE_KEEPS
    share = WORKERS_DECODE_ALL if enough else split_share(supplied, needed)
    figures = (
        f"{supply}, {'at least' if enough else 'below'} {GPU_DECODE_KEEPS:.0%} of the {needed:,.0f} img/s "
        "the model takes by its forecast"
    )
    if share in (WORKERS_DECODE_ALL, GPU_DECODES_ALL):
        return DecodeChoice(share, f"{'cpu' if enough else 'gpu'}: {figures}")
    return DecodeChoice(
        share,
        f"split (workers {share:.0%}, GPU {1 - share:.0%}): {figures}; the workers decode {share:.0%} of "
        "each batch (their rate over theirs and the model's together) and the GPU the rest, both at once",
    )


def auto_rule(loader_workers: int) -> str:
    """The rule in the plan's words, before the job has timed anything."""
    return (
        f"{loader_workers} loader workers, the GPU (nvJPEG) or both, as data.decode=auto decides at start: "
        f"when the workers, one timed on the job's first JPEGs, decode under {GPU_DECODE_KEEPS:.0%} of the "
        "images a second the model takes (per-rank batch / the forecast's step time), each batch is split: "
        "the workers decode their rate / (their rate + the model's) of it (rounded down to "
        f"1/{SHARE_STEPS}), the GPU the rest, both at once (the GPU all of it when that part rounds to 0); "
        "else the workers; the workers without a forecast or for files that are not JPEGs"
    )
