"""Leases: what a lease call accepts, checked before anything reaches a broker.

A *key* names what is held (``overlap:report``, ``concurrency:sync:tenant=acme``);
a *holder* names who holds it (the worker uses ``{job id}@{host}:{pid}``). Both are
printable strings of at most :data:`MAX_LEASE_TEXT` characters, without leading or
trailing whitespace; a ttl is a finite number of seconds from 0.01 to a day; a
limit is an integer from 1 to :data:`MAX_LEASE_LIMIT`.
"""

from __future__ import annotations

import math

from ..errors import InvalidLeaseError

MAX_LEASE_TEXT = 200
MAX_LEASE_LIMIT = 1000
MIN_LEASE_TTL = 0.01
MAX_LEASE_TTL = 86_400.0


def validate_lease_text(what: str, value: object) -> str:
    """``value`` if it is a usable key or holder, else :class:`InvalidLeaseError`."""
    if not isinstance(value, str) or not value:
        raise InvalidLeaseError(f"a lease {what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_LEASE_TEXT or not value.isprintable() or value != value.strip():
        raise InvalidLeaseError(
            f"a lease {what} must be printable, at most {MAX_LEASE_TEXT} characters, and "
            f"not start or end with whitespace; got {value[:60]!r}"
        )
    return value


def validate_ttl(ttl: object) -> float:
    """``ttl`` in seconds if it is usable, else :class:`InvalidLeaseError`."""
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not MIN_LEASE_TTL <= ttl <= MAX_LEASE_TTL
    ):
        raise InvalidLeaseError(
            f"a lease ttl must be seconds from {MIN_LEASE_TTL:g} to {MAX_LEASE_TTL:g}, got {ttl!r}"
        )
    return float(ttl)


def validate_limit(limit: object) -> int:
    """``limit`` if it is a usable number of places, else :class:`InvalidLeaseError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LEASE_LIMIT:
        raise InvalidLeaseError(
            f"a lease limit must be an integer from 1 to {MAX_LEASE_LIMIT}, got {limit!r}"
        )
    return limit
