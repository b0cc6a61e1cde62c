"""Nothing secret reaches the console's answers: a broker URL's password shows as ***."""

from __future__ import annotations

import httpx
import pytest

from framework_m_core.console.auth import Guard
from framework_m_core.console.hosts import HostCheck
from framework_m_core.console.server import build
from framework_m_core.console.views import Views
from framework_m_rabbitmq import RabbitBroker
from framework_m_redis import RedisBroker

pytestmark = pytest.mark.anyio

TOKEN = "change-token-0123456789"


@pytest.mark.parametrize(
    "broker",
    [
        RedisBroker.from_url("redis://app:s3cret-pw@127.0.0.1:6379/0"),
        RabbitBroker.from_url("amqp://app:s3cret-pw@127.0.0.1:5672/?management=off"),
    ],
    ids=["redis", "rabbitmq"],
)
async def test_broker_passwords_and_tokens_never_reach_an_answer(broker: object) -> None:
    asgi = build(  # type: ignore[arg-type]
        Views(broker, None), Guard(TOKEN, None), hosts=HostCheck(["console.test"])
    )
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as c:
        signed = await c.post("/api/session", json={"token": TOKEN})
        answers = [signed, await c.get("/api/overview"), await c.get("/api/session")]
        answers.append(await c.get("/api/openapi.json"))
    for answer in answers:
        assert answer.status_code == 200
        assert "s3cret-pw" not in answer.text
        assert TOKEN not in answer.text
    assert "***" in answers[1].json()["broker"]
