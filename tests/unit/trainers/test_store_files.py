"""Datasets read from an object store (moto's S3 server on loopback) as the ranks read them: shards, an image
folder and token files give the same samples as the same files on disk, by ranged reads; what was read is
kept in a cache that stays within data.cache_bytes and serves reads the store no longer could; a storm of
503 answers is ridden out by botocore's retries."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from botocore.exceptions import ClientError

from jobspec.data_store import CREDENTIALS_ENV, parse_store_root
from jobspec.datadir import RUN_DIR_ENV
from jobspec.spec import DataSpec
from tests.object_store import BUCKET, Store, credentials, moto_store, storm_proxy
from tests.unit.trainers.image_sets import Pictures, write_folder, write_shards
from tests.unit.trainers.token_corpus import write_ids
from trainers.data.byte_cache import ByteCache
from trainers.data.files import CACHE_FOLDER, StoreFiles
from trainers.data.image_folder import open_set
from trainers.data.shards import shard_samples
from trainers.data.tokens import load_tokens

PICTURES = Pictures(count=24, classes=3, width=(20, 28), height=(16, 24))


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with moto_store() as running:
        yield running


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Store) -> Path:
    """The job's run directory and the store's credentials, as the worker gives them to the ranks."""
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    monkeypatch.setenv(CREDENTIALS_ENV, credentials(store.endpoint))
    return tmp_path / "run"


def test_shards_in_the_store_index_and_read_as_on_disk(
    store: Store, run_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    write_shards(data_dir / "set", PICTURES, per_shard=10)
    root = store.upload(data_dir / "set", "shards")
    stored, local = (shard_samples(DataSpec(dataset="shards", root=r)) for r in (root, "set"))
    assert len(stored.tars) == 3 and stored.labels.tolist() == local.labels.tolist()
    assert stored.offset.tolist() == local.offset.tolist()
    assert all(stored.read(i) == PICTURES.jpeg(i) for i in range(len(stored)))
    assert stored.name(11) == f"{root}/shard-00001.tar: sample 0000011"


def test_shards_that_fit_the_cache_cost_one_get_per_block_however_many_read_them(
    store: Store, run_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_shards(data_dir / "blocks", PICTURES, per_shard=10)
    root = store.upload(data_dir / "blocks", "blocks")
    with storm_proxy(store.endpoint) as (proxy, storm):
        monkeypatch.setenv(CREDENTIALS_ENV, credentials(proxy))
        samples = shard_samples(DataSpec(dataset="shards", root=root))
        assert isinstance(samples.files, StoreFiles) and samples.files.block_bytes
        shutil.rmtree(run_dir / CACHE_FOLDER)  # what indexing fetched: four readers now find none of it
        storm.forwarded, storm.delay_s = 0, 0.05  # a slow store: the readers' GETs would overlap
        with ThreadPoolExecutor(4) as readers:
            read = list(readers.map(lambda _: [samples.read(i) for i in range(len(samples))], range(4)))
    assert read == [[PICTURES.jpeg(i) for i in range(PICTURES.count)]] * 4
    assert storm.forwarded == len(samples.tars)  # each shard is one block, fetched once for all four


def test_shards_larger_than_the_cache_are_read_sample_by_sample(
    store: Store, run_dir: Path, data_dir: Path
) -> None:
    write_shards(data_dir / "large", PICTURES, per_shard=10)
    root = store.upload(data_dir / "large", "large")
    samples = shard_samples(DataSpec(dataset="shards", root=root, cache_bytes=4096))
    assert isinstance(samples.files, StoreFiles) and samples.files.block_bytes == 0
    assert [samples.read(i) for i in range(len(samples))] == [PICTURES.jpeg(i) for i in range(PICTURES.count)]


def test_an_image_folder_in_the_store_lists_and_reads_as_on_disk(
    store: Store, run_dir: Path, data_dir: Path
) -> None:
    write_folder(data_dir / "folder", PICTURES)
    root = store.upload(data_dir / "folder", "images/v1")
    stored, local = (open_set(DataSpec(dataset="image_folder", root=r), seed=0) for r in (root, "folder"))
    assert stored.num_classes == local.num_classes == 3
    assert stored.train.tolist() == local.train.tolist()
    assert all(stored.samples.read(i) == local.samples.read(i) for i in range(PICTURES.count))
    assert stored.samples.name(0) == f"{root}/class000/0000000.jpg"


def test_token_files_in_the_store_cut_the_same_windows(store: Store, run_dir: Path, data_dir: Path) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(203))
    write_ids(data_dir / "ids" / "val.bin", range(500, 541))
    root = store.upload(data_dir / "ids", "tokens")
    spec = {"dataset": "tokens", "block_size": 8, "vocab_size": 1000}
    stored, local = (load_tokens(DataSpec(**spec, root=r)) for r in (root, "ids"))
    assert stored.val is not None and local.val is not None
    for got, expected in ((stored.train, local.train), (stored.val, local.val)):
        assert len(got) == len(expected)  # type: ignore[arg-type]
        for i in range(len(expected)):  # type: ignore[arg-type]
            assert all(a.tolist() == b.tolist() for a, b in zip(got[i], expected[i], strict=True))


def test_a_wrong_width_or_a_missing_train_bin_is_refused_naming_the_field(
    store: Store, run_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "train.bin").write_bytes(b"\0" * 101)
    root = store.upload(tmp_path / "odd", "odd")
    with pytest.raises(ValueError, match="not a whole number of uint16 ids"):
        load_tokens(DataSpec(dataset="tokens", root=root, block_size=8))
    with pytest.raises(ValueError, match=r"holds no train\.bin"):
        load_tokens(DataSpec(dataset="tokens", root=f"s3://{BUCKET}/nothing-here", block_size=8))


def test_the_cache_stays_within_its_bound_and_serves_what_the_store_lost(
    store: Store, run_dir: Path, tmp_path: Path
) -> None:
    blob = np.random.default_rng(0).integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes()
    store.client().put_object(Bucket=BUCKET, Key="cached/blob", Body=blob)
    bound = 20 * 1024
    files = StoreFiles(parse_store_root(f"s3://{BUCKET}/cached"), ByteCache(run_dir / CACHE_FOLDER, bound))
    for start in range(0, len(blob), 1024):
        assert files.read("cached/blob", start, 1024) == blob[start : start + 1024]
        held = sum(p.stat().st_size for p in (run_dir / CACHE_FOLDER).glob("*.bin"))
        assert held <= bound
    store.client().delete_object(Bucket=BUCKET, Key="cached/blob")
    assert files.read("cached/blob", len(blob) - 1024, 1024) == blob[-1024:]  # the newest read: kept
    with pytest.raises(ClientError, match="NoSuchKey"):
        files.read("cached/blob", 0, 1024)  # the oldest: evicted


def test_a_rewritten_object_fails_the_read_rather_than_mixing_versions(store: Store, run_dir: Path) -> None:
    store.client().put_object(Bucket=BUCKET, Key="moving/blob", Body=b"first version")
    files = StoreFiles(parse_store_root(f"s3://{BUCKET}/moving"), None)
    (listed,) = files.listing()
    store.client().put_object(Bucket=BUCKET, Key="moving/blob", Body=b"other version")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        files.read(listed.key, 0, 5, listed.etag)


def test_a_storm_of_503s_is_ridden_out(store: Store, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.client().put_object(Bucket=BUCKET, Key="stormy/blob", Body=b"0123456789")
    with storm_proxy(store.endpoint) as (proxy, storm):
        monkeypatch.setenv(CREDENTIALS_ENV, credentials(proxy))
        files = StoreFiles(parse_store_root(f"s3://{BUCKET}/stormy"), None)
        # Three in a row: more than botocore's default of 3 attempts in all would survive.
        storm.left = 3
        assert [found.key for found in files.listing()] == ["stormy/blob"]
        storm.left = 2
        assert files.read("stormy/blob", 2, 4) == b"2345"
        assert storm.answered_503 == 5 and storm.left == 0


def test_credentials_that_are_not_the_expected_json_are_refused_without_their_value(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CREDENTIALS_ENV, json.dumps({"access_key_id": "AKIA-SECRET-LOOKING", "secret": "x"}))
    files = StoreFiles(parse_store_root(f"s3://{BUCKET}/any"), None)
    with pytest.raises(ValueError, match=r"data\.credentials") as refused:
        files.listing()
    assert "AKIA-SECRET-LOOKING" not in str(refused.value)
    assert "secret_access_key" in str(refused.value)


def test_reads_across_block_boundaries_are_joined_from_each_block_fetched_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocks' arithmetic alone, against an object held in memory: any range, within a block or across
    several, is the object's bytes there, and each block is fetched once."""
    blob = np.random.default_rng(0).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    files = StoreFiles(parse_store_root(f"s3://{BUCKET}/memory"), ByteCache(tmp_path / "cache", 10**7))
    fetched: list[str] = []

    def get(key: str, byte_range: str, version: str) -> bytes:
        first, last = byte_range.removeprefix("bytes=").split("-")
        fetched.append(byte_range)
        return blob[int(first) : int(last) + 1]

    monkeypatch.setattr(files, "_get", get)
    files.block_bytes = 4096
    ranges = np.random.default_rng(1).integers(0, len(blob), (500, 2))
    for offset, length in ((int(a), 1 + int(b) % 20_000) for a, b in ranges):
        length = min(length, len(blob) - offset)
        assert files.read("memory/blob", offset, length) == blob[offset : offset + length]
    assert sorted(fetched) == sorted(set(fetched)) and len(fetched) == -(-len(blob) // 4096)
