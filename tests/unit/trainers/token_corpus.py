"""Token data made by the tests: flat files of ids, and a small corpus with a tokenizer trained on it in
memory and saved as tokenizer.json, as a user would bring one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
# Each document counts on from where it starts: a bigram model learns the corpus.
DOCUMENTS = [" ".join(WORDS[(start + i) % len(WORDS)] for i in range(5 + start)) for start in range(10)]


def write_ids(path: Path, ids: Sequence[int] | np.ndarray, dtype: str = "uint16") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.asarray(ids, dtype=dtype).tofile(path)


def save_tokenizer(directory: Path, special: Sequence[str] = ("[UNK]", EOS)) -> Tokenizer:
    """A word-level tokenizer of the corpus's words, saved in `directory`."""
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(DOCUMENTS, trainers.WordLevelTrainer(special_tokens=list(special)))
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    return tokenizer


def write_jsonl(path: Path, texts: Sequence[str], field: str = "text") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({field: text, "id": i}) + "\n" for i, text in enumerate(texts)))
