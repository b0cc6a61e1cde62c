"""Debounced jobs: the enqueues of a quiet time collapse into one run, of the latest.

An enqueue of a job with ``debounce=t`` through its handle stores the job due ``t``
seconds later, marked (meta ``debounce``), and names it the job's latest enqueue in a
memo (:func:`~.keys.debounce`). When a marked job comes due, the worker reads the memo:
a job that is no longer the latest is settled unrun (a later enqueue runs instead);
the latest runs, with its own arguments, ``t`` after the last enqueue. Leaderless: the
memo is the broker's, and any replica settles any of the jobs.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..jobs import JobSpec
from ..ports.base import BaseBroker
from ..ports.messages import JobMessage
from . import keys
from .shared import shared

#: The meta entry marking a debounced job's enqueue.
DEBOUNCED = "debounce"
#: Seconds the memo outlives a job's due time: a job delivered later than that (a
#: fleet down for an hour) finds no memo and runs.
KEPT_PAST_DUE = 3600.0


async def enqueue_debounced(broker: BaseBroker[Any], spec: JobSpec, message: JobMessage) -> str:
    """Store ``message`` of debounced job ``spec`` due after its quiet time, named the
    latest enqueue of the job; its id."""
    assert spec.debounce is not None
    due = dataclasses.replace(
        message,
        not_before=time.time() + spec.debounce,
        meta={**message.meta, DEBOUNCED: "1"},
    )
    stored = (await broker.publish(due)).job_id
    await shared(broker).put_memo(
        keys.debounce(spec.name), stored.encode(), ttl=spec.debounce + KEPT_PAST_DUE
    )
    return stored


async def superseded_by(broker: Any, spec: JobSpec, message: JobMessage) -> str | None:
    """The id of the later enqueue that runs instead of ``message``, a debounced job's;
    None when ``message`` is the latest (or the memo is gone: it runs)."""
    if message.meta.get(DEBOUNCED) != "1":
        return None
    latest = await shared(broker).get_memo(keys.debounce(spec.name))
    if latest is None or latest.decode(errors="replace") == message.id:
        return None
    return latest.decode(errors="replace")
