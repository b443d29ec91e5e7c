"""Code bundle archives built member by member, the good and the hostile, for the store's and API's tests."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile

# A small bundle: a package with a module, and a script.
BUNDLE = {"models/__init__.py": "", "models/net.py": "WIDTH = 8\n", "train.sh": "#!/bin/sh\n"}


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def archive(
    members: list[tuple[tarfile.TarInfo, bytes]], gz: bool = True, pax: dict[str, str] | None = None
) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, pax_headers=pax) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(out.getvalue(), mtime=0) if gz else out.getvalue()


def bundle_archive(files: dict[str, str] = BUNDLE, gz: bool = True) -> bytes:
    members = [
        (member(name, text.encode(), mode=0o755 if name.endswith(".sh") else 0o644), text.encode())
        for name, text in files.items()
    ]
    return archive(members, gz)


class _Zeros:
    """`size` zero bytes, made as they are read: a bomb's member costs no memory to build."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, size: int) -> bytes:
        count = min(size, self.left)
        self.left -= count
        return bytes(count)


def gzip_bomb(unpacked: int) -> bytes:
    """A .tar.gz of one file of `unpacked` zero bytes: a few KiB that claim to unpack to far more."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        tar.addfile(member("zeros.bin", size=unpacked), _Zeros(unpacked))  # type: ignore[arg-type]
    return out.getvalue()


def code_id(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"
