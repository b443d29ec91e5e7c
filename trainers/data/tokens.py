"""data.dataset tokens and text as the loop reads them: windows of data.block_size token ids from a flat file
of ids, memory-mapped, so a file larger than memory trains like a small one.

A sample is (input, target): block_size ids and the block_size ids one token later, as int64. Window i starts
at token i * block_size of its span: the windows of an epoch never overlap, and every token is a target once
per epoch. They go through the DataLoader path of a data.factory's datasets (trainers/data/steps.py): the
epoch's order and each rank's share come from a seeded DistributedSampler, which a resumed run restarts
mid-epoch from the step alone.

`python -m trainers.data.tokens make-demo DIR` writes a small train.bin and val.bin to try it on.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from jobspec.catalog.datasets import DatasetName
from jobspec.data_store import is_store_root
from jobspec.datadir import data_dir_from_env, run_dir_from_env
from jobspec.problems import refuse
from jobspec.spec import DataSpec
from jobspec.spec_inputs import TokenDtype
from jobspec.token_files import (
    DEMO_HINT,
    TRAIN_FILE,
    VAL_FILE,
    TokenSpan,
    ids_in,
    split_tokens,
    token_splits,
)
from trainers.data.files import StoreFiles
from trainers.data.roots import data_root, open_root
from trainers.data.synthetic_tokens import bigram_ids, synthetic_splits
from trainers.data.user import UserData

Window = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Stored:
    """Where a span's file is an object: read by ranged GETs of each window, at the listed version."""

    files: StoreFiles
    version: str


class TokenWindows(Dataset[Window]):
    """The windows of a span of token ids. With vocab_size, each id read is checked to be below it: a wrong
    data.token_dtype or data.vocab_size fails the job naming them, not deep inside an embedding."""

    def __init__(
        self, span: TokenSpan, block_size: int, vocab_size: int | None, stored: Stored | None = None
    ) -> None:
        self.span = span
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.stored = stored
        self._ids: np.memmap[Any, np.dtype[Any]] | None = None

    def __len__(self) -> int:
        return self.span.windows(self.block_size)

    def __getstate__(self) -> dict[str, Any]:
        # A loader worker maps the file itself: a pickled memmap would copy the whole file into the message.
        return {**self.__dict__, "_ids": None}

    def _mapped(self) -> np.memmap[Any, np.dtype[Any]]:
        if self._ids is None:
            self._ids = np.memmap(self.span.path, dtype=self.span.dtype.value, mode="r")
        return self._ids

    def _read(self, start: int, count: int) -> np.ndarray:
        if self.stored is None:
            return self._mapped()[start : start + count]
        width = self.span.dtype.itemsize
        raw = self.stored.files.read(str(self.span.path), start * width, count * width, self.stored.version)
        return np.frombuffer(raw, dtype=self.span.dtype.value)

    def __getitem__(self, index: int) -> Window:
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} of {len(self)}")
        start = self.span.start + index * self.block_size
        window = torch.from_numpy(self._read(start, self.block_size + 1).astype(np.int64))
        if self.vocab_size is not None:
            self._check_ids(window, start, self.vocab_size)
        return window[:-1], window[1:]

    def _check_ids(self, window: torch.Tensor, start: int, vocab_size: int) -> None:
        top = int(window.max())
        if top >= vocab_size:
            raise ValueError(
                f"{self.span.path.name} holds token id {top} (near token {start}), and data.vocab_size is "
                f"{vocab_size}; set data.vocab_size to at least {top + 1}, or data.token_dtype to the width "
                f"the file was written with ({self.span.dtype} now)"
            )


def load_tokens(data: DataSpec, seed: int = 0) -> UserData:
    """The training and held-out windows of data.dataset tokens, of text tokenized into the run dir, or of
    synthetic_tokens generated there from `seed`."""
    assert data.block_size is not None, "the planner requires data.block_size for token datasets"
    data_dir = data_dir_from_env()
    if data.dataset is DatasetName.TEXT:
        from trainers.data.text import corpus_splits

        # The tokenizer made every id, so none is out of its vocabulary.
        splits, vocab_size = corpus_splits(data, data_dir, run_dir_from_env()), None
    elif data.dataset is DatasetName.SYNTHETIC_TOKENS:
        splits, vocab_size = synthetic_splits(data, seed, run_dir_from_env()), None
    elif is_store_root(data.root):
        return stored_tokens(data)
    else:
        splits, vocab_size = token_splits(data, data_dir), data.vocab_size
    train = TokenWindows(splits.train, data.block_size, vocab_size)
    val = None if splits.val is None else TokenWindows(splits.val, data.block_size, vocab_size)
    return UserData(f"data.dataset {data.dataset}", None, train, val, None)


def stored_tokens(data: DataSpec) -> UserData:
    """data.dataset tokens in an object store: train.bin, and val.bin when there is one, as listed."""
    block_size = data.block_size
    assert block_size is not None, "the planner requires data.block_size for token datasets"
    root = open_root(*data_root(data))
    files = root.files
    assert isinstance(files, StoreFiles)
    wanted = (TRAIN_FILE, VAL_FILE)
    found = {entry.relative: entry for entry in root.entries(lambda name: name in wanted, recursive=False)}
    if TRAIN_FILE not in found:
        raise refuse(
            "data.root",
            f"data.root {data.root!r} holds no {TRAIN_FILE}",
            f"upload the training token ids there as one flat {data.token_dtype} file; {DEMO_HINT}",
        )
    spans = [
        TokenSpan(
            Path(found[name].name),
            data.token_dtype,
            0,
            ids_in(found[name].size, data.token_dtype, files.shown(found[name].name)),
            name,
        )
        for name in wanted
        if name in found
    ]
    splits = split_tokens(data, spans[0], spans[1] if len(spans) > 1 else None)
    # The version of each span's file: a tail held out of train.bin reads train.bin's.
    versions = {str(Path(entry.name)): entry.version for entry in found.values()}

    def windows(span: TokenSpan) -> TokenWindows:
        stored = Stored(files, versions[str(span.path)])
        return TokenWindows(span, block_size, data.vocab_size, stored)

    val = None if splits.val is None else windows(splits.val)
    return UserData(f"data.dataset {data.dataset}", None, windows(splits.train), val, None)


def make_demo(directory: Path, tokens: int, vocab_size: int, seed: int = 0) -> None:
    """train.bin and val.bin (a tenth as long) of uint16 ids that a bigram model learns: each id is the one
    before it plus 1 or 2, modulo vocab_size, so a next-token loss falls from ln(vocab_size) to ln(2)."""
    directory.mkdir(parents=True, exist_ok=True)
    for offset, (name, count) in enumerate(((TRAIN_FILE, tokens), (VAL_FILE, max(2, tokens // 10)))):
        ids = bigram_ids(count, vocab_size, seed + offset)
        ids.astype(TokenDtype.UINT16.value).tofile(directory / name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainers.data.tokens")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("make-demo", help="write a small train.bin and val.bin of uint16 token ids")
    demo.add_argument("directory", type=Path, help="a directory under TRAINYARD_DATA_DIR; data.root names it")
    demo.add_argument("--tokens", type=int, default=100_000, help="ids in train.bin")
    demo.add_argument("--vocab-size", type=int, default=64, help="ids are below it; data.vocab_size")
    args = parser.parse_args(argv)
    if not 2 <= args.vocab_size <= 2**16:
        parser.error("--vocab-size must be 2 to 65536: the demo's ids are uint16")
    make_demo(args.directory, args.tokens, args.vocab_size)
    print(f"wrote {args.directory / TRAIN_FILE} and {VAL_FILE}: set data.vocab_size to {args.vocab_size}")


if __name__ == "__main__":
    main()
