"""Every key the control plane uses, in one table.

Two layers. The *names* core gives its records, each under the kind of record that
holds it (a memo, a state record, a lease), each at most 200 characters:

=================================  ==========  =============================================
name                               kind        what
=================================  ==========  =============================================
``job:{job id}``                   memo        a job's status and result
``cancel:{job id}``                memo        a job's cancel mark
``debounce:{job}``                 memo        the latest enqueue of a debounced job
``slot:{deduplication id}``        memo        the job a tick was enqueued as (``slot:#``
                                               and a digest when the id is long)
``schedule:{job}``                 state       a schedule's pause, latest slot, last trigger
``schedules:steering``             state       bumped by every steering change
``runtime:catalog``                state       the runtime schedules' change count
``runtime:{n}``                    state       runtime schedules, one bucket of 1024 by id
``replicas:{n}``                   state       the replica roll, one bucket of 16 by replica
``fleet:announced``                state       the jobs and schedules the replicas announced
``history:{schedule}``             state       a schedule's last runs
``finished:{n}``                   state       settled deliveries, one bucket of 16 by replica
``failed:{n}``                     state       failed attempts, one bucket of 16 by replica
``runs:{replica}``                 memo        the runs of a replica going on
``overlap:{job}``                  lease       the running run of a schedule
``overlap-wait:{job}``             lease       the one run ``buffer_one`` lets wait
``concurrency:{job}``              lease       the places of a job's limit; with a key,
``concurrency:{job}:{kwarg}={v}``              one per JSON value ``v`` of that kwarg
``unique:{job}:{digest}``          lease       the job holding a unique job's key (a
                                               digest of the kwargs that make it)
``rate:{job}``                     memo        the starts of a job's rate in its last
``rate:{job}:{kwarg}={v}``                     period; with a key, one per value
=================================  ==========  =============================================

A name too long or not printable (a job's or a kwarg's) becomes its readable start and a
digest of it. And the *store keys* those records live under, on a broker with a store:
the kind's prefix and the name (``memo:job:{id}``, ``state:schedule:{job}``,
``lease:overlap:{job}#{place}``). The prefixes never share a beginning, so no two kinds
of record meet under one key.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping

from ..ports.store import place_key
from .checks import MAX_TEXT

#: What each kind of record is stored under: ``{prefix}{name}``.
PREFIXES = {
    "lease place": "lease:",  # lease:{lease key}#{place}: the holder of one place
    "state record": "state:",  # state:{state key}: a record written by compare-and-set
    "memo": "memo:",  # memo:{memo key}: a value kept for its ttl
}

#: How many records the replica roll is spread over.
REPLICA_BUCKETS = 16
STEERING = "schedules:steering"
RUNTIME_CATALOG = "runtime:catalog"
ANNOUNCED = "fleet:announced"


# -- names: memos ------------------------------------------------------------------------


def status(job_id: str) -> str:
    """The memo of ``job_id``'s status."""
    return _fitted("job:", job_id)


def cancel_mark(job_id: str) -> str:
    """The memo of ``job_id``'s cancel mark."""
    return _fitted("cancel:", job_id)


def runs(replica_id: str) -> str:
    """The memo of the runs of ``replica_id`` going on."""
    return _fitted("runs:", replica_id)


def debounce(job: str) -> str:
    """The memo naming the latest enqueue of a debounced job."""
    return _fitted("debounce:", job)


def slot(deduplication_id: str) -> str:
    """The memo naming the job a tick (by its deduplication id) was enqueued as."""
    return _fitted("slot:", deduplication_id)


def _fitted(prefix: str, name: str) -> str:
    """``prefix`` and ``name``, or ``prefix``, ``#`` and a digest of ``name`` where that
    is too long for a key (ids and deduplication ids may be 200 characters)."""
    key = prefix + name
    if len(key) <= MAX_TEXT:
        return key
    return f"{prefix}#{hashlib.sha256(name.encode()).hexdigest()}"


# -- names: state records ----------------------------------------------------------------


def schedule(job_name: str) -> str:
    """The state record of a schedule (pause, latest slot, last trigger)."""
    return f"schedule:{job_name}"


def history(schedule: str) -> str:
    """The state record of a schedule's last runs (``@{id}`` for a runtime schedule)."""
    return _fitted("history:", schedule)


def finished_bucket(replica_id: str) -> str:
    """The state record of the finished bucket ``replica_id`` writes to."""
    return finished_buckets()[zlib.crc32(replica_id.encode()) % REPLICA_BUCKETS]


def finished_buckets() -> list[str]:
    """Every state record of settled deliveries."""
    return [f"finished:{n}" for n in range(REPLICA_BUCKETS)]


def failed_bucket(replica_id: str) -> str:
    """The state record of the failed bucket ``replica_id`` writes to."""
    return failed_buckets()[zlib.crc32(replica_id.encode()) % REPLICA_BUCKETS]


def failed_buckets() -> list[str]:
    """Every state record of failed attempts."""
    return [f"failed:{n}" for n in range(REPLICA_BUCKETS)]


def runtime_bucket(n: int) -> str:
    """The state record of runtime-schedule bucket ``n``."""
    return f"runtime:{n}"


def replicas_bucket(replica_id: str) -> str:
    """The state record of the roll bucket that lists ``replica_id``."""
    return replicas_buckets()[zlib.crc32(replica_id.encode()) % REPLICA_BUCKETS]


def replicas_buckets() -> list[str]:
    """Every state record of the replica roll."""
    return [f"replicas:{n}" for n in range(REPLICA_BUCKETS)]


# -- names: leases -----------------------------------------------------------------------


def overlap(job: str) -> str:
    """The lease of a schedule's running run."""
    return _bounded(f"overlap:{job}")


def overlap_wait(job: str) -> str:
    """The lease of the one run ``buffer_one`` lets wait."""
    return _bounded(f"overlap-wait:{job}")


def concurrency(job: str, key: str | None, kwargs: Mapping[str, object]) -> str:
    """The limit's lease for a run of ``job`` with ``kwargs``: one per value of its
    ``concurrency_key`` ``key`` (one for the job without a key)."""
    return _per_value("concurrency", job, key, kwargs)


def rate(job: str, key: str | None, kwargs: Mapping[str, object]) -> str:
    """The memo logging the starts of ``job`` under its rate: one per value of its
    ``rate_key`` ``key`` (one for the job without a key)."""
    return _per_value("rate", job, key, kwargs)


def unique(job: str, fields: tuple[str, ...] | None, kwargs: Mapping[str, object]) -> str:
    """The lease naming the job that holds a unique job's key: a digest of the JSON of
    its kwargs (``fields`` only, every kwarg when None)."""
    chosen = kwargs if fields is None else {name: kwargs.get(name) for name in fields}
    text = json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=str)
    return _bounded(f"unique:{job}:{hashlib.sha256(text.encode()).hexdigest()[:32]}")


def _per_value(kind: str, job: str, key: str | None, kwargs: Mapping[str, object]) -> str:
    if key is None:
        return _bounded(f"{kind}:{job}")
    value = json.dumps(kwargs.get(key), sort_keys=True, separators=(",", ":"), default=str)
    return _bounded(f"{kind}:{job}:{key}={value}")


def _bounded(key: str) -> str:
    """``key`` if it is a valid lease key, else its readable start and a digest of it."""
    if len(key) <= MAX_TEXT and key.isprintable() and key == key.strip():
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    start = "".join(c if c.isprintable() and not c.isspace() else "_" for c in key[:120])
    return f"{start}#{digest}"


# -- store keys --------------------------------------------------------------------------


def lease(key: str) -> str:
    """The store key whose places (:func:`~framework_m_core.ports.store.place_key`)
    hold lease ``key``."""
    return PREFIXES["lease place"] + key


def lease_places(key: str, limit: int) -> list[str]:
    """The store keys of the ``limit`` places of lease ``key``, in the order a claim
    tries them."""
    return [place_key(lease(key), place) for place in range(limit)]


def state(key: str) -> str:
    """The store key of state record ``key``."""
    return PREFIXES["state record"] + key


def memo(key: str) -> str:
    """The store key of memo ``key``."""
    return PREFIXES["memo"] + key
