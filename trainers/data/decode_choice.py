"""data.decode=auto decided at a streamed job's start, in each rank, where its GPU and loader workers are
(the rule: jobspec/decode_plan.py). One loader worker's rate is timed here, in the rank's own process: the
job's first training images, read once, then decoded round and round with the workers' own decode_square at
the job's load size for DECODE_S. The rank logs its choice and the figures in one line.
"""

from __future__ import annotations

import os
import time
from collections import deque

import torch

from jobspec.data_plan import load_side
from jobspec.decode_plan import (
    GPU_DECODES_ALL,
    WORKERS_DECODE_ALL,
    DecodeChoice,
    Supply,
    choose_decode,
    decoding_workers,
    images_needed,
)
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from jobspec.spec_augment import Decode
from trainers.data.decode import decode_square, is_jpeg
from trainers.data.images import ImageSet, Samples

SAMPLE_IMAGES = 32
READ_S = 0.5  # reading the sample: an object store's GETs may be slow, and are not what is timed
DECODE_S = 0.5


def first_jpegs(samples: Samples, indices: list[int], budget_s: float = READ_S) -> list[bytes] | str:
    """The bytes of the images at `indices` read within budget_s (at least one), or why the GPU could not
    decode them: a file that is not a JPEG."""
    raws: list[bytes] = []
    started = time.monotonic()
    for index in indices:
        try:
            raw = samples.read(index)
        except Exception:  # as a worker's: a bad file is data.on_bad_sample's to judge once training reads it
            continue
        if not is_jpeg(raw):
            return f"{samples.name(index)} is not a JPEG, which nvJPEG cannot decode"
        raws.append(raw)
        if time.monotonic() - started > budget_s:
            break
    return raws or "none of the first images could be read"


def _decodes(raw: bytes, side: int) -> bool:
    try:
        decode_square(raw, side)
    except Exception:  # PIL raises a dozen kinds for a broken file: no part of a worker's rate
        return False
    return True


def decode_rate(raws: list[bytes], side: int, budget_s: float = DECODE_S) -> float | None:
    """Images a second one process decodes to side x side, cycling over `raws` for budget_s; None when
    none of them decodes."""
    _decodes(raws[0], side)  # the first call loads PIL's JPEG decoder: no worker's steady state
    left, decoded = deque(raws), 0
    started = time.perf_counter()
    while left and time.perf_counter() - started < budget_s:
        raw = left.popleft()
        if _decodes(raw, side):
            left.append(raw)
            decoded += 1
    return decoded / (time.perf_counter() - started) if decoded else None


def host_cores() -> int:
    """The cores this process may run on, which a container or a scheduler may hold below the machine's."""
    return len(os.sched_getaffinity(0))


def worker_supply(spec: JobSpec, plan: Plan, images: ImageSet) -> Supply | str:
    """What the rank's loader workers decode of this set, timed on its first training images; or why the
    set cannot be decoded on the GPU, or timed."""
    data = spec.inputs.data
    raws = first_jpegs(images.samples, [int(i) for i in images.train[:SAMPLE_IMAGES]])
    if isinstance(raws, str):
        return raws
    rate = decode_rate(raws, load_side(data))
    if rate is None:
        return "none of the first images decodes"
    workers = decoding_workers(data.loader_workers, host_cores(), plan.nproc_per_node)
    return Supply(rate, workers, asked=data.loader_workers)


def auto_decode(spec: JobSpec, plan: Plan, images: ImageSet, device: torch.device) -> DecodeChoice:
    """data.decode=auto's choice for this rank's streamed set; timed only where the rule needs a rate."""
    needed = images_needed(plan.per_rank_batch, plan.forecast.step_time_s if plan.forecast else None)
    timed = device.type == "cuda" and needed is not None
    return choose_decode(device.type, needed, worker_supply(spec, plan, images) if timed else None)


def workers_share(spec: JobSpec, plan: Plan, images: ImageSet, device: torch.device) -> float:
    """Of each batch of the streamed set, what the rank's loader workers decode (the GPU the rest): all or
    none by data.decode as given, or auto's choice, logged."""
    decode = spec.inputs.data.decode
    if decode is not Decode.AUTO:
        return GPU_DECODES_ALL if decode is Decode.GPU else WORKERS_DECODE_ALL
    choice = auto_decode(spec, plan, images, device)
    print(f"data: data.decode=auto: {choice.reason}", flush=True)
    return choice.workers_share
