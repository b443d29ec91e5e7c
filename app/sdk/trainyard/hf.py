"""`from trainyard.hf import TrainyardCallback`: trainers/job/hf.py (needs transformers)."""

from trainers.job.hf import TrainyardCallback

__all__ = ["TrainyardCallback"]
