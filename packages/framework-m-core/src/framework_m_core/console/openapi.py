"""The OpenAPI 3.1 document of the console's JSON API, served at ``/api/openapi.json``."""

from __future__ import annotations

from typing import Any

from ..about import __version__
from ..control.activity import RunningJob
from ..control.replicas import OutboxSeen, Replica
from ..control.settled import SettledRun
from ..ports.messages import MAX_ID_LENGTH, MAX_NAME_LENGTH
from ..ports.records import QueueStats
from ..ports.statuses import JobStatus
from ..tracking.lists import STATES, DeadJob, HeldJob, OldestWaiting
from .answers import DeadLetterRow, PausedSchedule, ScheduleRow
from .schemas import schema_of
from .views import MAX_LIMIT

_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    said = {
        400: "the input cannot be carried out (the message says why)",
        401: "no token, or not the right one",
        403: "changes are off, the read token was used, or the request came from another site",
        404: "not found",
        503: "the broker did not answer",
    }
    return {str(code): _json(_ERROR, said[code]) for code in codes}


def _read(summary: str, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {"200": _json(schema), **_errors(400, 401, 503)},
            **extra,
        }
    }


def _change(
    summary: str, schema: dict[str, Any], body: dict[str, Any] | None = None, method: str = "post"
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "security": [{"bearer": []}, {"session": []}],
        "responses": {"200": _json(schema), **_errors(400, 401, 403, 404, 503)},
    }
    if body is not None:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": body}},
        }
    return {method: operation}


def _param(name: str, where: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema,
    }


# What the server accepts (views.page_of, control.jobs.validate_job_id,
# control.runtime_schedules.validate_id): a test checks each bound both ways.
_JOB_ID = {"type": "string", "pattern": f"^[!-~]{{1,{MAX_ID_LENGTH}}}$"}
_SCHEDULE_ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"}
_JOB_NAME = rf"[A-Za-z_][A-Za-z0-9_.\-]{{0,{MAX_NAME_LENGTH - 1}}}"
_PAGE = [
    _param(
        "q", "query", "case-insensitive text to search for", {"type": "string", "maxLength": 200}
    ),
    _param("offset", "query", "items to skip (0)", {"type": "integer", "minimum": 0}),
    _param(
        "limit",
        "query",
        f"items of the page, 1 to {MAX_LIMIT} (50)",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    ),
]
_NAME = [
    _param(
        "name",
        "path",
        "a scheduled job's name, or @{id} for a runtime schedule",
        {
            "type": "string",
            "pattern": rf"^(?:{_JOB_NAME}|@{_SCHEDULE_ID['pattern'][1:-1]})$",
        },
    )
]
_OBJECT: dict[str, Any] = {"type": "object"}


def _or_null(item: str) -> dict[str, Any]:
    return {"anyOf": [{"$ref": f"#/components/schemas/{item}"}, {"type": "null"}]}


def _listed(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["total", "offset", "items"],
        "properties": {
            "total": {"type": "integer"},
            "offset": {"type": "integer"},
            "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
        },
    }


def document() -> dict[str, Any]:
    """The whole document; a test checks it names every ``/api`` route of the app."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "framework-m console",
            "version": __version__,
            "description": "Schedules, replicas, queues, dead letters and jobs of one broker. "
            "Changes need the change token (Bearer, or the page's session with X-CSRF-Token).",
        },
        "paths": {
            "/api/openapi.json": _read("This document", _OBJECT),
            "/api/session": {
                **_read("Whether this browser is signed in, its role and CSRF token", _OBJECT),
                "post": {
                    "summary": "Sign in with a token: sets the session cookie; gives a CSRF token",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["token"],
                                    "properties": {"token": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "responses": {"200": _json(_OBJECT), **_errors(400, 401, 403)},
                },
                "delete": {"summary": "Sign out", "responses": {"200": _json(_OBJECT)}},
            },
            "/api/overview": _read("The broker, its capabilities, the app's jobs", _OBJECT),
            "/api/schedules": _read(
                "Schedules from code and from runtime, searched and paged",
                _listed("Schedule"),
                parameters=_PAGE,
            ),
            "/api/schedules/{name}/pause": {
                **_change(
                    "Pause: no replica enqueues its slots from its next tick",
                    {"$ref": "#/components/schemas/ScheduleState"},
                    {
                        "type": "object",
                        "properties": {
                            "until": {"type": ["number", "string", "null"]},
                            "reason": {"type": ["string", "null"]},
                        },
                    },
                ),
                "parameters": _NAME,
            },
            "/api/schedules/{name}/resume": {
                **_change(
                    "Resume from the next tick", {"$ref": "#/components/schemas/ScheduleState"}
                ),
                "parameters": _NAME,
            },
            "/api/schedules/{name}/trigger": {
                **_change(
                    "One run now across the fleet",
                    {"type": "object", "properties": {"job_id": {"type": "string"}}},
                    {"type": "object", "properties": {"kwargs": _OBJECT}},
                ),
                "parameters": _NAME,
            },
            "/api/schedules/{name}/history": {
                **_read(
                    "The schedule's last runs, newest first (slot, replica, outcome, duration)",
                    {
                        "type": "object",
                        "required": ["name", "items"],
                        "properties": {
                            "name": {"type": "string"},
                            "items": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/SettledRun"},
                            },
                        },
                    },
                ),
                "parameters": _NAME,
            },
            "/api/runtime-schedules": _change(
                "Set a runtime schedule (create or replace)",
                _OBJECT,
                {
                    "type": "object",
                    "required": ["id", "job"],
                    "properties": {
                        "id": _SCHEDULE_ID,
                        "job": {"type": "string", "minLength": 1},
                        "cron": {"type": "string"},
                        "tz": {"type": "string"},
                        "every": {"type": "number"},
                        "kwargs": _OBJECT,
                    },
                },
            ),
            "/api/runtime-schedules/{id}": {
                **_change("Delete a runtime schedule", _OBJECT, method="delete"),
                "parameters": [
                    _param("id", "path", "the runtime schedule's id, without @", _SCHEDULE_ID)
                ],
            },
            "/api/replicas": _read(
                "Live replicas from the roll in the broker",
                {
                    "type": "object",
                    "required": ["items"],
                    "properties": {
                        "quiet_after": {
                            "type": "number",
                            "description": "seconds without a beat after which a replica "
                            "drops off the roll",
                        },
                        "note": {"type": "string", "description": "why the roll is empty"},
                        "items": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/Replica"},
                        },
                    },
                },
            ),
            "/api/queues": _read(
                "The broker's counts now, the job first in line, the outbox as the relays last "
                "counted it, and the last hour's samples",
                {
                    "type": "object",
                    "required": [
                        "queue",
                        "counts",
                        "oldest_waiting",
                        "outbox",
                        "waiting_listed",
                        "samples",
                        "sample_every",
                    ],
                    "properties": {
                        "queue": {"type": "string"},
                        "counts": _or_null("QueueStats"),
                        "oldest_waiting": _or_null("OldestWaiting"),
                        "outbox": _or_null("OutboxSeen"),
                        "waiting_listed": {"type": "boolean"},
                        "samples": {
                            "type": "array",
                            "items": {"type": "object", "description": "the counts at 'at'"},
                        },
                        "sample_every": {"type": "number"},
                    },
                },
            ),
            "/api/dead-letters": _read(
                "Dead letters, newest first, searched and paged",
                _listed("DeadLetter"),
                parameters=_PAGE,
            ),
            "/api/dead-letters/requeue": _change(
                "Put dead letters back on the queue, then remove them", _SETTLED, _KEYS
            ),
            "/api/dead-letters/purge": _change("Remove dead letters", _SETTLED, _KEYS),
            "/api/jobs": _read(
                "Jobs by state: waiting, delayed and retrying (first in line first), "
                "running (with replica and how long, oldest first), the latest finished "
                "and failed attempts, dead letters (newest first)",
                {
                    "type": "object",
                    "required": ["state", "total", "offset", "items"],
                    "properties": {
                        "state": {"enum": list(STATES)},
                        "total": {"type": "integer"},
                        "offset": {"type": "integer"},
                        "items": {
                            "type": "array",
                            "items": {
                                "anyOf": [
                                    {"$ref": "#/components/schemas/WaitingJob"},
                                    {"$ref": "#/components/schemas/RunningJob"},
                                    {"$ref": "#/components/schemas/SettledRun"},
                                    {"$ref": "#/components/schemas/DeadJob"},
                                ]
                            },
                        },
                    },
                },
                parameters=[
                    {
                        **_param("state", "query", "which jobs", {"enum": list(STATES)}),
                        "required": True,
                    },
                    _param(
                        "job",
                        "query",
                        "only jobs of this name",
                        {"type": "string", "maxLength": 200},
                    ),
                    *_PAGE,
                ],
            ),
            "/api/jobs/cancel-waiting": _change(
                "Cancel every job of a job name that waits, is delayed or waits to retry "
                "(the first 1,000 in line): none of them runs",
                {
                    "type": "object",
                    "required": ["job", "count"],
                    "properties": {
                        "job": {"type": "string"},
                        "count": {"type": "integer", "minimum": 0},
                    },
                },
                {
                    "type": "object",
                    "required": ["job"],
                    "properties": {"job": {"type": "string", "minLength": 1, "maxLength": 200}},
                },
            ),
            "/api/jobs/{id}": {
                **_read("A job's status and result", {"$ref": "#/components/schemas/JobStatus"}),
                "parameters": [_param("id", "path", "the job id enqueue returned", _JOB_ID)],
            },
            "/api/jobs/{id}/cancel": {
                **_change(
                    "Cancel: a waiting job never runs, a running one is stopped",
                    {"type": "object", "properties": {"cancelled": {"type": "boolean"}}},
                ),
                "parameters": [_param("id", "path", "the job id enqueue returned", _JOB_ID)],
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "m_console"},
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}},
                },
                "ScheduleState": schema_of(PausedSchedule),
                "Schedule": schema_of(ScheduleRow),
                "SettledRun": schema_of(SettledRun, duration=float | None),
                "RunningJob": schema_of(RunningJob, running_for=float),
                "QueueStats": schema_of(QueueStats),
                "OldestWaiting": schema_of(OldestWaiting),
                "OutboxSeen": schema_of(OutboxSeen),
                "WaitingJob": schema_of(HeldJob),
                "DeadJob": schema_of(DeadJob),
                "Replica": schema_of(Replica, age=float, jobs=dict[str, int]),
                "DeadLetter": schema_of(DeadLetterRow),
                "JobStatus": {
                    **(status := schema_of(JobStatus)),
                    "required": [*status["required"], "runs"],
                    "properties": {
                        **status["properties"],
                        "runs": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/SettledRun"},
                        },
                    },
                },
            },
        },
    }


_KEYS = {
    "type": "object",
    "description": "the dead letters to settle: keys (from the listing) or job (all of it)",
    "properties": {
        "keys": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "maxItems": 1000,
        },
        "job": {"type": "string", "minLength": 1, "maxLength": 200},
    },
    "oneOf": [{"required": ["keys"]}, {"required": ["job"]}],
}
_SETTLED = {
    "type": "object",
    "required": ["done", "not_found", "count"],
    "properties": {
        "done": {"type": "array", "items": {"type": "string"}},
        "not_found": {"type": "array", "items": {"type": "string"}},
        "count": {"type": "integer"},
    },
}
