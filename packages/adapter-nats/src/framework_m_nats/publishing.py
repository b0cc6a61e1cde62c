"""Publishing to JetStream: size checked first, retried while it is safe, duplicates named.

Every publish carries a ``Nats-Msg-Id``, so a retry after a timeout is idempotent.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from framework_m_core.ports import BrokerError, InvalidJobError, MessageDecodeError, decode_message

from . import wire
from .confirms import Confirms, PubAck
from .errors import TRANSIENT, describe, server_errors

log = logging.getLogger("framework_m.nats")

# "duplicate message id is in process": a clustered stream is still storing the
# first publish of this id (servers >= 2.11). Ask again until it answers duplicate.
_ERR_DUPLICATE_IN_PROCESS = 10158
_TRIES = 4
TIMEOUT = 5.0


async def publish_once(
    nc: Client, confirms: Confirms, subject: str, body: bytes, headers: dict[str, str]
) -> PubAck:
    """Publish with retries; refuses what the server would close the connection over."""
    if (size := wire.size_with_headers(body, headers)) > nc.max_payload:
        # nats-py leaves the headers out of its own check; the server would close us.
        raise InvalidJobError(
            f"a message of {size:,} bytes with its headers is over the server's "
            f"max_payload of {nc.max_payload:,}"
        )
    delay = 0.05
    for attempt in range(1, _TRIES + 1):
        try:
            if not nc.is_connected:  # never into nats-py's reconnect buffer
                raise nats.errors.ConnectionReconnectingError
            return await confirms.publish(subject, body, headers)
        except APIError as exc:
            if exc.err_code != _ERR_DUPLICATE_IN_PROCESS or attempt == _TRIES:
                raise BrokerError(f"publish to {subject} refused: {describe(exc)}") from None
            log.debug("publish to %s: its id is still being stored (10158); asking again", subject)
        except TRANSIENT as exc:
            if attempt == _TRIES:
                if isinstance(exc, nats.errors.NoRespondersError | NoStreamResponseError):
                    raise BrokerError(
                        f"publish to {subject} failed: no stream takes {subject}: run "
                        "`m sync-schema` (or a worker, which syncs at start); is JetStream "
                        "enabled (nats-server -js)?"
                    ) from None
                raise BrokerError(
                    f"publish to {subject} failed after {attempt} tries: {describe(exc)}"
                ) from None
            log.debug("publish to %s failed (%s); retrying", subject, describe(exc))
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


async def job_id_at(js: JetStreamContext, stream: str, seq: int, msg_id: str) -> str:
    """The id of the job stored at ``seq`` (the original of a duplicate)."""
    try:
        with server_errors("reading the original of a duplicate"):
            raw = await js.get_msg(stream, seq)
        return decode_message(raw.data or b"").id
    except (NotFoundError, MessageDecodeError) as exc:
        log.warning("original of duplicate %s (seq %d) unreadable: %s", msg_id, seq, exc)
        return f"{stream}:{seq}"
