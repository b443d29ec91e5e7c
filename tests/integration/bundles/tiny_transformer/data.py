"""Sequences that count up modulo the vocabulary by a stride of 1, 2 or 3 each, as dicts of tokens and the
tokens that follow: the model learns the stride from the context. Training data is a stream (an
IterableDataset, reshuffled per pass by set_epoch); the held-out split is map-style."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, IterableDataset

Item = dict[str, torch.Tensor]


def sequences(count: int, vocab: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(vocab, (count, 1), generator=generator)
    strides = torch.randint(1, 4, (count, 1), generator=generator)
    return (starts + strides * torch.arange(length + 1)) % vocab


def item(sequence: torch.Tensor) -> Item:
    return {"tokens": sequence[:-1], "next": sequence[1:]}


class Counting(IterableDataset[Item]):
    def __init__(self, count: int, vocab: int, length: int, seed: int) -> None:
        self.count, self.vocab, self.length, self.seed = count, vocab, length, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Item]:
        for sequence in sequences(self.count, self.vocab, self.length, self.seed + self.epoch):
            yield item(sequence)


class HeldOut(Dataset[Item]):
    def __init__(self, count: int, vocab: int, length: int, seed: int) -> None:
        self.data = sequences(count, vocab, length, seed)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Item:
        return item(self.data[index])


def build(count: int = 512, vocab: int = 16, length: int = 16, seed: int = 0) -> tuple[Counting, HeldOut]:
    return Counting(count, vocab, length, seed), HeldOut(count // 8, vocab, length, seed + 10_000)
