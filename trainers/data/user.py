"""The datasets a data.factory of the code bundle returns: (train, val | None) or (train, val, collate), each
a torch Dataset, map-style (__getitem__ and __len__) or an IterableDataset. Checked here, in the job's first
seconds, so a wrong return fails as the factory's fault rather than deep inside a DataLoader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from jobspec.datadir import data_dir_from_env, resolve_data_root
from jobspec.spec import DataSpec
from trainers.user_code import Bundle, type_name
from trainers.user_errors import UserCodeError, error_line, failure

Collate = Callable[[list[Any]], Any]


@dataclass(frozen=True)
class UserData:
    """Datasets read through DataLoaders: a data.factory's, or a built-in one read a window at a time
    (trainers/data/tokens.py)."""

    entry: str  # for messages: the factory's `module:function`, or "data.dataset NAME"
    root: Path | None  # the bundle's, whose frames a failure shows; None for a built-in dataset
    train: Dataset[Any]
    val: Dataset[Any] | None
    collate: Collate | None

    @property
    def source(self) -> str:
        """Where the datasets come from, as messages name it."""
        return self.entry if self.root is None else f"data.factory {self.entry!r}"

    def failed(self, exc: Exception) -> Exception:
        """A failure while reading a batch: the dataset's __getitem__ or __iter__, or collating. The
        factory's code is blamed for its own datasets; a built-in dataset's failure is the data's."""
        if self.root is None:
            return ValueError(f"{self.entry} could not be read: {error_line(exc)}")
        return failure(f"data.factory {self.entry!r}'s dataset", exc, self.root)


def is_stream(dataset: Dataset[Any]) -> bool:
    return isinstance(dataset, IterableDataset)


def _checked(entry: str, role: str, dataset: object) -> Dataset[Any]:
    if not isinstance(dataset, Dataset):
        raise UserCodeError(
            f"data.factory {entry!r} returned {type_name(dataset)} as its {role} split; return a "
            "torch.utils.data.Dataset (map-style, with __getitem__ and __len__) or an IterableDataset"
        )
    if not is_stream(dataset) and not hasattr(dataset, "__len__"):
        raise UserCodeError(
            f"data.factory {entry!r}'s {role} split is a map-style Dataset without __len__, which sampling "
            "needs; define __len__, or make it an IterableDataset"
        )
    return dataset


def user_data(entry: str, root: Path, returned: Any) -> UserData:
    """What data.factory returned, checked."""
    if not isinstance(returned, tuple) or len(returned) not in (2, 3):
        raise UserCodeError(
            f"data.factory {entry!r} returned {type_name(returned)}; return (train, val) or "
            "(train, val, collate), with val None when nothing is held out"
        )
    train, val, *rest = returned
    collate = rest[0] if rest else None
    if collate is not None and not callable(collate):
        raise UserCodeError(
            f"data.factory {entry!r} returned {type_name(collate)} as collate; return a function"
        )
    held_out = None if val is None else _checked(entry, "val", val)
    return UserData(entry, root, _checked(entry, "train", train), held_out, collate)


def load_user_data(bundle: Bundle, data: DataSpec) -> UserData:
    """data.factory(**data.kwargs), given data.root resolved inside TRAINYARD_DATA_DIR as root= when set."""
    if data.factory is None:
        raise ValueError("load_user_data needs data.factory")
    kwargs = dict(data.kwargs)
    if data.root is not None:
        kwargs["root"] = str(resolve_data_root(data_dir_from_env(), data.root))
    returned = bundle.call("data.factory", data.factory, **kwargs)
    return user_data(data.factory, bundle.root, returned)
