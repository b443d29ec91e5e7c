"""`from trainyard.lightning import TrainyardCallback`: trainers/job/lightning.py (needs lightning)."""

from trainers.job.lightning import TrainyardCallback

__all__ = ["TrainyardCallback"]
