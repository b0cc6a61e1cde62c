"""What framework-m puts in NATS headers, and dead letters read back from them."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

from framework_m_core.ports import DeadLetter, Delivery

MSG_ID = "Nats-Msg-Id"
REASON = "Framework-M-Reason"
ATTEMPTS = "Framework-M-Attempts"
ORIGIN_SEQ = "Framework-M-Stream-Seq"
DEAD_AT = "Framework-M-Dead-At"
NOT_BEFORE = "Framework-M-Not-Before"  # unix ms: a delayed job is due then

# Longest reason header value, in bytes.
REASON_BYTES = 2048
# Bytes of max_payload kept free in every job for the headers of a copy of it: its
# Nats-Msg-Id when enqueued, the dead-letter headers (reason included) when dead-lettered.
HEADROOM = 4096


def size_with_headers(body: bytes, headers: dict[str, str]) -> int:
    """What a message counts against the server's ``max_payload``: body and header block."""
    if not headers:
        return len(body)
    block = sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items())
    return len(body) + len(b"NATS/1.0\r\n") + block + 2


def due_ms(headers: dict[str, str] | None) -> int | None:
    """A delayed job's due time (unix ms) from its headers; None for a missing or hostile
    value (the job is then due now rather than held for ever)."""
    value = (headers or {}).get(NOT_BEFORE, "")
    if value.isdigit() and len(value) <= 15:  # up to year 33658: unix ms, not nonsense
        return int(value)
    return None


def job_msg_id(deduplication_id: str | None, job_id: str) -> str:
    """The ``Nats-Msg-Id`` of a job: its deduplication id, or one unique to the job."""
    return deduplication_id or f"job:{job_id}"


def dead_letter_headers(stream: str, seq: int, reason: str, attempt: int) -> dict[str, str]:
    """Headers of a dead-letter copy; its msg id makes a repeated dead-lettering one copy."""
    return {
        MSG_ID: f"dead:{stream}:{seq}",
        REASON: _header_value(reason),  # JSON: ASCII on one line, read back as it was
        ATTEMPTS: str(attempt),
        ORIGIN_SEQ: str(seq),
        DEAD_AT: f"{time.time():.3f}",
    }


def dead_letter_copy(
    stream: str, seq: int, delivery: Delivery, reason: str, max_payload: int
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of the dead-letter copy of ``delivery`` (stored at ``seq``); the
    body is left out, and the reason says so, when both would not fit ``max_payload``."""
    body = delivery.body
    headers = dead_letter_headers(stream, seq, reason, delivery.attempt)
    if size_with_headers(body, headers) > max_payload:
        reason = f"body of {len(body):,} bytes not kept: over max_payload with the reason; {reason}"
        headers, body = dead_letter_headers(stream, seq, reason, delivery.attempt), b""
    return body, headers


def dead_letter(body: bytes, headers: dict[str, str], seq: int) -> DeadLetter:
    """The dead letter stored at ``seq`` of the dead-letter stream."""
    return DeadLetter(
        body=body,
        reason=_from_header(headers.get(REASON, "")),
        attempts=int(_number(headers.get(ATTEMPTS))),
        dead_lettered_at=_number(headers.get(DEAD_AT)),
        ref=seq,
    )


def _number(text: str | None) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0


def _header_value(text: str) -> str:
    """One line of ASCII (nats-py parses others into objects), at most REASON_BYTES long."""
    text = text[:REASON_BYTES]
    value = json.dumps(text)
    while len(value) > REASON_BYTES:  # escapes take up to 12 bytes a character
        text = text[: len(text) - (len(value) - REASON_BYTES) // 12 - 1]
        value = json.dumps(text)
    return value


def _from_header(value: object) -> str:
    try:
        text = json.loads(str(value))
    except ValueError:
        return str(value)
    return text if isinstance(text, str) else str(value)


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


def server_time(reply: bytes) -> float | None:
    """The ``ts`` of a JetStream API reply as unix seconds; None when it has none."""
    try:
        ts = json.loads(reply).get("ts")
    except (ValueError, AttributeError):
        return None
    match = _RFC3339.fullmatch(ts) if isinstance(ts, str) else None
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + float(f"0{fraction or ''}")
