"""Shared state: what a state call accepts, checked before anything reaches a broker.

A *key* names one record (``schedule:report``); it is a printable string of at most
:data:`~.leases.MAX_LEASE_TEXT` characters without leading or trailing whitespace,
as lease keys are. A *value* is bytes, at most :data:`MAX_STATE_VALUE` of them. A
*version* is a positive integer the broker gave, or None for "no record". A wait
for a change lasts at most :data:`MAX_STATE_WAIT` seconds.
"""

from __future__ import annotations

import math

from ..errors import InvalidLeaseError, InvalidStateError
from .leases import validate_lease_text
from .records import StateEntry

MAX_STATE_VALUE = 16_384
MAX_STATE_WAIT = 3600.0


def validate_state_key(key: object) -> str:
    """``key`` if it is a usable state key, else :class:`InvalidStateError`."""
    try:
        return validate_lease_text("key", key)
    except InvalidLeaseError as exc:
        raise InvalidStateError(str(exc).replace("a lease key", "a state key")) from None


def validate_state_value(value: object) -> bytes:
    """``value`` if it is storable, else :class:`InvalidStateError`."""
    if not isinstance(value, bytes):
        raise InvalidStateError(f"a state value must be bytes, got {type(value).__name__}")
    if len(value) > MAX_STATE_VALUE:
        raise InvalidStateError(
            f"a state value must be at most {MAX_STATE_VALUE} bytes, got {len(value)}"
        )
    return value


def validate_version(version: object) -> int | None:
    """``version`` if it is None or a positive integer, else :class:`InvalidStateError`."""
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidStateError(
            f"a state version must be None or a positive integer, got {version!r}"
        )
    return version


def validate_wait(timeout: object) -> float:
    """``timeout`` if it is a usable wait in seconds, else :class:`InvalidStateError`."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_STATE_WAIT
    ):
        raise InvalidStateError(
            f"a state wait must be a number of seconds above 0 and at most "
            f"{MAX_STATE_WAIT:g}, got {timeout!r}"
        )
    return float(timeout)


def version_of(entry: StateEntry | None) -> int | None:
    """The version of ``entry``; None for no record."""
    return None if entry is None else entry.version
