"""A Flask app (plain ``def`` views) that enqueues through the blocking client.

It needs Flask beside core and an adapter (``pip install flask``). Run the web app and
the workers against the same shared broker (not memory://, which lives in one process:
the workers would never see the jobs)::

    export M_BROKER_URL=redis://127.0.0.1:6379/0
    m sync-schema                                   # once per deploy, with admin rights
    flask --app examples.flask_app run              # the web app: enqueues
    gunicorn --preload -w 4 'examples.flask_app:create_app()'   # or, forked workers
    m worker --app examples.flask_app               # the workers: run the jobs

The web app connects once (``connect_sync`` in ``create_app``); every request of every
thread, and every process gunicorn forks from it, shares that client.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, request

from framework_m_core import App, InvalidJobError, JobContext, connect_sync

app = App()


@app.job(max_attempts=5)
async def send_welcome_email(ctx: JobContext, to: str) -> str:
    ctx.log.info("welcome email to %s", to)
    return f"welcome email sent to {to}"


def create_app() -> Flask:
    """The web app, connected to the broker at ``M_BROKER_URL``."""
    url = os.environ.get("M_BROKER_URL")
    if not url or url.startswith("memory:"):
        raise RuntimeError(
            "set M_BROKER_URL to the shared broker the workers use (e.g. "
            "redis://127.0.0.1:6379/0); memory:// lives in this process only"
        )
    client = connect_sync(url)
    web = Flask(__name__)

    @web.post("/signups")
    def sign_up() -> tuple[dict[str, Any], int]:
        body = request.get_json(silent=True)
        email = body.get("email") if isinstance(body, dict) else None
        if not isinstance(email, str) or "@" not in email:
            return {"error": 'give an email address: {"email": "..."}'}, 422
        # One welcome email per address, however often the form is sent within the window.
        welcome_once = send_welcome_email.with_options(deduplication_id=f"welcome:{email}")
        return {"job_id": welcome_once.enqueue_sync(client, to=email)}, 202

    @web.get("/jobs/<job_id>")
    def job(job_id: str) -> tuple[dict[str, Any], int]:
        try:
            status = client.status(job_id)
        except InvalidJobError as exc:
            return {"error": str(exc)}, 400
        return status.as_dict(), 200

    return web
