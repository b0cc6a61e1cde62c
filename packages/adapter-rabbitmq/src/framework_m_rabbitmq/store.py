"""The store on RabbitMQ: records in framework-m's plugin, reached by request and reply.

The exchange ``{queue}.store`` (type ``x-fm-store``, plugin module
``rabbit_exchange_type_fm_store``) keeps the records in a Mnesia table with a copy on
every node of a cluster; a request carries operations that the plugin carries out in
order in one transaction. The reads, writes and claims of one pass of the event loop go
as one request: a message and its answer cost far more than the work on the records.
A watch reads its key again every :data:`~framework_m_core.ports.store_base.POLL`
seconds (the plugin sends no change notices).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from framework_m_core.ports import BrokerError
from framework_m_core.ports.batching import Calls, PassBatch, answer
from framework_m_core.ports.store import ANY, Claim, Record, Write, place_key
from framework_m_core.ports.store_base import BaseStore

from .connection import Link
from .requests import Requests
from .settings import STORE_EXCHANGE_TYPE

#: Operations in one request at most (the plugin takes up to 1,000).
REQUEST_MOST = 500
_PASS_MOST = 200  # callers whose operations go in one flush at most
_KEY = struct.Struct(">BH")
_WRITE = struct.Struct(">BQBII")  # condition, version, delete, ttl ms, value length
_CLAIM = struct.Struct(">HII")  # places, ttl ms, value length
_READ_ANSWER = struct.Struct(">BQI")
_WRITE_ANSWER = struct.Struct(">Q")
_CLAIM_ANSWER = struct.Struct(">HQ")
_NO_PLACE = 0xFFFF
_READ, _WRITE_OP, _CLAIM_OP = 1, 2, 3

Answer = Record | int | Claim | None
#: An operation as sent, and how its answer is read: (answer body, offset) -> (answer,
#: offset of the next answer).
Op = tuple[bytes, Callable[[bytes, int], tuple[Answer, int]]]


class RabbitStore(BaseStore):
    """The records of one queue's store exchange, on the broker's connection."""

    def __init__(self, link: Link, exchange: str) -> None:
        self.requests = Requests(link, exchange, STORE_EXCHANGE_TYPE, "x-fm-store")
        self._ops: PassBatch[list[Op], list[Answer]] = PassBatch(self._flush, _PASS_MOST)

    def reset(self) -> None:
        """The connection is gone."""
        self.requests.reset()

    async def _read(self, keys: list[str]) -> list[Record | None]:
        got = await self._ops.submit([_read(key) for key in keys])
        return [g if isinstance(g, Record) else None for g in got]

    async def _write(self, writes: list[Write]) -> list[int | None]:
        got = await self._ops.submit([_write(w) for w in writes])
        return [g if isinstance(g, int) else None for g in got]

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        head = _CLAIM.pack(places, _ms(ttl), len(value))
        (got,) = await self._ops.submit([(_op(_CLAIM_OP, key, head + value), _claimed(key))])
        return got if isinstance(got, Claim) else None

    async def _flush(self, calls: Calls[list[Op], list[Answer]]) -> None:
        ops = [op for wanted, _ in calls for op in wanted]
        answers: list[Answer] = []
        try:
            for start in range(0, len(ops), REQUEST_MOST):
                answers += await self._ask(ops[start : start + REQUEST_MOST])
        except BrokerError as exc:
            for _, future in calls:
                answer(future, exc)
            return
        given = iter(answers)
        for wanted, future in calls:
            answer(future, [next(given) for _ in wanted])

    async def _ask(self, ops: list[Op]) -> list[Answer]:
        result, body = await self.requests.ask(b"".join(o for o, _ in ops), _what(len(ops)))
        if result != "ok":
            raise BrokerError(f"{_what(len(ops))}: the plugin answered {result!r}")
        out: list[Answer] = []
        at = 0
        try:
            for _, reader in ops:
                got, at = reader(body, at)
                out.append(got)
        except (struct.error, ValueError) as exc:
            raise BrokerError(f"{_what(len(ops))}: a malformed answer ({exc})") from None
        if at != len(body):
            raise BrokerError(f"{_what(len(ops))}: {len(body) - at} bytes after the answers")
        return out


def _what(count: int) -> str:
    return f"{count} store operation{'s' if count != 1 else ''}"


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _op(kind: int, key: str, rest: bytes = b"") -> bytes:
    encoded = key.encode()
    return _KEY.pack(kind, len(encoded)) + encoded + rest


def _read(key: str) -> Op:
    return _op(_READ, key), _read_answer


def _read_answer(body: bytes, at: int) -> tuple[Answer, int]:
    found, version, size = _READ_ANSWER.unpack_from(body, at)
    at += _READ_ANSWER.size
    value = body[at : at + size]
    if len(value) != size or found not in (0, 1):
        raise ValueError("a read's answer")
    return (Record(value, version) if found else None), at + size


def _write(write: Write) -> Op:
    key, value, version, ttl = write
    condition, number = (0, 0) if version is ANY else (1, 0) if version is None else (2, version)
    data = value or b""
    head = _WRITE.pack(condition, number, value is None, 0 if ttl is None else _ms(ttl), len(data))
    return _op(_WRITE_OP, key, head + data), _write_answer


def _write_answer(body: bytes, at: int) -> tuple[Answer, int]:
    (version,) = _WRITE_ANSWER.unpack_from(body, at)
    return (version or None), at + _WRITE_ANSWER.size


def _claimed(key: str) -> Callable[[bytes, int], tuple[Answer, int]]:
    def read(body: bytes, at: int) -> tuple[Answer, int]:
        place, version = _CLAIM_ANSWER.unpack_from(body, at)
        got = None if place == _NO_PLACE else Claim(place_key(key, place), version)
        return got, at + _CLAIM_ANSWER.size

    return read
