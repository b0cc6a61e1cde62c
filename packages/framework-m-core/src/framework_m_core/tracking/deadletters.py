"""Dead letters as operators see them: which job they were, a stable key, and how a job
goes back (``m dead-letters`` and ``m console``)."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from ..errors import MessageDecodeError
from ..ports.messages import decode_message
from ..ports.records import DeadLetter


@dataclass(frozen=True, slots=True)
class Described:
    """A dead letter with its job's name and id (``-`` when its body is not a job)."""

    letter: DeadLetter
    job: str
    job_id: str

    @property
    def key(self) -> str:
        """The same for the same dead letter on every read: its body and time, hashed."""
        seed = self.letter.body + repr(self.letter.dead_lettered_at).encode()
        return hashlib.sha256(seed).hexdigest()[:20]


def described(letter: DeadLetter) -> Described:
    try:
        message = decode_message(letter.body)
    except MessageDecodeError:
        return Described(letter, "-", "-")
    return Described(letter, message.job_name, message.id)


def fresh(body: bytes) -> bytes:
    """A dead job as it goes back: a tick's enqueue deadline has passed, so it is dropped."""
    try:
        message = decode_message(body)
    except MessageDecodeError:
        return body  # put back as it was: the worker dead-letters it again, saying why
    if message.not_after is None:
        return body
    return dataclasses.replace(message, not_after=None).encode()
