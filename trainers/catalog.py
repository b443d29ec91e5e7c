"""What the registries hold, by name: architectures with their allowed kwargs and top-level modules, and
datasets. Plain data, no torch: the API validates specs against it, and a unit test checks it against the
real models (tests/unit/test_strategies_stages.py).
"""

from __future__ import annotations

RESNET_MODULES = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc")

# Allowed model kwargs per architecture: name -> (type, low, high). Anything else is refused, so a spec can
# never pass arbitrary keyword arguments into a constructor.
MODEL_KWARGS: dict[str, dict[str, tuple[type, float, float]]] = {
    "mlp": {"hidden": (int, 4, 16384), "depth": (int, 1, 32)},
    "small_cnn": {"channels": (int, 4, 1024)},
    "alexnet": {"dropout": (float, 0.0, 0.9)},
    "resnet18": {},
    "resnet50": {},
    "vgg11": {"dropout": (float, 0.0, 0.9)},
    "embedding_bag": {"embedding_dim": (int, 1, 4096)},
}

# Each architecture's top-level modules as named_children() lists them (forward order): the names
# parallel.split_at and parallel.placement may use. mlp's depth changes its count: see module_names.
MODULE_NAMES: dict[str, tuple[str, ...]] = {
    "mlp": tuple(str(i) for i in range(6)),  # Flatten, then (Linear, ReLU) x depth 2, then Linear
    "small_cnn": tuple(str(i) for i in range(8)),
    "alexnet": ("features", "avgpool", "classifier"),
    "resnet18": RESNET_MODULES,
    "resnet50": RESNET_MODULES,
    "vgg11": ("features", "avgpool", "classifier"),
    "embedding_bag": ("embedding", "classifier"),
}

DATASETS = ("synthetic", "digits", "synthetic_bags", "cifar10", "mnist", "image_folder")
DATASETS_ON_DISK = ("cifar10", "mnist", "image_folder")

# Architectures that take bags of token ids, not images, and the datasets that hold such bags: the one kind
# of model cannot read the other kind of data.
TOKEN_ARCHS = ("embedding_bag",)
TOKEN_DATASETS = ("synthetic_bags",)
# Architectures whose embedding tables have sparse gradients, which only plain SGD takes (see schedule.py).
SPARSE_ARCHS = ("embedding_bag",)
# Datasets evaluated on their own test split; the others hold out data.val_fraction of their samples.
DATASETS_WITH_TEST_SPLIT = ("cifar10", "mnist")
