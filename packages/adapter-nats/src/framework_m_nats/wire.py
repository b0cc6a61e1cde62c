"""What framework-m puts in NATS headers, and dead letters read back from them."""

from __future__ import annotations

import json
import time

from framework_m_core.broker import DeadLetter

MSG_ID = "Nats-Msg-Id"
REASON = "Framework-M-Reason"
ATTEMPTS = "Framework-M-Attempts"
ORIGIN_SEQ = "Framework-M-Stream-Seq"
DEAD_AT = "Framework-M-Dead-At"


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


def dead_letter(body: bytes, headers: dict[str, str]) -> DeadLetter:
    return DeadLetter(
        body=body,
        reason=_from_header(headers.get(REASON, "")),
        attempts=int(_number(headers.get(ATTEMPTS))),
        dead_lettered_at=_number(headers.get(DEAD_AT)),
    )


def _number(text: str | None) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0


def _header_value(text: str) -> str:
    """Header values must be one line of ASCII (nats-py parses others into objects)."""
    return json.dumps(text[:2000])


def _from_header(value: object) -> str:
    try:
        text = json.loads(str(value))
    except ValueError:
        return str(value)
    return text if isinstance(text, str) else str(value)
