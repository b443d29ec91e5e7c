"""What the traced step reads: the loaded data as make_model sizes a built-in model by it, and one
micro-batch of the shape the loop would feed, both made of fake tensors (no storage). A built-in dataset is
never read from disk; a data.factory's first sample is (its shape is known no other way), inside the
sandbox as the job's ranks would read it (app/services/bundle_forecasts.py)."""

from __future__ import annotations

import torch
from torch.utils.data import default_collate

from jobspec.catalog.datasets import DATASETS, DatasetName, InputKind
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from trainers.components import needed, resident_shape
from trainers.data import LoadedData, num_classes
from trainers.data.batches import Batch, map_tensors
from trainers.data.user import is_stream, load_user_data
from trainers.user_code import Bundle

# A sample's channels and side as the built-in image datasets store them; image_folder and shards are
# decoded at data.load_size.
_STORED: dict[DatasetName, tuple[int, int]] = {
    DatasetName.DIGITS: (1, 8),
    DatasetName.CIFAR10: (3, 32),
    DatasetName.MNIST: (1, 28),
}


def stand_in_data(spec: JobSpec) -> LoadedData | None:
    """The loaded data of a built-in image or bag dataset as one fake sample: what make_model reads of it
    (channels, native size, classes). None for token datasets and data.factory, which size nothing."""
    data = spec.inputs.data
    if data.dataset is None or DATASETS[data.dataset].input is InputKind.TOKENS:
        return None
    classes = num_classes(data)
    labels = torch.zeros(1, dtype=torch.int64)
    if DATASETS[data.dataset].input is InputKind.TOKEN_BAGS:
        sample = torch.zeros(1, data.bag_size, dtype=torch.int64)
    else:
        channels, side = _STORED.get(data.dataset, (data.channels, 32))
        if DATASETS[data.dataset].streams:
            channels, side = 3, data.load_size or data.image_size or 64
        sample = torch.zeros(1, channels, side, side)
    return LoadedData(train=(sample, labels), val=(sample, labels), num_classes=classes)


def factory_batch(spec: JobSpec, plan: Plan, bundle: Bundle | None) -> Batch | None:
    """data.factory's micro-batch of real tensors: its training set's first sample, micro_batch times,
    collated as the job's loader would. Made before the fake tensors, so that the factory's code runs as in
    the job (files, numpy, a generator), never under them. None for a built-in dataset."""
    if spec.inputs.data.factory is None:
        return None
    data = load_user_data(needed(bundle, "data.factory"), spec.inputs.data)
    try:
        sample = next(iter(data.train)) if is_stream(data.train) else data.train[0]
        return (data.collate or default_collate)([sample] * max(plan.micro_batch, 1))
    except Exception as exc:
        raise data.failed(exc) from exc


def micro_batch(spec: JobSpec, plan: Plan, data: LoadedData | None, collated: Batch | None = None) -> Batch:
    """One micro-batch as the loop feeds it: (inputs, targets); `collated`'s (factory_batch) as fake tensors
    of the same shapes, when the job's data comes from its data.factory."""
    if collated is not None:
        return map_tensors(collated, torch.empty_like)
    size = max(plan.micro_batch, 1)
    if data is None:  # token windows: block_size ids and the ids one token later
        block = spec.inputs.data.block_size or 1
        ids = torch.zeros(size, block, dtype=torch.int64)
        return ids, ids.clone()
    labels = torch.zeros(size, dtype=torch.int64)
    if data.tokens:
        return torch.zeros(size, data.train[0].shape[1], dtype=torch.int64), labels
    shape = resident_shape(spec, data)
    return torch.zeros(size, shape.channels, shape.image_size, shape.image_size), labels
