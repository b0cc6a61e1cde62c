"""The store port: small records in the broker, shared by every replica.

The control plane keeps here what the broker's own record of a job cannot tell:
lease places, a schedule's pause and latest slot, runtime schedules, job outcomes,
cancel marks, heartbeats. Core builds each of them on these four calls; an adapter
implements only the calls (usually by subclassing :class:`~.store_base.BaseStore`).

A *key* is a printable string of at most :data:`MAX_KEY` characters without leading
or trailing whitespace. A *record* under a key is a value of at most
:data:`MAX_VALUE` bytes and a *version*, a positive integer. Every version a store
gives is greater than every version it gave before, under any key: a record written
again after it was deleted or expired never gets back a version it had, so a
compare-and-set with an old version is always refused. A record may have a *ttl*,
:data:`MIN_TTL` to :data:`MAX_TTL` seconds: from ttl seconds after the write on it is
gone (expiry is measured by the broker's clock where it has one, otherwise by the
callers' wall clocks, which must then agree within the ticker's clock skew).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple, Protocol, runtime_checkable

from ..errors import InvalidRecordError

__all__ = [
    "ANY",
    "MAX_KEY",
    "MAX_PLACES",
    "MAX_TTL",
    "MAX_VALUE",
    "MAX_WATCH",
    "MIN_TTL",
    "WATCH_DELAY",
    "Claim",
    "Match",
    "Record",
    "StoreProtocol",
    "Write",
    "place_key",
    "validate_key",
    "validate_keys",
    "validate_places",
    "validate_sends",
    "validate_timeout",
    "validate_ttl",
    "validate_value",
    "validate_version",
    "validate_writes",
]

MAX_KEY = 256
MAX_VALUE = 131_072
MIN_TTL = 0.01
MAX_TTL = 7 * 86_400.0
MAX_WATCH = 3600.0
MAX_PLACES = 1000
#: Seconds within which :meth:`StoreProtocol.watch` returns after a write or a delete
#: from any connection: the contract suite checks this bound.
WATCH_DELAY = 2.0


class Match(Enum):
    """A :class:`Write`'s condition that is not a version."""

    #: Whatever the key holds, or nothing.
    ANY = "any"


ANY = Match.ANY


class Record(NamedTuple):
    """A record as read: its value and its version."""

    value: bytes
    version: int


class Claim(NamedTuple):
    """What :meth:`StoreProtocol.claim` took: the place's key and its record's version."""

    key: str
    version: int


class Write(NamedTuple):
    """One change of :meth:`StoreProtocol.write`.

    ``value`` None deletes the record. ``version`` is the condition: :data:`ANY` (none),
    None (the key has no record) or the version the key's record must have. ``ttl`` is
    the record's lifetime in seconds from this write, None for no expiry; a delete
    takes no ttl.
    """

    key: str
    value: bytes | None
    version: int | Match | None = ANY
    ttl: float | None = None


@runtime_checkable
class StoreProtocol(Protocol):
    """Small records with versions, written by compare-and-set, expiring, watched.

    Records live in the broker, not in any process: every promise below holds between
    any number of connections and processes at once, and on the clusters the adapter
    supports. An invalid key, value, version, ttl or timeout raises
    :class:`~.errors.InvalidRecordError` and sends nothing.
    :class:`~.errors.BrokerError` means the broker could not be reached; a write or a
    claim may then have taken effect or not, so read the key again before deciding
    (a claim asked again with the same value is safe: it is idempotent).
    """

    @abstractmethod
    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        """The record under each of ``keys`` as last written, None where there is none
        (never written, deleted or expired); in the order of ``keys``.

        Reading changes nothing. A read that starts after a write returned sees that
        write or a later one, from any connection.
        """

    @abstractmethod
    async def write(self, writes: Sequence[Write]) -> list[int | None]:
        """Apply each :class:`Write` whose condition holds; for each, in order, the new
        version, or None when its condition did not hold and nothing changed.

        A write stores its value (a delete removes the record) only when the key's
        record matches its ``version``: :data:`ANY` always, None when the key has no
        record (an expired one counts as none), a number when the record has that
        version. Of several writes with one condition on one key at once, from any
        connections, exactly one succeeds. The new version is greater than every
        version the store gave before; a delete that succeeded returns the version the
        record had. A write with a ``ttl`` makes the record last that long from the
        write and no longer; one without keeps it until it is written again or deleted.
        The writes of one call are applied one after another, each on its own (a later
        one sees the earlier ones; a refused one does not stop the rest).
        """

    @abstractmethod
    async def send(self, writes: Sequence[Write]) -> None:
        """Apply each :class:`Write`, every one unconditional (:data:`ANY`), as
        :meth:`write` would, without learning its version: for records nobody writes
        again by version (a job's outcome), where a store may save the round trip.

        Once it returned, the writes reach the broker before anything the same broker
        instance sends later (a delivery settled after them is never settled without
        them having been sent), a :meth:`write` of this store that returned after it
        is applied after them, and a read begun
        :data:`~framework_m_core.ports.store.WATCH_DELAY` seconds later sees them. The
        writes of one call apply in order. A
        store that cannot tell whether a write landed returns without raising (a
        broker that refuses it may drop it unseen); :class:`~.errors.BrokerError` when
        it knows they were not sent. A write with another condition raises
        :class:`~.errors.InvalidRecordError` and sends nothing.
        """

    @abstractmethod
    async def claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        """In one step, take one of the ``places`` places of ``key`` that has no
        record: write ``value`` there for ``ttl`` seconds and return the place's key and
        version; None, changing nothing, when every place holds a record with another
        value. Place ``n`` is the record under
        :func:`~framework_m_core.ports.store.place_key` ``(key, n)``; places are tried
        in order from 0, and a store may first try one it knows to be free (one it
        freed itself), never one written elsewhere since.

        A place whose record already holds ``value`` is taken again instead: its ttl
        restarts and it gets a new version, so a claim asked again (a reply lost) never
        takes a second place. ``places`` is 1 to
        :data:`~framework_m_core.ports.store.MAX_PLACES`. Claims at once never take one
        place twice: at most ``places`` values hold the places of a key. How a lease
        takes a place under its limit in one round trip.
        """

    @abstractmethod
    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        """The record under ``key`` once its version is other than ``version`` (None:
        once the key has a record), or as it is read when ``timeout`` seconds passed.

        Returns at once when the record already differs. A write or a delete of the
        key, from any connection, makes it return within
        :data:`~framework_m_core.ports.store.WATCH_DELAY` seconds; an expiry may be seen
        only at the timeout. It returns before the timeout only
        with a record that differs. ``timeout`` is above 0 and at most
        :data:`~framework_m_core.ports.store.MAX_WATCH` seconds.
        """


def place_key(key: str, place: int) -> str:
    """The key of place ``place`` of ``key`` (:meth:`StoreProtocol.claim`)."""
    return f"{key}#{place}"


def validate_key(key: object) -> str:
    """``key`` if it is a usable record key, else :class:`InvalidRecordError`."""
    if not isinstance(key, str) or not key:
        raise InvalidRecordError(f"a record key must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY or not key.isprintable() or key != key.strip():
        raise InvalidRecordError(
            f"a record key must be printable, at most {MAX_KEY} characters, and not start "
            f"or end with whitespace; got {key[:60]!r}"
        )
    return key


def validate_keys(keys: object) -> list[str]:
    """``keys`` as a list of usable keys, else :class:`InvalidRecordError`."""
    if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
        raise InvalidRecordError(f"record keys must be a sequence of keys, got {keys!r:.60}")
    return [validate_key(key) for key in keys]


def validate_places(key: object, places: object) -> tuple[str, int]:
    """``key`` and ``places`` of a claim if every place's key is usable, else
    :class:`InvalidRecordError`."""
    if isinstance(places, bool) or not isinstance(places, int) or not 1 <= places <= MAX_PLACES:
        raise InvalidRecordError(f"a claim takes 1 to {MAX_PLACES} places, got {places!r}")
    validate_key(place_key(validate_key(key), places - 1))
    return str(key), places


def validate_value(value: object) -> bytes:
    """``value`` if it can be stored, else :class:`InvalidRecordError`."""
    if not isinstance(value, bytes):
        raise InvalidRecordError(f"a record value must be bytes, got {type(value).__name__}")
    if len(value) > MAX_VALUE:
        raise InvalidRecordError(
            f"a record value must be at most {MAX_VALUE} bytes, got {len(value)}"
        )
    return value


def validate_version(version: object) -> int | Match | None:
    """``version`` if it is a usable condition, else :class:`InvalidRecordError`."""
    if version is None or version is ANY:
        return version
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidRecordError(
            f"a record version must be ANY, None or a positive integer, got {version!r}"
        )
    return version


def validate_ttl(ttl: object) -> float:
    """``ttl`` in seconds if it is usable, else :class:`InvalidRecordError`."""
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not MIN_TTL <= ttl <= MAX_TTL
    ):
        raise InvalidRecordError(
            f"a record ttl must be seconds from {MIN_TTL:g} to {MAX_TTL:g}, got {ttl!r}"
        )
    return float(ttl)


def validate_timeout(timeout: object) -> float:
    """``timeout`` if it is a usable watch in seconds, else :class:`InvalidRecordError`."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_WATCH
    ):
        raise InvalidRecordError(
            f"a watch must last seconds above 0 and at most {MAX_WATCH:g}, got {timeout!r}"
        )
    return float(timeout)


def validate_sends(writes: object) -> list[Write]:
    """``writes`` as valid unconditional :class:`Write` s, else :class:`InvalidRecordError`."""
    valid = validate_writes(writes)
    for write in valid:
        if write.version is not ANY:
            raise InvalidRecordError(f"a sent write is unconditional (ANY), key {write.key!r}")
    return valid


def validate_writes(writes: object) -> list[Write]:
    """``writes`` as valid :class:`Write` s, else :class:`InvalidRecordError`."""
    if not isinstance(writes, Sequence) or isinstance(writes, str | bytes):
        raise InvalidRecordError(f"writes must be a sequence of Write, got {writes!r:.60}")
    out = []
    for write in writes:
        if not isinstance(write, Write):
            raise InvalidRecordError(f"a write must be a Write, got {write!r:.60}")
        key, value = validate_key(write.key), write.value
        if value is not None:
            value = validate_value(value)
        ttl = write.ttl
        if ttl is not None:
            if value is None:
                raise InvalidRecordError(f"a delete takes no ttl (key {key!r})")
            ttl = validate_ttl(ttl)
        out.append(Write(key, value, validate_version(write.version), ttl))
    return out
