"""data.dataset text: .jsonl records (their data.text_field) and .parquet columns of the same name, tokenized
with the tokenizer saved in data.tokenizer, an end-of-text token after every document, into one flat file of
ids that then trains as data.dataset tokens does (trainers/data/tokens.py).

The tokenizer is read from its tokenizer.json by the `tokenizers` library, which never downloads anything.
The ids are written once into the run directory, keyed by the corpus's files and the tokenizer, and reused by
every restart and resume of the job: a corpus is tokenized once per run, not once per attempt.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jobspec.datadir import shown_data_path
from jobspec.problems import Problem, SpecError
from jobspec.spec import DataSpec
from jobspec.spec_inputs import TokenDtype
from jobspec.token_files import (
    TOKENIZER_FILE,
    TokenSpan,
    TokenSplits,
    missing_field,
    split_tokens,
    text_sources,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

CACHE_DIR = "data"  # in the run directory
TOKENIZER_CONFIG = "tokenizer_config.json"  # transformers' own: it names the end-of-text token
# What tokenizers without a tokenizer_config.json call it: GPT-2's, Llama's and others'.
EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]")
_DOCUMENTS_PER_BATCH = 1024
_CACHE_FORMAT = 1  # bump when the file's layout changes, so an old one is not reused


def _jsonl(data_dir: Path, path: Path, field: str) -> Iterator[str]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{shown_data_path(data_dir, path)} line {number}"
            try:
                record = json.loads(line)
            except ValueError:
                raise ValueError(f"{where} is not JSON; write one JSON object per line") from None
            problem = missing_field(record, field, where)
            if problem is not None:
                raise SpecError([problem])
            yield record[field]


def _parquet(data_dir: Path, path: Path, field: str) -> Iterator[str]:
    shown = shown_data_path(data_dir, path)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            f"data.root holds .parquet files ({shown}), and pyarrow is not installed in the job's Python "
            "environment; install it there (pip install pyarrow), or convert the files to .jsonl"
        ) from None
    table = pq.ParquetFile(path)
    if field not in table.schema_arrow.names:
        raise SpecError(
            [
                Problem(
                    "data.text_field",
                    f"{shown} has no column {field!r} (its columns: {', '.join(table.schema_arrow.names)})",
                    "set data.text_field to the column that holds each document's text",
                )
            ]
        )
    row = 0
    for batch in table.iter_batches(columns=[field]):
        for text in batch.column(0).to_pylist():
            row += 1
            if not isinstance(text, str):
                raise ValueError(f"row {row} of {shown} has no text in {field!r}; fill it or drop the row")
            yield text


def documents(data_dir: Path, files: list[Path], field: str) -> Iterator[str]:
    """The corpus's documents, file by file in name order."""
    for path in files:
        read = _jsonl if path.suffix == ".jsonl" else _parquet
        yield from read(data_dir, path, field)


def end_of_text(tokenizer: Tokenizer, directory: Path) -> int:
    """The id put after every document: tokenizer_config.json's eos_token, else a token named as usual."""
    config = directory / TOKENIZER_CONFIG
    named = json.loads(config.read_text(encoding="utf-8")).get("eos_token") if config.is_file() else None
    if isinstance(named, dict):  # transformers may save an AddedToken as its fields
        named = named.get("content")
    names = [named] if isinstance(named, str) else list(EOS_NAMES)
    for name in names:
        token = tokenizer.token_to_id(name)
        if token is not None:
            return int(token)
    raise ValueError(
        f"data.tokenizer has no end-of-text token to put between documents (looked for "
        f"{', '.join(names)}); add one to the tokenizer, or name it as eos_token in a {TOKENIZER_CONFIG} "
        f"beside {TOKENIZER_FILE}"
    )


def ids_dtype(vocab_size: int) -> TokenDtype:
    return TokenDtype.UINT16 if vocab_size <= 2**16 else TokenDtype.UINT32


def _cache_key(files: list[Path], tokenizer_dir: Path, field: str) -> str:
    """What the ids depend on: the files as they are now, the tokenizer's own files, the field read."""
    digest = hashlib.sha256(json.dumps([_CACHE_FORMAT, field]).encode())
    for path in files:
        stat = path.stat()
        digest.update(json.dumps([str(path), stat.st_size, stat.st_mtime_ns]).encode())
    for name in (TOKENIZER_FILE, TOKENIZER_CONFIG):
        if (tokenizer_dir / name).is_file():
            digest.update((tokenizer_dir / name).read_bytes())
    return digest.hexdigest()[:24]


def write_ids(path: Path, texts: Iterator[str], tokenizer: Tokenizer, eos: int, dtype: TokenDtype) -> None:
    """Every document's ids and an end-of-text id, into `path` whole or not at all (a temporary file,
    renamed once synced)."""
    partial = path.with_name(path.name + ".partial")
    try:
        with partial.open("wb") as out:
            batches = iter(lambda: list(itertools.islice(texts, _DOCUMENTS_PER_BATCH)), [])
            for batch in batches:
                # Special tokens are the tokenizer's framing of one input (BERT's [CLS], Llama's <s>): a
                # packed corpus has only end-of-text between its documents.
                encoded = tokenizer.encode_batch(batch, add_special_tokens=False)
                ids = itertools.chain.from_iterable([*e.ids, eos] for e in encoded)
                out.write(np.fromiter(ids, dtype=dtype.value).tobytes())
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)  # a bad record met halfway: the run directory keeps no half corpus
        raise
    os.replace(partial, path)


def corpus_splits(data: DataSpec, data_dir: Path, run_dir: Path) -> TokenSplits:
    """The corpus tokenized into run_dir (by the first rank of the host to get there; the others wait for
    it), split into training and held-out tokens."""
    from tokenizers import Tokenizer

    files, tokenizer_dir = text_sources(data, data_dir)
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_dir / TOKENIZER_FILE))
    except Exception as exc:  # the Rust library raises a bare Exception for a file it cannot parse
        raise ValueError(f"data.tokenizer's {TOKENIZER_FILE} cannot be read ({exc}); save it again") from exc
    dtype = ids_dtype(tokenizer.get_vocab_size(with_added_tokens=True))
    cache = run_dir / CACHE_DIR
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"text-{_cache_key(files, tokenizer_dir, data.text_field)}.bin"
    with (cache / f"{path.stem}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            eos = end_of_text(tokenizer, tokenizer_dir)
            write_ids(path, documents(data_dir, files, data.text_field), tokenizer, eos, dtype)
    count = path.stat().st_size // dtype.itemsize
    return split_tokens(data, TokenSpan(path, dtype, 0, count, "the tokenized corpus"), None)
