"""The status record's wire form: what a worker writes reads back the same."""

from __future__ import annotations

import json
import math

import pytest

from framework_m_core.errors import BrokerError
from framework_m_core.ports.statuses import (
    MAX_ERROR,
    MAX_TRACEBACK,
    JobState,
    JobStatus,
    decode_status,
    encode_status,
)


def test_a_status_record_reads_back_as_written_with_its_error_cut() -> None:
    status = JobStatus(
        "id1",
        JobState.FAILED,
        "reports.daily",
        3,
        enqueued_at=1_700_000_000.25,
        due_at=None,
        started_at=1_700_000_001.5,
        finished_at=1_700_000_002.0,
        slot=1_700_000_000,
        error='bad "quote"\n\u00e9' * 1_000,
        has_result=True,
    )
    back = decode_status("id1", encode_status(status, '{"rows":[1,2]}'))
    assert back.error is not None
    assert len(back.error) == MAX_ERROR
    assert status.error is not None
    assert back.error == status.error[:MAX_ERROR]
    assert back.result == {"rows": [1, 2]}
    assert (back.state, back.job_name, back.attempts, back.slot) == (
        JobState.FAILED,
        "reports.daily",
        3,
        1_700_000_000,
    )
    assert (back.enqueued_at, back.started_at, back.finished_at) == (
        1_700_000_000.25,
        1_700_000_001.5,
        1_700_000_002.0,
    )


def test_a_status_time_that_is_not_finite_is_refused() -> None:
    status = JobStatus("id1", JobState.RUNNING, "job", 1, started_at=math.inf)
    with pytest.raises(ValueError, match="finite"):
        encode_status(status)


def test_a_traceback_keeps_its_innermost_lines_and_a_record_without_one_has_none() -> None:
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 2_000 + "RuntimeError: x"
    status = JobStatus(
        "id1", JobState.SCHEDULED, "job", 1, error="RuntimeError: x", traceback=trace
    )
    back = decode_status("id1", encode_status(status))
    assert back.traceback == trace[-MAX_TRACEBACK:]
    assert back.traceback.endswith("RuntimeError: x")
    plain = JobStatus("id2", JobState.SUCCEEDED, "job", 1)
    assert b"traceback" not in encode_status(plain)  # nothing written for a success
    assert decode_status("id2", encode_status(plain)).traceback is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("traceback", 7), ("traceback", "x" * (MAX_TRACEBACK + 1)), ("error", ["x"]),
     ("error", "x" * (MAX_ERROR + 1)), ("job", 5)],
)  # fmt: skip
def test_a_record_whose_texts_are_not_what_a_worker_writes_is_refused(
    field: str, value: object
) -> None:
    record = json.loads(encode_status(JobStatus("id1", JobState.FAILED, "job", 1)))
    record[field] = value
    with pytest.raises(BrokerError, match=f"field '{field}' is not text of at most"):
        decode_status("id1", json.dumps(record).encode())
