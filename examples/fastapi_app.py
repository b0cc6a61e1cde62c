"""A web app that enqueues jobs through a broker opened and closed with the app.

It needs FastAPI and an ASGI server beside core and an adapter (``pip install fastapi
uvicorn``). Run the API and the workers against the same shared broker (not
memory://, which lives in one process: the workers would never see the jobs)::

    export M_BROKER_URL=redis://127.0.0.1:6379/0
    m sync-schema                               # once per deploy, with admin rights
    uvicorn examples.fastapi_app:api            # the web app: enqueues
    m worker --app examples.fastapi_app         # the workers: run the jobs

The API process holds one connected broker for its lifetime (``connect`` in the
lifespan), shared by every request: an enqueue is one round trip, not a connection.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from pydantic import BaseModel

from framework_m_core import App, JobContext, JobQueueProtocol, connect

app = App()


@app.job(max_attempts=5)
async def send_welcome_email(ctx: JobContext, to: str) -> None:
    ctx.log.info("welcome email to %s", to)


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    url = os.environ.get("M_BROKER_URL")
    if not url or url.startswith("memory:"):
        raise RuntimeError(
            "set M_BROKER_URL to the shared broker the workers use (e.g. "
            "redis://127.0.0.1:6379/0); memory:// lives in this process only"
        )
    async with connect(url) as broker:
        api.state.broker = broker
        yield


api = FastAPI(lifespan=lifespan)


class SignUp(BaseModel):
    email: str


@api.post("/signups", status_code=202)
async def sign_up(body: SignUp, request: Request) -> dict[str, str]:
    broker: JobQueueProtocol = request.app.state.broker
    # One welcome email per address, however often the form is sent within the window.
    welcome_once = send_welcome_email.with_options(deduplication_id=f"welcome:{body.email}")
    job_id = await welcome_once.enqueue(broker, to=body.email)
    return {"job_id": job_id}
