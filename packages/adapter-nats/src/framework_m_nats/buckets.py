"""Key-value buckets made on first use, by whichever connection gets there first."""

from __future__ import annotations

from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue


async def open_bucket(js: JetStreamContext, name: str, **config: Any) -> KeyValue:
    """Bucket ``name``, made with ``config`` when it does not exist. Connections that
    make it at once race: the loser's create fails ("subjects overlap") while the
    winner's bucket is there, so a failed create looks the bucket up again."""
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(bucket=name, **config)
    except Exception:
        try:
            return await js.key_value(name)
        except BucketNotFoundError:
            pass
        raise
