"""Token datasets as files: nanoGPT's flat train.bin (and val.bin) of token ids, or a corpus of .jsonl and
.parquet text with the tokenizer that turns it into one, and the windows of data.block_size tokens they hold.

Judged from names and sizes (and one .jsonl line), never by reading the data through, so the API refuses a
bad layout at submit, cheaply; the job checks the same again before it reads. No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from jobspec.catalog.datasets import DatasetName
from jobspec.data_store import is_store_root
from jobspec.datadir import confined_file, resolve_data_root, shown_data_path
from jobspec.problems import Problem, SpecError, refuse
from jobspec.spec import DataSpec, JobSpec
from jobspec.spec_inputs import TokenDtype

TRAIN_FILE, VAL_FILE = "train.bin", "val.bin"
TOKENIZER_FILE = "tokenizer.json"
TEXT_SUFFIXES = (".jsonl", ".parquet")
DEMO_HINT = "`python -m trainers.data.tokens make-demo DIR` writes a small one"


@dataclass(frozen=True)
class TokenSpan:
    """Token ids [start, stop) of a flat file of `dtype` ids."""

    path: Path
    dtype: TokenDtype
    start: int
    stop: int
    name: str  # for messages: "train.bin", "the last 10% of train.bin"

    def windows(self, block_size: int) -> int:
        """Windows of block_size inputs, each with the block_size tokens after them as targets. A window's
        last target is the next window's first input, so every token but the first is a target once."""
        return max(0, self.stop - self.start - 1) // block_size


@dataclass(frozen=True)
class TokenSplits:
    train: TokenSpan
    val: TokenSpan | None  # None: nothing held out (data.val_fraction 0)


def token_count(data_dir: Path, path: Path, dtype: TokenDtype) -> int:
    """The ids in a flat file; refused when its size is no whole number of them (the wrong width, or cut
    short)."""
    return ids_in(path.stat().st_size, dtype, shown_data_path(data_dir, path))


def ids_in(size: int, dtype: TokenDtype, shown: str) -> int:
    """The ids in `size` bytes of a flat file (on disk or in an object store) that messages call `shown`."""
    if size % dtype.itemsize:
        raise refuse(
            "data.token_dtype",
            f"{shown} is {size} bytes, not a whole number of {dtype} ids ({dtype.itemsize} bytes each)",
            "set data.token_dtype to the width the file was written with, or write it again (it may be cut "
            "short)",
        )
    return size // dtype.itemsize


def _window_problem(span: TokenSpan, block_size: int, held_out: bool) -> Problem | None:
    if span.windows(block_size):
        return None
    count = span.stop - span.start
    fix = f"lower data.block_size to at most {count - 1}" if count > 1 else "give it more tokens"
    if held_out:
        fix += ", hold out more (data.val_fraction, or a longer val.bin), or set data.val_fraction to 0"
    return Problem(
        "data.block_size",
        f"data.block_size={block_size} needs {block_size + 1} tokens for one window, and {span.name} holds "
        f"{count}",
        fix,
    )


def split_tokens(data: DataSpec, train: TokenSpan, val: TokenSpan | None) -> TokenSplits:
    """val.bin when there is one, else the last data.val_fraction of the training tokens: a tail, so that no
    window straddles the two. Refused when either cannot hold a window of data.block_size."""
    if val is None and data.val_fraction > 0:
        held = round((train.stop - train.start) * data.val_fraction)
        share = f"the last {data.val_fraction:.0%} of {train.name}"
        val = TokenSpan(train.path, train.dtype, train.stop - held, train.stop, share)
        train = TokenSpan(
            train.path, train.dtype, train.start, train.stop - held, f"the rest of {train.name}"
        )
    if data.block_size is not None:
        problems = [_window_problem(train, data.block_size, held_out=False)]
        if val is not None:
            problems.append(_window_problem(val, data.block_size, held_out=True))
        if any(problems):
            raise SpecError(p for p in problems if p is not None)
    return TokenSplits(train, val)


def _directory(data_dir: Path, value: str | None, field: str) -> Path:
    assert value is not None, f"the planner requires {field}"
    try:
        return resolve_data_root(data_dir, value, field)
    except ValueError as exc:
        raise refuse(field, str(exc), "") from exc


def _file(data_dir: Path, path: Path) -> Path:
    try:
        return confined_file(data_dir, path)
    except ValueError as exc:
        raise refuse("data.root", str(exc), "") from exc


def token_splits(data: DataSpec, data_dir: Path) -> TokenSplits:
    """data.dataset tokens: data.root's train.bin, and val.bin when it has one."""
    root = _directory(data_dir, data.root, "data.root")
    if not (root / TRAIN_FILE).is_file():
        raise refuse(
            "data.root",
            f"data.root {data.root!r} holds no {TRAIN_FILE}",
            f"put the training token ids there as one flat {data.token_dtype} file; {DEMO_HINT}",
        )
    spans = []
    for name in (TRAIN_FILE, VAL_FILE):
        if (root / name).is_file():
            path = _file(data_dir, root / name)
            spans.append(
                TokenSpan(path, data.token_dtype, 0, token_count(data_dir, path, data.token_dtype), name)
            )
    return split_tokens(data, spans[0], spans[1] if len(spans) > 1 else None)


def text_files(data_dir: Path, root: Path) -> list[Path]:
    """The corpus: every .jsonl and .parquet file under root, in name order."""
    found = sorted(p for p in root.rglob("*") if p.suffix in TEXT_SUFFIXES and p.is_file())
    return [_file(data_dir, path) for path in found]


def tokenizer_dir(data: DataSpec, data_dir: Path) -> Path:
    if data.tokenizer is None:
        raise refuse(
            "data.tokenizer",
            "data.dataset text is tokenized with a tokenizer of your own, and data.tokenizer is not set",
            f"set it to a directory under TRAINYARD_DATA_DIR that holds {TOKENIZER_FILE} (nothing is "
            "downloaded)",
        )
    directory = _directory(data_dir, data.tokenizer, "data.tokenizer")
    if not (directory / TOKENIZER_FILE).is_file():
        raise refuse(
            "data.tokenizer",
            f"data.tokenizer {data.tokenizer!r} holds no {TOKENIZER_FILE}",
            f"save the tokenizer there: tokenizers' Tokenizer.save('{TOKENIZER_FILE}'), or a transformers "
            "fast tokenizer's save_pretrained (AutoTokenizer.from_pretrained(dir).save_pretrained(dir) "
            "converts a slow one)",
        )
    return directory


def missing_field(record: object, field: str, where: str) -> Problem | None:
    """A corpus record that is not a JSON object with text (a string) in `field`."""
    if isinstance(record, dict) and isinstance(record.get(field), str):
        return None
    what = (
        f"has no text in {field!r} (its fields: {', '.join(map(repr, record)) or 'none'})"
        if isinstance(record, dict)
        else "is not a JSON object"
    )
    return Problem(
        "data.text_field",
        f"{where} {what}",
        "set data.text_field to the field that holds each document's text",
    )


def _first_record_problem(data_dir: Path, files: list[Path], field: str) -> Problem | None:
    """The first .jsonl record's text field: one line read, what a wrong data.text_field shows at once."""
    first = next((path for path in files if path.suffix == ".jsonl"), None)
    if first is None:
        return None  # .parquet columns are known once pyarrow reads them, in the job
    where = f"the first record of {shown_data_path(data_dir, first)}"
    try:
        with first.open(encoding="utf-8") as lines:
            line = next((line for line in lines if line.strip()), None)
        record = None if line is None else json.loads(line)
    except ValueError:  # not UTF-8, or not JSON
        return Problem("data.root", f"{where} is not JSON", "write one JSON object per line, in UTF-8")
    return None if line is None else missing_field(record, field, where)


def text_sources(data: DataSpec, data_dir: Path) -> tuple[list[Path], Path]:
    """data.dataset text: the corpus's files and the tokenizer's directory."""
    files = text_files(data_dir, _directory(data_dir, data.root, "data.root"))
    problems = []
    if not files:
        problems.append(
            Problem(
                "data.root",
                f"data.root {data.root!r} holds no {' or '.join(TEXT_SUFFIXES)} files",
                f"put the corpus there: one JSON object per line with its text in {data.text_field!r}, or "
                "parquet files with that column",
            )
        )
    try:
        tokenizer = tokenizer_dir(data, data_dir)
    except SpecError as error:
        problems += error.problems
    problems += filter(None, [_first_record_problem(data_dir, files, data.text_field)])
    if problems:
        raise SpecError(problems)
    return files, tokenizer


def check_token_data(spec: JobSpec, data_dir: Path) -> None:
    """What the API can tell of a token dataset's files at submit; raises SpecError naming each problem."""
    data, batch_size = spec.inputs.data, spec.train.batch_size
    if data.root is None or is_store_root(data.root):
        return  # the planner names a missing one; an object store's is listed (app/services/data_listing.py)
    if data.dataset is DatasetName.TEXT:
        text_sources(data, data_dir.resolve())
    if data.dataset is not DatasetName.TOKENS:
        return
    train = token_splits(data, data_dir.resolve()).train
    # Every rank takes an equal share of whole steps (drop_last), so a step needs batch_size windows.
    if data.block_size is not None and train.windows(data.block_size) < batch_size:
        windows = train.windows(data.block_size)
        raise refuse(
            "train.batch_size",
            f"train.batch_size={batch_size} is more than the {windows} windows of data.block_size="
            f"{data.block_size} tokens in {train.name}",
            f"lower train.batch_size to at most {windows}, or data.block_size",
        )
