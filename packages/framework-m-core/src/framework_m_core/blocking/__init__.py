"""Enqueueing from plain ``def`` code: a client whose calls block, for web views, scripts
and threads (:func:`connect_sync`)."""

from .client import SyncClient, SyncJob, connect_sync

__all__ = ["SyncClient", "SyncJob", "connect_sync"]
