"""What the traced step reads: the loaded data as make_model sizes a built-in model by it, and one
micro-batch of the shape the loop would feed, both made of fake tensors (no storage), never read from disk."""

from __future__ import annotations

import torch

from jobspec.catalog.datasets import DATASETS, DatasetName, InputKind
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from trainers.components import resident_shape
from trainers.data import LoadedData, num_classes
from trainers.data.batches import Batch

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


def micro_batch(spec: JobSpec, plan: Plan, data: LoadedData | None) -> Batch:
    """One micro-batch as the loop feeds it: (inputs, targets)."""
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
