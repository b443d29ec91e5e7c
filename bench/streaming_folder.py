"""bench.streaming's data: an ImageNet-like JPEG folder written to the disk once and kept for the next run
with the same pictures, and the same pictures packed into WebDataset shards."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

from tests.unit.trainers.image_sets import Pictures, write_folder

FOLDER = "imagenet-like"
SHARDS = f"{FOLDER}-shards"
SHARD_SAMPLES = 500  # about 12 MB of ImageNet-sized JPEGs a shard, as WebDataset's guides suggest


def pictures(images: int, classes: int, smoke: bool, side: int | None) -> Pictures:
    """ImageNet's shapes (about 400 x 350), or about side x side (each side within 1/8 of it)."""
    if smoke:
        return Pictures(count=images, classes=classes, width=(40, 56), height=(36, 48))
    if side is not None:
        around = (side - side // 8, side + side // 8)
        return Pictures(count=images, classes=classes, width=around, height=around)
    return Pictures(count=images, classes=classes, width=(300, 500), height=(250, 450))


def ensure_folder(data_dir: Path, wanted: Pictures) -> Path:
    """The folder under data_dir, written unless a run with the same pictures left it there."""
    root, marker = data_dir / FOLDER, data_dir / f"{FOLDER}.json"
    description = json.dumps(wanted.__dict__)
    if not (marker.exists() and marker.read_text() == description):
        started = time.monotonic()
        shutil.rmtree(root, ignore_errors=True)  # an earlier, larger folder's extra files would be read too
        write_folder(root, wanted, processes=os.cpu_count() or 1)
        marker.write_text(description)
        print(f"wrote {wanted.count} JPEGs in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    return root


def ensure_shards(data_dir: Path, folder: Path) -> Path:
    """The folder's pictures packed into shards under data_dir (key.jpg, then key.cls: the class's index in
    the folder's sorted class names), rewritten whenever the folder was."""
    root, marker = data_dir / SHARDS, data_dir / f"{SHARDS}.json"
    description = (data_dir / f"{FOLDER}.json").read_text()
    if marker.exists() and marker.read_text() == description:
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    classes = sorted(path.name for path in folder.iterdir() if path.is_dir())
    samples = [
        (label, path) for label, name in enumerate(classes) for path in sorted((folder / name).iterdir())
    ]
    for start in range(0, len(samples), SHARD_SAMPLES):
        with tarfile.open(root / f"shard-{start // SHARD_SAMPLES:05d}.tar", "w") as tar:
            for label, path in samples[start : start + SHARD_SAMPLES]:
                key = f"{label:04d}-{path.stem}"
                tar.add(path, f"{key}.jpg")
                cls = tarfile.TarInfo(f"{key}.cls")
                cls.size = len(str(label))
                tar.addfile(cls, io.BytesIO(str(label).encode()))
    marker.write_text(description)
    return root
