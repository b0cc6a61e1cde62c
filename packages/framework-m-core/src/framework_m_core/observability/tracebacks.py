"""Tracebacks for the log, bounded: a handler's exception text can be any size."""

from __future__ import annotations

import traceback

MAX_LINE = 1_000
MAX_TOTAL = 16_000
MAX_FRAMES = 30


def bounded_traceback(error: BaseException) -> str:
    """``error``'s traceback (innermost :data:`MAX_FRAMES` frames, chained causes
    included), each line cut to :data:`MAX_LINE` characters and the whole to
    :data:`MAX_TOTAL`."""
    out: list[str] = []
    size = 0
    for chunk in traceback.TracebackException.from_exception(error, limit=-MAX_FRAMES).format():
        for line in chunk.splitlines():
            if len(line) > MAX_LINE:
                line = f"{line[:MAX_LINE]}... ({len(line):,} characters)"
            if size + len(line) > MAX_TOTAL:
                out.append("... (traceback cut)")
                return "\n".join(out)
            out.append(line)
            size += len(line) + 1
    return "\n".join(out)
