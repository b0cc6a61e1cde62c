"""What a lease, state or memo call of :mod:`.shared` accepts, checked before anything
reaches the store.

A *key* names what is held or kept (``overlap:report``, ``schedule:report``,
``job:{id}``); a lease *holder* names who holds a place (the worker uses
``{job id}@{host}:{pid}``). Both are printable strings of at most :data:`MAX_TEXT`
characters, without leading or trailing whitespace. A lease ttl is a finite number of
seconds from 0.01 to a day, a limit an integer from 1 to :data:`MAX_LEASE_LIMIT`. A
state value is at most :data:`MAX_STATE_VALUE` bytes, a version a positive integer the
store gave (None: no record), a wait at most :data:`MAX_STATE_WAIT` seconds. A memo
value is at most :data:`MAX_MEMO_VALUE` bytes, kept at most :data:`MAX_MEMO_TTL`.
"""

from __future__ import annotations

import json
import math
from typing import TypeGuard

from ..errors import InvalidLeaseError, InvalidMemoError, InvalidStateError

MAX_TEXT = 200
MAX_LEASE_LIMIT = 1000
MIN_LEASE_TTL = 0.01
MAX_LEASE_TTL = 86_400.0
MAX_STATE_VALUE = 16_384
MAX_STATE_WAIT = 3600.0
MAX_MEMO_VALUE = 131_072
MAX_MEMO_TTL = 7 * 86_400.0

_Error = type[InvalidLeaseError] | type[InvalidStateError] | type[InvalidMemoError]


def text(kind: str, what: str, value: object, error: _Error) -> str:
    """``value`` if it is a usable key or holder, else ``error``."""
    if not isinstance(value, str) or not value:
        raise error(f"a {kind} {what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_TEXT or not value.isprintable() or value != value.strip():
        raise error(
            f"a {kind} {what} must be printable, at most {MAX_TEXT} characters, and "
            f"not start or end with whitespace; got {value[:60]!r}"
        )
    return value


def lease_text(what: str, value: object) -> str:
    """``value`` if it is a usable lease key or holder, else :class:`InvalidLeaseError`."""
    return text("lease", what, value, InvalidLeaseError)


def lease_ttl(ttl: object) -> float:
    """``ttl`` in seconds if it is usable, else :class:`InvalidLeaseError`."""
    if not _seconds(ttl) or not MIN_LEASE_TTL <= ttl <= MAX_LEASE_TTL:
        raise InvalidLeaseError(
            f"a lease ttl must be seconds from {MIN_LEASE_TTL:g} to {MAX_LEASE_TTL:g}, got {ttl!r}"
        )
    return float(ttl)


def lease_limit(limit: object) -> int:
    """``limit`` if it is a usable number of places, else :class:`InvalidLeaseError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LEASE_LIMIT:
        raise InvalidLeaseError(
            f"a lease limit must be an integer from 1 to {MAX_LEASE_LIMIT}, got {limit!r}"
        )
    return limit


def state_key(key: object) -> str:
    """``key`` if it is a usable state key, else :class:`InvalidStateError`."""
    return text("state", "key", key, InvalidStateError)


def state_value(value: object) -> bytes:
    """``value`` if it is storable, else :class:`InvalidStateError`."""
    return _bytes("state", value, MAX_STATE_VALUE, InvalidStateError)


def state_version(version: object) -> int | None:
    """``version`` if it is None or a positive integer, else :class:`InvalidStateError`."""
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidStateError(
            f"a state version must be None or a positive integer, got {version!r}"
        )
    return version


def state_wait(timeout: object) -> float:
    """``timeout`` if it is a usable wait in seconds, else :class:`InvalidStateError`."""
    if not _seconds(timeout) or not 0 < timeout <= MAX_STATE_WAIT:
        raise InvalidStateError(
            f"a state wait must be a number of seconds above 0 and at most "
            f"{MAX_STATE_WAIT:g}, got {timeout!r}"
        )
    return float(timeout)


def memo_key(key: object) -> str:
    """``key`` if it is a usable memo key, else :class:`InvalidMemoError`."""
    return text("memo", "key", key, InvalidMemoError)


def memo_value(value: object) -> bytes:
    """``value`` if it can be kept, else :class:`InvalidMemoError`."""
    return _bytes("memo", value, MAX_MEMO_VALUE, InvalidMemoError)


def memo_ttl(ttl: object) -> float:
    """``ttl`` if it is a usable lifetime in seconds, else :class:`InvalidMemoError`."""
    if not _seconds(ttl) or not 0 < ttl <= MAX_MEMO_TTL:
        raise InvalidMemoError(
            f"a memo ttl must be a number of seconds above 0 and at most "
            f"{MAX_MEMO_TTL:g}, got {ttl!r}"
        )
    return float(ttl)


def _bytes(kind: str, value: object, most: int, error: _Error) -> bytes:
    if not isinstance(value, bytes):
        raise error(f"a {kind} value must be bytes, got {type(value).__name__}")
    if len(value) > most:
        raise error(f"a {kind} value must be at most {most} bytes, got {len(value)}")
    return value


def _seconds(value: object) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


# -- what the control plane's own records hold, checked as they are read ----------------


def is_count(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a whole number >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_unix_time(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a finite number of seconds >= 0 (not a bool)."""
    return _seconds(value) and value >= 0


def is_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a non-empty string of at most :data:`MAX_TEXT` characters."""
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT


def fitted_list(head: dict[str, object], name: str, entries: list[dict[str, object]]) -> bytes:
    """``head`` with ``entries`` (newest first) under ``name`` as compact JSON, the
    oldest dropped until it fits a state record (:data:`MAX_STATE_VALUE` bytes)."""
    while True:
        value = json.dumps({**head, name: entries}, separators=(",", ":")).encode()
        if len(value) <= MAX_STATE_VALUE or not entries:
            return value
        keep = min(len(entries) - 1, len(entries) * MAX_STATE_VALUE // len(value))
        entries = entries[:keep]
