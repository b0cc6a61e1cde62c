from __future__ import annotations

import json
import math

import pytest

from framework_m_core import InvalidJobError, JobMessage, MessageDecodeError, decode_message
from framework_m_core.ports.messages import MAX_NESTING
from framework_m_core.ports.urls import redact_url


def test_round_trip() -> None:
    msg = JobMessage(
        "report",
        {"day": "2026-01-01", "n": [1, 2], "x": None},
        deduplication_id="tick:report:1767225600",
        enqueued_at=1767225600.5,
        scheduled_at=1767225600,
    )
    assert decode_message(msg.encode()) == msg


def test_meta_travels_and_a_message_without_it_still_decodes() -> None:
    traced = JobMessage("report", meta={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
    assert decode_message(traced.encode()) == traced
    older = b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"scheduled_at":null}'
    assert decode_message(older).meta == {}
    with pytest.raises(InvalidJobError, match="meta of job 'report'"):
        JobMessage("report", meta={"k": "line\nbreak"}).encode()


def test_non_json_kwargs_name_the_key() -> None:
    with pytest.raises(InvalidJobError, match="key 'when'"):
        JobMessage("job", {"ok": 1, "when": object()}).encode()
    with pytest.raises(InvalidJobError, match="key 'ratio'"):
        JobMessage("job", {"ratio": math.inf}).encode()


def nested(levels: int) -> dict[str, object]:
    """kwargs ``levels`` deep (kwargs itself is the first level), lists and dicts mixed."""
    value: object = 1
    for i in range(levels - 1):
        value = [value] if i % 2 else {"k": value}
    return {"a": value, "flat": "[[[[{{{{" * 20}


def test_kwargs_nest_at_most_the_documented_depth() -> None:
    deepest = JobMessage("job", nested(MAX_NESTING))
    assert decode_message(deepest.encode()) == deepest
    for levels in (MAX_NESTING + 1, 5_000):
        with pytest.raises(InvalidJobError, match=f"nested more than {MAX_NESTING} levels"):
            JobMessage("job", nested(levels)).encode()


def test_a_body_nested_too_deeply_is_refused() -> None:
    kwargs = json.dumps(nested(MAX_NESTING + 1))
    body = f'{{"v":1,"id":"a","job":"j","enqueued_at":1,"kwargs":{kwargs}}}'.encode()
    with pytest.raises(MessageDecodeError, match=f"nested more than {MAX_NESTING} levels"):
        decode_message(body)


def _body(**fields: object) -> bytes:
    base: dict[str, object] = {
        "v": 1,
        "id": "abc",
        "job": "j",
        "kwargs": {},
        "enqueued_at": 1.0,
        "scheduled_at": None,
        "dedup_id": None,
    }
    base.update(fields)
    return json.dumps(base).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x80\x81", "not JSON"),
        (b"{", "not JSON"),
        (b"[1]", "not an object"),
        (b'{"v": 1, "x": NaN}', "not JSON"),
        (_body(v=2), "unsupported message version 2"),
        (_body(id=""), "'id'"),
        (_body(job="bad name"), "invalid job name"),
        (_body(kwargs=[1]), "'kwargs' must be an object"),
        (_body(enqueued_at="now"), "'enqueued_at'"),
        (_body(scheduled_at=1.5), "'scheduled_at'"),
        (_body(scheduled_at=True), "'scheduled_at'"),
        (_body(dedup_id=""), "deduplication_id"),
    ],
)
def test_decode_rejects_garbage(body: bytes, message: str) -> None:
    with pytest.raises(MessageDecodeError, match=message):
        decode_message(body)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://user:s3cret@host:4222", "nats://user:***@host:4222"),
        ("nats://s3cret@host:4222", "nats://***@host:4222"),
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:***@127.0.0.1:5672/"),
        ("nats://host?token=s3cret&stream=x", "nats://host?token=***&stream=x"),
        ("memory://", "memory://"),
        (
            "amqp://h/?management=http://admin:s3cret@h:15672&queue=q",
            "amqp://h/?management=http://admin:***@h:15672&queue=q",
        ),
    ],
)
def test_credentials_are_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1e999}', "unix time"),
        (b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":' + b"9" * 400 + b"}", "unix time"),
        (
            b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"scheduled_at":'
            + b"9" * 30
            + b"}",
            "scheduled_at",
        ),
        (b'{"v":1,"id":"a\\nforged log line","job":"j","kwargs":{},"enqueued_at":1}', "'id'"),
        (b'{"v":1,"id":"' + b"x" * 5000 + b'","job":"j","kwargs":{},"enqueued_at":1}', "'id'"),
        (b'{"v":1,"id":"a","job":"j\\n","kwargs":{},"enqueued_at":1}', "invalid job name"),
        (b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":-5}', "unix time"),
        (b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"meta":[]}', "'meta'"),
        (b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"meta":{"k":1}}', "'meta'"),
        (b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"meta":{"a b":"c"}}', "'meta'"),
        (
            b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"meta":{"k":"'
            + b"x" * 5000
            + b'"}}',
            "'meta'",
        ),
        (
            b'{"v":1,"id":"a","job":"j","kwargs":{},"enqueued_at":1,"meta":{'
            + b",".join(b'"k%d":"v"' % i for i in range(17))
            + b"}}",
            "more than 16",
        ),
    ],
)
def test_hostile_bodies_are_refused_with_a_reason_and_nothing_else(body: bytes, says: str) -> None:
    with pytest.raises(MessageDecodeError, match=says) as raised:
        decode_message(body)
    assert len(str(raised.value)) < 500


@pytest.mark.parametrize(
    "url",
    [
        "redis://app:p/ss@h:6379/0",
        "redis://app:p?ss@h:6379/0",
        "redis://app:p#ss@h:6379/0",
        "amqp://app:p@ss@h:5672/",
        "nats://app:pa/s?s#w@h:4222",
    ],
)
def test_unencoded_passwords_never_show(url: str) -> None:
    shown = redact_url(url)
    assert "ss" not in shown.replace("ss@h", "")
    assert "***@h" in shown
