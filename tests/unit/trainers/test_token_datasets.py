"""data.dataset tokens and text, read as the job reads them: windows of block_size ids with their next-token
targets, cut from a flat file of ids or from a corpus tokenized (end-of-text between documents) into the run
directory once; checked ids and layouts fail naming the field and the fix."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from jobspec.datadir import RUN_DIR_ENV
from jobspec.problems import SpecError
from jobspec.spec import DataSpec
from tests.unit.trainers.token_corpus import DOCUMENTS, EOS, save_tokenizer, write_ids, write_jsonl
from trainers.data.tokens import TokenWindows, load_tokens, make_demo


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The job's run directory, as the worker names it to the ranks."""
    directory = tmp_path / "run"
    directory.mkdir()
    monkeypatch.setenv(RUN_DIR_ENV, str(directory))
    return directory


def windows(dataset: TokenWindows) -> list[tuple[list[int], list[int]]]:
    return [(x.tolist(), y.tolist()) for x, y in (dataset[i] for i in range(len(dataset)))]


def test_a_token_file_is_cut_into_windows_whose_targets_are_the_next_tokens(data_dir: Path) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(103))
    data = load_tokens(DataSpec(dataset="tokens", root="ids", block_size=10, val_fraction=0, vocab_size=200))
    assert data.val is None
    cut = windows(data.train)
    assert cut == [
        (list(range(10 * i, 10 * i + 10)), list(range(10 * i + 1, 10 * i + 11))) for i in range(10)
    ]
    targets = [token for _, y in cut for token in y]
    assert sorted(targets) == list(range(1, 101)), "every token a target once an epoch, none twice"
    x, y = data.train[0]
    assert x.dtype == y.dtype == torch.int64


def test_val_bin_is_the_held_out_split_else_a_tail_of_train_bin(data_dir: Path) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(100))
    spec = DataSpec(dataset="tokens", root="ids", block_size=4, val_fraction=0.2, vocab_size=1000)
    tail = load_tokens(spec)
    assert tail.val is not None
    # ids 0..79 train (19 windows, to the target 76), 80..99 are held out: no window straddles the two.
    assert len(tail.train) == 19 and windows(tail.train)[-1][1][-1] == 76
    assert windows(tail.val)[0][0][0] == 80 and windows(tail.val)[-1][1][-1] == 96
    write_ids(data_dir / "ids" / "val.bin", range(500, 521))
    held = load_tokens(spec)
    assert held.val is not None and len(held.train) == 24
    assert windows(held.val) == [
        (list(range(s, s + 4)), list(range(s + 1, s + 5))) for s in (500, 504, 508, 512, 516)
    ]


def test_uint32_ids_and_ids_beyond_the_vocabulary(data_dir: Path) -> None:
    write_ids(data_dir / "wide" / "train.bin", [70_000, 70_001, 70_002, 5], dtype="uint32")
    spec = DataSpec(dataset="tokens", root="wide", block_size=3, val_fraction=0, token_dtype="uint32")
    with pytest.raises(ValueError, match=r"token id 70002 .* set data\.vocab_size to at least 70003"):
        load_tokens(spec).train[0]
    x, y = load_tokens(spec.model_copy(update={"vocab_size": 70_003})).train[0]
    assert x.tolist() == [70_000, 70_001, 70_002] and y.tolist() == [70_001, 70_002, 5]


def test_a_file_of_no_whole_number_of_ids_is_refused_before_reading(data_dir: Path) -> None:
    (data_dir / "odd").mkdir()
    (data_dir / "odd" / "train.bin").write_bytes(b"\0" * 7)
    with pytest.raises(SpecError, match=r"7 bytes, not a whole number of uint16 ids") as refused:
        load_tokens(DataSpec(dataset="tokens", root="odd", block_size=2))
    assert [p.field for p in refused.value.problems] == ["data.token_dtype"]


def test_text_is_tokenized_with_end_of_text_after_each_document_and_packed(
    data_dir: Path, run_dir: Path
) -> None:
    tokenizer = save_tokenizer(data_dir / "tok")
    write_jsonl(data_dir / "corpus" / "b.jsonl", DOCUMENTS[5:])
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS[:5])
    (data_dir / "corpus" / "a.jsonl").write_text((data_dir / "corpus" / "a.jsonl").read_text() + "\n\n")
    (data_dir / "corpus" / "notes.txt").write_text("not part of the corpus")
    spec = DataSpec(dataset="text", root="corpus", tokenizer="tok", block_size=6, val_fraction=0)

    data = load_tokens(spec)
    eos = tokenizer.token_to_id(EOS)
    expected = [i for doc in DOCUMENTS for i in [*tokenizer.encode(doc).ids, eos]]
    cached = list(run_dir.glob("data/text-*.bin"))
    assert len(cached) == 1 and np.fromfile(cached[0], dtype=np.uint16).tolist() == expected
    assert windows(data.train) == [
        (expected[s : s + 6], expected[s + 1 : s + 7]) for s in range(0, len(expected) - 6, 6)
    ]


def test_the_tokenized_corpus_is_reused_until_the_corpus_changes(data_dir: Path, run_dir: Path) -> None:
    save_tokenizer(data_dir / "tok")
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS)
    spec = DataSpec(dataset="text", root="corpus", tokenizer="tok", block_size=4)
    load_tokens(spec)
    [cached] = run_dir.glob("data/text-*.bin")
    os.utime(cached, ns=(0, 0))  # a file written again would get a new time
    load_tokens(spec)
    assert [(p, p.stat().st_mtime_ns) for p in run_dir.glob("data/text-*.bin")] == [(cached, 0)]
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS[:-1])
    load_tokens(spec)
    assert len(list(run_dir.glob("data/text-*.bin"))) == 2


def test_end_of_text_is_the_one_tokenizer_config_names(data_dir: Path, run_dir: Path) -> None:
    tokenizer = save_tokenizer(data_dir / "tok", special=("[UNK]", "[SEP]"))
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS[:1])  # 5 words, and end-of-text: one window
    spec = DataSpec(dataset="text", root="corpus", tokenizer="tok", block_size=5, val_fraction=0)
    with pytest.raises(ValueError, match=r"no end-of-text token .* eos_token in a tokenizer_config\.json"):
        load_tokens(spec)
    (data_dir / "tok" / "tokenizer_config.json").write_text('{"eos_token": {"content": "[SEP]"}}')
    data = load_tokens(spec)
    assert windows(data.train)[-1][1][-1] == tokenizer.token_to_id("[SEP]")


def test_a_record_without_the_text_field_is_named_with_its_line(data_dir: Path, run_dir: Path) -> None:
    save_tokenizer(data_dir / "tok")
    write_jsonl(data_dir / "corpus" / "a.jsonl", DOCUMENTS[:2])
    with (data_dir / "corpus" / "a.jsonl").open("a") as file:
        file.write('{"body": "one two"}\n')
    with pytest.raises(
        SpecError, match=r"a\.jsonl line 3 has no text in 'text' \(its fields: 'body'\)"
    ) as refused:
        load_tokens(DataSpec(dataset="text", root="corpus", tokenizer="tok", block_size=2))
    assert [p.field for p in refused.value.problems] == ["data.text_field"]
    assert not list(run_dir.glob("data/*.bin*")), "no half-written corpus is left behind"


def test_parquet_without_pyarrow_names_the_fix(
    data_dir: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_tokenizer(data_dir / "tok")
    (data_dir / "corpus").mkdir()
    (data_dir / "corpus" / "part-0.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if it were not installed
    with pytest.raises(ValueError, match=r"pyarrow is not installed .* \(pip install pyarrow\)"):
        load_tokens(DataSpec(dataset="text", root="corpus", tokenizer="tok", block_size=2))


def test_parquet_text_is_read_from_its_column(data_dir: Path, run_dir: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    tokenizer = save_tokenizer(data_dir / "tok")
    (data_dir / "corpus").mkdir()
    pq.write_table(pa.table({"body": DOCUMENTS}), data_dir / "corpus" / "part-0.parquet")
    spec = DataSpec(dataset="text", root="corpus", tokenizer="tok", block_size=2)
    with pytest.raises(SpecError, match=r"part-0\.parquet has no column 'text' \(its columns: body\)"):
        load_tokens(spec)
    load_tokens(spec.model_copy(update={"text_field": "body"}))
    [cached] = run_dir.glob("data/text-*.bin")
    assert np.fromfile(cached, dtype=np.uint16)[: len(tokenizer.encode(DOCUMENTS[0]).ids)].tolist() == (
        tokenizer.encode(DOCUMENTS[0]).ids
    )


def test_make_demo_writes_ids_a_bigram_model_can_learn(tmp_path: Path) -> None:
    make_demo(tmp_path, tokens=1000, vocab_size=64)
    ids = np.fromfile(tmp_path / "train.bin", dtype=np.uint16).astype(int)
    assert (
        len(ids) == 1000 and ids.max() < 64 and len(np.fromfile(tmp_path / "val.bin", dtype=np.uint16)) == 100
    )
    assert set(((ids[1:] - ids[:-1]) % 64).tolist()) == {1, 2}
