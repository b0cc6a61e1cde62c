"""The dead-letter stream: reading its latest letters and deleting some of them."""

from __future__ import annotations

from collections.abc import Sequence

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from framework_m_core.ports import DeadLetter

from . import wire
from .errors import server_errors

# "sequence not found": a letter deleted already.
_ERR_SEQUENCE_NOT_FOUND = 10043


async def latest(js: JetStreamContext, stream: str, limit: int) -> list[DeadLetter]:
    """The ``limit`` latest letters of ``stream``, oldest first."""
    with server_errors("reading dead letters"):
        info = await js.stream_info(stream)
        out: list[DeadLetter] = []
        seq = info.state.last_seq
        while seq >= max(1, info.state.first_seq) and len(out) < limit:
            try:
                raw = await js.get_msg(stream, seq)
            except NotFoundError:
                seq -= 1
                continue
            out.append(wire.dead_letter(raw.data or b"", dict(raw.headers or {}), seq))
            seq -= 1
    out.reverse()
    return out


async def remove(js: JetStreamContext, stream: str, letters: Sequence[DeadLetter]) -> int:
    """Delete ``letters`` (by stream sequence); how many were still there."""
    removed = 0
    for letter in letters:
        if not isinstance(letter.ref, int):
            continue
        with server_errors("deleting a dead letter"):
            try:
                await js.delete_msg(stream, letter.ref)
            except NotFoundError:  # gone already
                continue
            except APIError as exc:
                if exc.err_code == _ERR_SEQUENCE_NOT_FOUND:  # gone already
                    continue
                raise
        removed += 1
    return removed
