"""Rate limits as a job states them: ``"10/s"``, ``"600/m"``, ``"5/10s"``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: The most starts a rate allows per period (each is a place in the store).
MAX_RATE = 1000
#: The shortest and the longest period of a rate, in seconds.
MIN_PERIOD = 0.1
MAX_PERIOD = 43_200.0

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_FORM = re.compile(r"(\d+)/(\d+(?:\.\d+)?)?([smhd])")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``limit`` starts in any ``period`` seconds."""

    limit: int
    period: float

    def __str__(self) -> str:
        per = self.period
        for unit, seconds in reversed(_UNITS.items()):
            if per % seconds == 0:
                count = int(per // seconds)
                return f"{self.limit}/{'' if count == 1 else count}{unit}"
        return f"{self.limit}/{per:g}s"


def parse_rate(text: object) -> Rate:
    """The rate ``text`` states (``"{starts}/{unit}"`` or ``"{starts}/{n}{unit}"``, unit
    ``s``, ``m``, ``h`` or ``d``); :class:`ValueError` saying what is wrong otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"a rate is a string such as '10/s' or '600/m', got {text!r:.60}")
    found = _FORM.fullmatch(text.strip())
    if found is None:
        raise ValueError(
            f"a rate reads '{{starts}}/{{unit}}' or '{{starts}}/{{n}}{{unit}}' with unit "
            f"s, m, h or d (such as '10/s', '600/m', '5/10s'), got {text!r:.60}"
        )
    limit = int(found[1])
    period = float(found[2] or 1) * _UNITS[found[3]]
    if not 1 <= limit <= MAX_RATE:
        raise ValueError(f"a rate allows 1 to {MAX_RATE} starts per period, got {limit}")
    if not (math.isfinite(period) and MIN_PERIOD <= period <= MAX_PERIOD):
        raise ValueError(
            f"a rate's period is {MIN_PERIOD:g} s to 12 h, got {period:g} s in {text!r}"
        )
    return Rate(limit, period)
