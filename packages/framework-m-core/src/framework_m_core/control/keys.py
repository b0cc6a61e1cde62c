"""Every key the control plane writes into a broker's store, in one table.

A store key is a prefix naming what the record is, and the name it was given (a lease
key, a state key, a memo key), each of those at most 200 characters. The prefixes
never share a beginning, so no two kinds of record can meet under one key.
"""

from __future__ import annotations

from ..ports.store import place_key

#: What each kind of record is stored under: ``{prefix}{name}``.
PREFIXES = {
    "lease place": "lease:",  # lease:{lease key}#{place}: the holder of one place
    "state record": "state:",  # state:{state key}: a record written by compare-and-set
    "memo": "memo:",  # memo:{memo key}: a value kept for its ttl
}


def lease(key: str) -> str:
    """The store key whose places (:func:`~..ports.store.place_key`) hold lease ``key``."""
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
