"""`from trainyard.client import TrainyardClient`: the REST client of app/client.py."""

from app.client import ApiError, TrainyardClient

__all__ = ["ApiError", "TrainyardClient"]
