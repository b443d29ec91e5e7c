"""Code bundles: users' own modules, content-addressed by the sha256 of the archive they uploaded, unpacked
once per host into a read-only folder that jobs import from."""

from __future__ import annotations

from pathlib import Path

from core.config import Settings

CODE_ID_PREFIX = "sha256:"


def bundle_dir(settings: Settings, code_id: str) -> Path:
    """Where a bundle is unpacked on this host: `<code_dir>/<hex digest>`."""
    return settings.code_dir / code_id.removeprefix(CODE_ID_PREFIX)
