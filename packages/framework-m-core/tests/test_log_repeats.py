"""Repeated warnings during an outage: one a template every few seconds, with a count."""

from __future__ import annotations

import logging

from framework_m_core.observability.logs import Repeats


def record(name: str, msg: str, *args: object, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_one_record_of_a_template_every_few_seconds_then_the_count() -> None:
    now = [100.0]
    repeats = Repeats(every=5.0, clock=lambda: now[0])
    template = "receive failed: %s; retrying in %.1fs"
    let = [repeats.filter(record("framework_m.worker", template, "down", 0.1))]
    for _ in range(9):
        now[0] += 0.4
        let.append(repeats.filter(record("framework_m.worker", template, "down", 0.2)))
    assert let == [True] + [False] * 9
    now[0] = 105.5
    after = record("framework_m.worker", template, "down", 1.6)
    assert repeats.filter(after)
    assert after.getMessage() == (
        "receive failed: down; retrying in 1.6s (9 more like it in the last 6s not logged)"
    )
    now[0] = 111.0
    quiet = record("framework_m.worker", template, "down", 1.6)
    assert repeats.filter(quiet)
    assert quiet.getMessage() == "receive failed: down; retrying in 1.6s"  # none held back


def test_job_outcomes_other_templates_info_and_other_loggers_pass() -> None:
    repeats = Repeats(every=5.0, clock=lambda: 0.0)
    assert repeats.filter(record("framework_m.ticker", "a %s", 1))
    assert repeats.filter(record("framework_m.ticker", "b %s", 1))  # another template
    assert repeats.filter(record("framework_m.rabbitmq", "a %s", 1))  # another logger
    for _ in range(3):
        assert repeats.filter(record("framework_m.job", "job %s failed", 1, level=logging.ERROR))
        assert repeats.filter(record("framework_m.worker", "x", level=logging.INFO))
        assert repeats.filter(record("framework_m.worker", "y", level=logging.CRITICAL))
        assert repeats.filter(record("myapp", "a %s", 1))
    assert not repeats.filter(record("framework_m.ticker", "a %s", 2))
