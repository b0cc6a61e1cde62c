"""Memos: what a memo call accepts, checked before anything reaches a broker.

A memo *key* is as a state key (printable, at most 200 characters, no leading or
trailing whitespace); a *value* is bytes, at most :data:`MAX_MEMO_VALUE` of them; a
*ttl* is a number of seconds above 0 and at most :data:`MAX_MEMO_TTL`.
"""

from __future__ import annotations

import math

from ..errors import InvalidMemoError, InvalidStateError
from .state import validate_state_key

MAX_MEMO_VALUE = 131_072
MAX_MEMO_TTL = 7 * 86_400.0


def validate_memo_key(key: object) -> str:
    """``key`` if it is a usable memo key, else :class:`InvalidMemoError`."""
    try:
        return validate_state_key(key)
    except InvalidStateError as exc:
        raise InvalidMemoError(str(exc).replace("a state key", "a memo key")) from None


def validate_memo_value(value: object) -> bytes:
    """``value`` if it can be kept, else :class:`InvalidMemoError`."""
    if not isinstance(value, bytes):
        raise InvalidMemoError(f"a memo value must be bytes, got {type(value).__name__}")
    if len(value) > MAX_MEMO_VALUE:
        raise InvalidMemoError(
            f"a memo value must be at most {MAX_MEMO_VALUE} bytes, got {len(value)}"
        )
    return value


def validate_memo_ttl(ttl: object) -> float:
    """``ttl`` if it is a usable lifetime in seconds, else :class:`InvalidMemoError`."""
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 < ttl <= MAX_MEMO_TTL
    ):
        raise InvalidMemoError(
            f"a memo ttl must be a number of seconds above 0 and at most "
            f"{MAX_MEMO_TTL:g}, got {ttl!r}"
        )
    return float(ttl)
