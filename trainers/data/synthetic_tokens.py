"""data.dataset synthetic_tokens: a token file generated from train.seed into the run directory, so a language
model trains with no data on disk. Each id is the one before it plus 1 or 2 (modulo data.vocab_size): a
bigram process whose next-token loss falls from ln(vocab_size) towards ln(2) as a model learns it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from jobspec.spec import DataSpec
from jobspec.token_files import TokenSpan, TokenSplits, split_tokens
from trainers.data.text import CACHE_DIR, ids_dtype


def bigram_ids(count: int, vocab_size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids: np.ndarray = np.cumsum(rng.integers(1, 3, count)) % vocab_size
    return ids


def synthetic_splits(data: DataSpec, seed: int, run_dir: Path) -> TokenSplits:
    """data.num_samples training windows of data.block_size tokens, and data.val_fraction more held out."""
    assert data.block_size is not None, "the planner requires data.block_size for token datasets"
    train = data.num_samples * data.block_size + 1
    count = round(train / (1 - data.val_fraction))
    dtype = ids_dtype(data.vocab_size)
    path = run_dir / CACHE_DIR / f"synthetic-tokens-{seed}-{count}-{data.vocab_size}.bin"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Every rank of a host may write it at once: each writes the same ids to its own file and renames.
        partial = path.with_suffix(f".{os.getpid()}.partial")
        bigram_ids(count, data.vocab_size, seed).astype(dtype.value).tofile(partial)
        os.replace(partial, path)
    return split_tokens(data, TokenSpan(path, dtype, 0, count, "the synthetic tokens"), None)
