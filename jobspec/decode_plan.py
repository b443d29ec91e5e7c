"""data.decode=auto's rule (issue 48): the GPU decodes a streamed set's JPEGs when the rank's loader workers
cannot decode as many images a second as its model takes, the workers otherwise. No torch: the plan states
the rule, and the trainer applies it at start (trainers/data/decode_choice.py) once it has timed one worker's
decoding on the job's own images and knows the host's cores.

What the model takes comes from the forecast (plan.forecast): per_rank_batch images per forecast step time.
A job without one decodes on its loader workers, as every job did before auto: nothing then says that the
CPUs fall short, and they cost the GPU nothing, where decoding on it slows every step.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobspec.spec_augment import Decode

# Of the images a second a model takes held whole, what it still trains at while its GPU decodes its JPEGs
# too (nvJPEG and the resize share the GPU with the step): 0.87 for ResNet-50 at 128 px on an H200, 9,329
# against 10,755 img/s (issue 48). The GPU pays once the CPUs supply less than that share; at the crossing
# both give about the same, and a little under it leaves a near tie to the CPUs, which take nothing from
# the GPU.
GPU_DECODE_KEEPS = 0.85


@dataclass(frozen=True)
class DecodeChoice:
    decode: Decode  # CPU or GPU, never AUTO
    reason: str  # the figures and the rule, as one log line says them


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
    because nothing needed it)."""
    if device != "cuda":
        return DecodeChoice(Decode.CPU, "cpu: a CPU job's loader workers decode")
    if needed is None:
        return DecodeChoice(
            Decode.CPU,
            "cpu: the job has no forecast step time, so nothing says how many images a second the model "
            "takes; the loader workers decode (set data.decode gpu to decode on the GPU)",
        )
    if not isinstance(supply, Supply):
        return DecodeChoice(Decode.CPU, f"cpu: {supply or 'nothing was timed'}; the loader workers decode")
    enough = supply.per_worker * supply.workers >= needed * GPU_DECODE_KEEPS
    choice = Decode.CPU if enough else Decode.GPU
    return DecodeChoice(
        choice,
        f"{choice}: {supply}, {'at least' if enough else 'below'} {GPU_DECODE_KEEPS:.0%} of the "
        f"{needed:,.0f} img/s the model takes by its forecast",
    )


def auto_rule(loader_workers: int) -> str:
    """The rule in the plan's words, before the job has timed anything."""
    return (
        f"{loader_workers} loader workers or the GPU (nvJPEG), as data.decode=auto decides at start: the GPU "
        f"when the workers, one timed on the job's first JPEGs, decode under {GPU_DECODE_KEEPS:.0%} of the "
        "images a second the model takes (per-rank batch / the forecast's step time), else the workers; the "
        "workers without a forecast or for files that are not JPEGs"
    )
