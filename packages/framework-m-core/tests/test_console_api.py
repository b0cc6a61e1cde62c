"""m console's API in process over memory://: who may read and change, what each route
answers, paging and search, the OpenAPI document. (tests/test_console.py runs it as a
process of its own beside real workers, and its page in Chromium.)"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Sequence
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate as validate_spec
from starlette.routing import Route

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.console.auth import Guard
from framework_m_core.console.hosts import HostCheck, allowed_names
from framework_m_core.console.openapi import document
from framework_m_core.console.server import Api, build
from framework_m_core.console.views import Views
from framework_m_core.control import fleet, runtime_schedules, steering
from framework_m_core.control.activity import add_finished
from framework_m_core.control.history import record_runs
from framework_m_core.control.keys import schedule, state
from framework_m_core.control.settled import SettledRun
from framework_m_core.errors import ConfigurationError
from framework_m_core.ports import decode_message
from framework_m_core.ports.store import Record
from framework_m_core.testing import running_worker, synced, wait_until
from framework_m_core.testing.passing import PassingStore

pytestmark = pytest.mark.anyio

TOKEN = "change-token-0123456789"
READ = "read-token-0123456789"
ORIGIN = "http://console.test"


def _app() -> App:
    app = App()

    @app.job(every=60)
    async def minutely(ctx: JobContext) -> None: ...

    @app.job(schedule="0 9 * * *", tz="Europe/Berlin")
    async def morning(ctx: JobContext) -> None: ...

    @app.job(max_attempts=1)
    async def broken(ctx: JobContext, n: int) -> None:
        raise RuntimeError(f"broken {n}")

    @app.job
    async def report(ctx: JobContext, tenant: int) -> None: ...

    return app


async def _client(
    broker: MemoryBroker, change: str | None = TOKEN, read: str | None = None
) -> httpx.AsyncClient:
    """A client of the console over ``broker``, where the app's workers announced it."""
    app = _app()
    await fleet.announce(broker, app.jobs, [spec.name for spec in app.scheduled()])
    asgi = build(Views(broker, app), Guard(change, read), hosts=HostCheck(["console.test"]))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=ORIGIN)


@pytest.fixture
async def client(memory: MemoryBroker) -> AsyncIterator[httpx.AsyncClient]:
    async with await _client(memory) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_reads_are_open_and_changes_need_the_change_token(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    listed = await client.get("/api/schedules")
    assert listed.status_code == 200
    assert [s["name"] for s in listed.json()["items"]] == ["minutely", "morning"]
    for headers in ({}, bearer("wrong-token-0123456789"), {"Authorization": "Basic x"}):
        refused = await client.post("/api/schedules/minutely/pause", headers=headers)
        assert refused.status_code == 401, refused.text
    assert not (await steering.read(memory, "minutely")).paused  # nothing changed
    done = await client.post(
        "/api/schedules/minutely/pause", json={"reason": "incident"}, headers=bearer(TOKEN)
    )
    assert done.status_code == 200, done.text
    assert (done.json()["paused"], done.json()["reason"]) == (True, "incident")
    assert (await steering.read(memory, "minutely")).paused
    resumed = await client.post("/api/schedules/minutely/resume", headers=bearer(TOKEN))
    assert resumed.json()["paused"] is False


async def test_without_a_change_token_nothing_changes_and_only_loopback_is_served(
    memory: MemoryBroker,
) -> None:
    async with await _client(memory, change=None) as c:
        refused = await c.post("/api/schedules/minutely/pause", headers=bearer(TOKEN))
        assert refused.status_code == 403
        assert "M_CONSOLE_TOKEN" in refused.json()["error"]
        assert (await c.get("/api/session")).json()["changes_allowed"] is False
    guard = Guard(None, None)
    for host in ("127.0.0.1", "::1", "localhost"):
        guard.check_bind(host)
    for host in ("0.0.0.0", "192.0.2.7", "::", "console.example"):
        with pytest.raises(ConfigurationError, match="loopback only"):
            guard.check_bind(host)
    Guard(TOKEN, None).check_bind("0.0.0.0")
    with pytest.raises(ConfigurationError, match="at least 16"):
        Guard("short", None)


async def test_a_read_token_guards_reads_and_changes_nothing(memory: MemoryBroker) -> None:
    async with await _client(memory, read=READ) as c:
        assert (await c.get("/api/schedules")).status_code == 401
        assert (await c.get("/api/openapi.json")).status_code == 401
        assert (await c.get("/api/schedules", headers=bearer(READ))).status_code == 200
        assert (await c.get("/api/schedules", headers=bearer(TOKEN))).status_code == 200
        refused = await c.post("/api/schedules/minutely/pause", headers=bearer(READ))
        assert refused.status_code == 403
        assert (await c.get("/api/session")).status_code == 200  # the page asks first


async def test_the_page_signs_in_to_a_strict_httponly_cookie_and_sends_its_csrf_token(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    wrong = await client.post("/api/session", json={"token": "nope"})
    assert wrong.status_code == 401
    signed = await client.post("/api/session", json={"token": TOKEN}, headers={"Origin": ORIGIN})
    assert signed.status_code == 200
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert TOKEN not in cookie
    assert TOKEN not in signed.text
    csrf = signed.json()["csrf"]
    assert (await client.get("/api/session")).json()["csrf"] == csrf
    no_csrf = await client.post("/api/schedules/minutely/pause")
    assert no_csrf.status_code == 401
    bad_csrf = await client.post(
        "/api/schedules/minutely/pause", headers={"X-CSRF-Token": "x" * 43}
    )
    assert bad_csrf.status_code == 401
    other_site = await client.post(
        "/api/schedules/minutely/pause",
        headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"},
    )
    assert other_site.status_code == 403
    behind_tls = await client.post(  # the page over https, the console behind a proxy
        "/api/schedules/minutely/resume",
        headers={"X-CSRF-Token": csrf, "Origin": "https://console.test"},
    )
    assert behind_tls.status_code == 200
    assert not (await steering.read(memory, "minutely")).paused
    done = await client.post(
        "/api/schedules/minutely/pause", headers={"X-CSRF-Token": csrf, "Origin": ORIGIN}
    )
    assert done.status_code == 200
    foreign = await client.delete("/api/session", headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert (await client.get("/api/session")).json()["signed_in"] is True
    await client.delete("/api/session")
    client.cookies.clear()
    again = await client.post("/api/schedules/minutely/resume", headers={"X-CSRF-Token": csrf})
    assert again.status_code == 401


async def test_bad_input_is_refused_with_why(client: httpx.AsyncClient) -> None:
    cases = [
        ("/api/schedules/minutely/pause", b"not json", "not JSON"),
        ("/api/schedules/minutely/pause", b"[1]", "JSON object"),
        ("/api/schedules/minutely/pause", b'{"until": "tomorrow"}', "ISO 8601"),
        ("/api/schedules/minutely/pause", b'{"until": 1}', "future"),
        ("/api/schedules/minutely/pause", b'{"reason": 5}', "reason"),
        ("/api/schedules/minutely/trigger", b'{"kwargs": {"m": 1}}', "do not fit"),
        ("/api/schedules/minutely/trigger", b'{"kwargs": []}', "JSON object"),
        ("/api/runtime-schedules", b'{"id": "t1", "job": "report"}', "exactly one"),
        ("/api/runtime-schedules", b'{"id": "bad id", "job": "report", "every": 5}', "id"),
        ("/api/dead-letters/requeue", b'{"keys": []}', "keys"),
        ("/api/dead-letters/requeue", b"{}", "give keys"),
        ("/api/dead-letters/purge", b'{"keys": ["a"], "job": "broken"}', "not both"),
        ("/api/dead-letters/purge", b'{"job": ""}', "job must be"),
        ("/api/jobs/a%20b/cancel", b"{}", "job id"),
        ("/api/jobs/cancel-waiting", b"{}", "job must be"),
        ("/api/jobs/cancel-waiting", b'{"job": 7}', "job must be"),
        ("/api/schedules/minutely/pause", b"{" + b" " * 70_000 + b"}", "at most"),
    ]
    for path, body, said in cases:
        answer = await client.post(path, content=body, headers=bearer(TOKEN))
        assert answer.status_code == 400, (path, body[:40], answer.text)
        assert said in answer.json()["error"], (path, answer.json())
    for query in ("limit=0", "limit=201", "offset=-1", "limit=x", "q=" + "x" * 201):
        answer = await client.get(f"/api/schedules?{query}")
        assert answer.status_code == 400, query
    not_there = [
        ("/api/schedules/nope/pause", b"{}", "'nope' is no schedule of the app"),
        ("/api/schedules/nope/resume", b"{}", "'nope' is no schedule of the app"),
        ("/api/schedules/nope/trigger", b"{}", "'nope' is no schedule of the app"),
        ("/api/schedules/@nope/trigger", b"{}", "there is no runtime schedule 'nope'"),
        ("/api/runtime-schedules", b'{"id": "t1", "job": "nope", "every": 5}', "unknown job"),
        ("/api/jobs/never-enqueued/cancel", b"{}", "no status of job never-enqueued"),
        ("/api/jobs/cancel-waiting", b'{"job": "nope"}', "'nope' is no job any replica"),
    ]
    for path, body, said in not_there:
        answer = await client.post(path, content=body, headers=bearer(TOKEN))
        assert answer.status_code == 404, (path, answer.text)
        assert said in answer.json()["error"], (path, answer.json())
    missing = await client.delete("/api/runtime-schedules/nothing", headers=bearer(TOKEN))
    assert missing.status_code == 404


async def test_a_runtime_schedule_s_trigger_checks_its_kwargs(client: httpx.AsyncClient) -> None:
    made = await client.post(
        "/api/runtime-schedules",
        json={"id": "t2", "job": "broken", "every": 60, "kwargs": {"n": 1}},
        headers=bearer(TOKEN),
    )
    assert made.status_code == 200, made.text
    wrong = await client.post(
        "/api/schedules/@t2/trigger", json={"kwargs": {"m": 2}}, headers=bearer(TOKEN)
    )
    assert wrong.status_code == 400, wrong.text
    assert "do not fit job 'broken'" in wrong.json()["error"]
    right = await client.post(
        "/api/schedules/@t2/trigger", json={"kwargs": {"n": 2}}, headers=bearer(TOKEN)
    )
    assert right.status_code == 200, right.text


async def test_schedules_are_searched_and_paged_and_runtime_ones_set_and_deleted(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    for n in range(120):
        await runtime_schedules.set_schedule(
            memory,
            runtime_schedules.runtime_schedule(
                f"tenant-{n:03d}", "report", every_seconds=3600, kwargs={"tenant": n}
            ),
        )
    first = (await client.get("/api/schedules?limit=50")).json()
    assert first["total"] == 122
    assert len(first["items"]) == 50
    last = (await client.get("/api/schedules?offset=100&limit=50")).json()
    assert [s["name"] for s in last["items"]][-2:] == ["minutely", "morning"]
    found = (await client.get("/api/schedules?q=TENANT-11")).json()
    assert [s["name"] for s in found["items"]] == [f"@tenant-11{d}" for d in range(10)]
    item = found["items"][0]
    assert (item["source"], item["job"], item["kwargs"]) == ("runtime", "report", {"tenant": 110})
    assert item["next_slot"] > time.time()
    made = await client.post(
        "/api/runtime-schedules",
        json={"id": "made", "job": "report", "cron": "*/5 * * * *", "kwargs": {"tenant": 1}},
        headers=bearer(TOKEN),
    )
    assert made.status_code == 200, made.text
    assert (await runtime_schedules.get_schedule(memory, "made")) is not None
    gone = await client.delete("/api/runtime-schedules/made", headers=bearer(TOKEN))
    assert gone.status_code == 200
    assert (await runtime_schedules.get_schedule(memory, "made")) is None
    berlin = (await client.get("/api/schedules?q=morning")).json()["items"][0]
    assert berlin["zone"] == "Europe/Berlin"


class _CountingStore(PassingStore):
    """Counts the schedule records read."""

    schedule_reads = 0

    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        self.schedule_reads += sum(k.startswith(state(schedule(""))) for k in keys)
        return await super().read(keys)


async def test_a_page_of_thousands_of_schedules_reads_only_its_own_records(
    queue_name: str,
) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    broker._store = counting = _CountingStore(broker._store)  # type: ignore[assignment]
    for n in range(3000):
        schedule = runtime_schedules.runtime_schedule(f"t{n:04d}", "report", every_seconds=60)
        await runtime_schedules.set_schedule(broker, schedule)
    async with await _client(broker) as c:
        page = (await c.get("/api/schedules?offset=2950&limit=50")).json()
        assert page["total"] == 3002
        assert len(page["items"]) == 50
        assert counting.schedule_reads == 50  # the page's, not the 3002
        found = (await c.get("/api/schedules?q=t2999")).json()
        assert [s["name"] for s in found["items"]] == ["@t2999"]


async def test_dead_letters_are_listed_searched_requeued_and_purged(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    app = _app()
    ids = [await memory.enqueue("broken", n=n) for n in range(3)]
    async with running_worker(app, memory, heartbeat=0) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 3, timeout=10)
    listed = (await client.get("/api/dead-letters")).json()
    assert listed["total"] == 3
    assert {d["job_id"] for d in listed["items"]} == set(ids)
    assert all("RuntimeError: broken" in d["reason"] for d in listed["items"])
    one = (await client.get(f"/api/dead-letters?q={ids[1]}")).json()["items"]
    assert [d["job_id"] for d in one] == [ids[1]]
    assert '"broken"' in one[0]["body"]
    requeued = await client.post(
        "/api/dead-letters/requeue", json={"keys": [one[0]["key"], "gone"]}, headers=bearer(TOKEN)
    )
    assert requeued.json() == {"done": [one[0]["key"]], "not_found": ["gone"], "count": 1}
    [back] = await memory.receive(1, 1)
    assert ids[1].encode() in back.body
    await memory.ack(back)
    rest = [d["key"] for d in (await client.get("/api/dead-letters")).json()["items"]]
    assert len(rest) == 2
    purged = await client.post(
        "/api/dead-letters/purge", json={"keys": rest}, headers=bearer(TOKEN)
    )
    assert purged.json()["done"] == sorted(rest)
    assert (await client.get("/api/dead-letters")).json()["total"] == 0


async def test_a_job_id_leads_to_its_status_and_a_cancel(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    job_id = await memory.enqueue_in(60, "report", tenant=1)
    status = (await client.get(f"/api/jobs/{job_id}")).json()
    assert (status["state"], status["job_name"]) == ("scheduled", "report")
    cancelled = await client.post(f"/api/jobs/{job_id}/cancel", headers=bearer(TOKEN))
    assert cancelled.json() == {"job_id": job_id, "cancelled": True}
    assert (await client.get(f"/api/jobs/{job_id}")).json()["state"] == "cancelled"
    unknown = (await client.get("/api/jobs/" + "0" * 32)).json()
    assert unknown["state"] == "unknown"


async def test_replicas_queues_and_the_overview_answer(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    async with running_worker(_app(), memory) as worker:
        assert worker.heartbeat is not None
        beat = worker.heartbeat
        await wait_until(lambda: beat.beats > 0, timeout=5)
        replicas = (await client.get("/api/replicas")).json()["items"]
        assert [r["id"] for r in replicas] == [beat.id]
    await memory.enqueue("report", tenant=3)
    queues = (await client.get("/api/queues")).json()
    assert queues["counts"]["ready"] == 1
    overview = (await client.get("/api/overview")).json()
    assert overview["changes_allowed"] is True
    assert "report" in overview["jobs"]


async def test_the_page_and_its_assets_are_served_with_a_strict_policy(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert "/assets/console.js" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "<script>" not in page.text  # no inline script: the policy forbids it
    for asset in ("console.js", "console.css"):
        assert (await client.get(f"/assets/{asset}")).status_code == 200
    assert (await client.get("/assets/../server.py")).status_code == 404


def test_the_openapi_document_names_every_api_route_and_method() -> None:
    asgi = build(Views(MemoryBroker.from_url("memory://"), None), Guard(TOKEN, None))
    paths = document()["paths"]
    for route in asgi.routes:
        if not isinstance(route, Route) or not route.path.startswith("/api"):
            continue
        path = route.path.replace(":path}", "}")
        assert path in paths, route.path
        for method in (route.methods or set()) - {"HEAD"}:
            assert method.lower() in paths[path], (route.path, method)
    served = {r.path.replace(":path}", "}") for r in asgi.routes if isinstance(r, Route)}
    assert set(paths) <= served
    assert re.fullmatch(r"3\.1\.\d", document()["openapi"])


def test_api_routes_are_guarded_one_way_or_the_other() -> None:
    api = Api(Views(MemoryBroker.from_url("memory://"), None), Guard(TOKEN, None))
    unguarded = {
        r.path for r in api.routes() if isinstance(r, Route) and r.endpoint.__name__ != "guarded"
    }
    assert unguarded == {"/", "/api/session"}


async def test_a_request_for_a_foreign_host_gets_400_and_no_data(memory: MemoryBroker) -> None:
    await memory.enqueue("report", "j1", tenant=7)
    async with await _client(memory) as client:
        assert (await client.get("/api/jobs/j1")).status_code == 200
        rebound = {"Host": "evil.example:8090"}  # a page's own name pointed at the console
        for method, path in [
            ("GET", "/api/jobs/j1"),
            ("GET", "/api/overview"),
            ("GET", "/api/dead-letters"),
            ("GET", "/"),
            ("POST", "/api/session"),
        ]:
            answer = await client.request(method, path, headers=rebound, json={"token": TOKEN})
            assert answer.status_code == 400, (method, path)
            assert answer.json() == {
                "error": "this console does not answer for host 'evil.example:8090': open "
                "it by its address or localhost, or allow the name with --allowed-host"
            }
            assert "set-cookie" not in answer.headers
        for host in ["127.0.0.1:8090", "[::1]:8090", "localhost:8090", "10.0.0.5", "CONSOLE.test"]:
            assert (await client.get("/api/jobs/j1", headers={"Host": host})).status_code == 200


def test_allowed_hosts_are_names_with_an_optional_wildcard() -> None:
    check = HostCheck(allowed_names(["console.example.com, *.ops.example", "", "10.0.0.1"]))
    assert check.allows("console.example.com:443")
    assert check.allows("a.ops.example")
    assert check.allows("b.a.ops.example.")
    assert not check.allows("ops.example")
    assert not check.allows("console.example.com.evil.example")
    assert not check.allows("evil-console.example.com")
    assert not check.allows(None)
    assert not check.allows("")
    assert not check.allows("localhost:http")
    for bad in ["console example", "*.", "a..b", "host:80", "*.*.example", "-a.example"]:
        with pytest.raises(ConfigurationError, match="is not a host name"):
            allowed_names([bad])


async def test_the_openapi_document_bounds_inputs_as_the_server_does(
    client: httpx.AsyncClient,
) -> None:
    paths = document()["paths"]
    for path in ("/api/schedules", "/api/dead-letters"):
        for param in paths[path]["get"]["parameters"]:
            schema, name = param["schema"], param["name"]
            edges: list[tuple[object, bool]] = []
            if "minimum" in schema:
                edges += [(schema["minimum"] - 1, False), (schema["minimum"], True)]
            if "maximum" in schema:
                edges += [(schema["maximum"], True), (schema["maximum"] + 1, False)]
            if "maxLength" in schema:
                edges += [
                    ("q" * schema["maxLength"], True),
                    ("q" * (schema["maxLength"] + 1), False),
                ]
            assert edges, (path, name)
            for value, accepted in edges:
                answer = await client.get(path, params={name: str(value)})
                assert (answer.status_code == 200) is accepted, (path, name, value, answer.text)
    job_id = paths["/api/jobs/{id}"]["parameters"][0]["schema"]["pattern"]
    for candidate in ["j", "a" * 200, "a" * 201, "a b", "é", "x/y", "x/cancel"]:
        answer = await client.get(f"/api/jobs/{quote(candidate, safe='')}")
        documented = re.fullmatch(job_id, candidate) is not None
        assert (answer.status_code == 200) is documented, (candidate, answer.text)
        if documented:
            assert answer.json()["job_id"] == candidate
    cancel = await client.post(f"/api/jobs/{quote('x/y', safe='')}/cancel", headers=bearer(TOKEN))
    assert cancel.status_code == 404  # routed to the cancel of job x/y, which nobody knows
    assert "no status of job x/y is kept" in cancel.json()["error"]
    schedule_id = paths["/api/runtime-schedules/{id}"]["parameters"][0]["schema"]["pattern"]
    body = paths["/api/runtime-schedules"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["properties"]["id"]["pattern"] == schedule_id
    for candidate in ["a", "a" * 100, "a" * 101, "-a", "a b", "a@b"]:
        answer = await client.delete(
            f"/api/runtime-schedules/{quote(candidate, safe='')}", headers=bearer(TOKEN)
        )
        documented = re.fullmatch(schedule_id, candidate) is not None
        assert answer.status_code == (404 if documented else 400), (candidate, answer.text)
    keys = paths["/api/dead-letters/purge"]["post"]["requestBody"]["content"]["application/json"]
    assert keys["schema"]["properties"]["keys"]["minItems"] == 1
    empty = await client.post("/api/dead-letters/purge", json={"keys": []}, headers=bearer(TOKEN))
    assert empty.status_code == 400


async def test_a_schedule_s_history_and_last_run_are_served_as_the_document_says(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    now = time.time()
    for slot, outcome in ((60, "succeeded"), (120, "skipped")):
        started = None if outcome == "skipped" else now - 2
        run = SettledRun(
            f"job-{slot}", "minutely", "host:1:ab12cd", 1, outcome, started, now + slot, None, slot
        )
        assert await record_runs(memory, "minutely", [run])
    found = (await client.get("/api/schedules/minutely/history")).json()
    assert found["name"] == "minutely"
    assert [(r["slot"], r["outcome"], r["replica"]) for r in found["items"]] == [
        (120, "skipped", "host:1:ab12cd"),
        (60, "succeeded", "host:1:ab12cd"),
    ]
    assert found["items"][0]["duration"] is None
    assert found["items"][1]["duration"] == pytest.approx(62, abs=0.01)
    listed = (await client.get("/api/schedules?q=minutely")).json()["items"][0]
    assert listed["last_run"]["outcome"] == "skipped"
    assert (await client.get("/api/schedules?q=morning")).json()["items"][0]["last_run"] is None
    quiet = (await client.get("/api/schedules/morning/history")).json()
    assert quiet == {"name": "morning", "items": []}
    missing = await client.get("/api/schedules/mornin/history")
    assert missing.status_code == 404, missing.text
    doc = document()
    spec = doc["paths"]["/api/schedules/{name}/history"]["get"]["responses"]["200"]
    schema = {**spec["content"]["application/json"]["schema"], "components": doc["components"]}
    jsonschema.validate(found, schema)
    listing = {"$ref": "#/components/schemas/Schedule", "components": doc["components"]}
    jsonschema.validate(listed, listing)
    with pytest.raises(jsonschema.ValidationError):  # a field the type lacks is caught
        jsonschema.validate({**found, "items": [{**found["items"][0], "slot": "x"}]}, schema)


async def test_jobs_are_listed_by_state_searched_paged_and_as_documented(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    now = time.time()
    done = [
        SettledRun(f"id{n}", "report" if n % 2 else "broken", "r:1:aaaaaa", 1,
                    "succeeded" if n % 2 else "dead_lettered", now - 1, now + n,
                    None if n % 2 else "RuntimeError: broken")
        for n in range(10)
    ]  # fmt: skip
    assert await add_finished(memory, "r:1:aaaaaa", done)
    finished = (await client.get("/api/jobs?state=finished&limit=2")).json()
    assert (finished["total"], [i["job_id"] for i in finished["items"]]) == (5, ["id9", "id7"])
    failed = (await client.get("/api/jobs?state=failed&job=broken&offset=4")).json()
    assert (failed["total"], [i["job_id"] for i in failed["items"]]) == (5, ["id0"])
    found = (await client.get("/api/jobs?state=finished&q=ID3")).json()
    assert [i["job_id"] for i in found["items"]] == ["id3"]
    running = (await client.get("/api/jobs?state=running")).json()
    assert (running["total"], running["items"]) == (0, [])
    bad = await client.get("/api/jobs?state=sleeping")
    assert bad.status_code == 400
    assert "state must be one of waiting, delayed, retrying, running" in bad.json()["error"]
    assert (await client.get("/api/jobs")).status_code == 400
    doc = document()
    spec = doc["paths"]["/api/jobs"]["get"]["responses"]["200"]
    schema = {**spec["content"]["application/json"]["schema"], "components": doc["components"]}
    jsonschema.validate(finished, schema)
    jsonschema.validate(failed, schema)


async def test_dead_letters_of_one_job_are_requeued_all_at_once_and_no_others(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    app = _app()

    @app.job(max_attempts=1)
    async def other(ctx: JobContext) -> None:
        raise RuntimeError("other")

    broken = [await memory.enqueue("broken", n=n) for n in range(3)]
    others = [await memory.enqueue("other") for _ in range(2)]
    async with running_worker(app, memory, heartbeat=0) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 5, timeout=10)
    done = await client.post(
        "/api/dead-letters/requeue", json={"job": "broken"}, headers=bearer(TOKEN)
    )
    assert done.status_code == 200, done.text
    assert (done.json()["count"], done.json()["not_found"]) == (3, [])
    back = await memory.receive(10, 1)
    assert sorted(decode_message(d.body).id for d in back) == sorted(broken)
    left = (await client.get("/api/dead-letters")).json()["items"]
    assert sorted(d["job_id"] for d in left) == sorted(others)
    none = await client.post(
        "/api/dead-letters/purge", json={"job": "nosuch"}, headers=bearer(TOKEN)
    )
    assert none.json()["count"] == 0
    assert (await client.get("/api/dead-letters")).json()["total"] == 2


async def test_samples_count_what_the_fleet_settled_since_the_console_started(
    memory: MemoryBroker,
) -> None:
    views = Views(memory, _app())
    await views.sample()
    app = App()

    @app.job
    async def quick(ctx: JobContext) -> None: ...

    @app.job(max_attempts=1)
    async def fails(ctx: JobContext) -> None:
        raise RuntimeError("no")

    for _ in range(5):
        await memory.enqueue("quick")
    await memory.enqueue("fails")
    async with running_worker(app, memory, heartbeat=0.1) as worker:
        assert worker.heartbeat is not None
        await wait_until(lambda: worker.stats.succeeded == 5 and worker.stats.dead_lettered == 1)
        beats = worker.heartbeat.beats
        await wait_until(lambda: worker.heartbeat is not None and worker.heartbeat.beats > beats)
        await views.sample()
        await views.sample()  # nothing more settled: nothing more counted
        listed = (await views.replicas())["items"]
    first, *_, last = views.samples
    assert (first["processed"], first["failed"]) == (0, 0)
    assert (last["processed"], last["failed"]) == (6, 1)
    [replica] = listed
    assert replica["counts"]["succeeded"] == 5
    assert replica["counts"]["dead_lettered"] == 1


async def test_the_openapi_document_bounds_schedule_names_as_the_server_does(
    client: httpx.AsyncClient,
) -> None:
    validate_spec(document())  # the document itself is valid OpenAPI 3.1
    history = document()["paths"]["/api/schedules/{name}/history"]
    name = history["parameters"][0]["schema"]["pattern"]
    for candidate in ["minutely", "a" * 200, "a" * 201, "1a", "@t1", "@" + "t" * 101, "@-t"]:
        answer = await client.get(f"/api/schedules/{quote(candidate, safe='')}/history")
        if re.fullmatch(name, candidate) is None:
            expected = 400
        else:
            expected = 200 if candidate == "minutely" else 404  # no such schedule
        assert answer.status_code == expected, (candidate, answer.text)


async def test_jobs_the_broker_holds_are_listed_as_waiting_delayed_and_retrying(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    retried = await memory.enqueue("broken", n=1)
    [taken] = await memory.receive(1, 1)
    assert decode_message(taken.body).id == retried
    await memory.retry(taken, 120)
    ready = [await memory.enqueue("report", tenant=n) for n in range(2)]
    later = await memory.enqueue_in(600, "report", tenant=9)
    doc = document()
    spec = doc["paths"]["/api/jobs"]["get"]["responses"]["200"]
    schema = {**spec["content"]["application/json"]["schema"], "components": doc["components"]}
    waiting = (await client.get("/api/jobs?state=waiting")).json()
    assert [i["job_id"] for i in waiting["items"]] == ready
    assert all(i["due_at"] is None and i["attempt"] == 1 for i in waiting["items"])
    delayed = (await client.get("/api/jobs?state=delayed")).json()
    assert [i["job_id"] for i in delayed["items"]] == [later]
    assert delayed["items"][0]["due_at"] == pytest.approx(time.time() + 600, abs=5)
    retrying = (await client.get("/api/jobs?state=retrying&job=broken")).json()
    assert [(i["job_id"], i["attempt"]) for i in retrying["items"]] == [(retried, 2)]
    assert retrying["items"][0]["due_at"] == pytest.approx(time.time() + 120, abs=5)
    for answer in (waiting, delayed, retrying):
        jsonschema.validate(answer, schema)
    assert (await client.get("/api/jobs?state=retrying&job=report")).json()["total"] == 0
    queues = (await client.get("/api/queues")).json()
    oldest = queues["oldest_waiting"]
    assert (oldest["job_id"], oldest["job"], queues["waiting_listed"]) == (ready[0], "report", True)
    assert 0 <= oldest["age"] < 60
    while await memory.receive(10, 0.01):  # nothing due waits: none is oldest
        pass
    assert (await client.get("/api/queues")).json()["oldest_waiting"] is None


async def test_every_waiting_delayed_and_retrying_job_of_one_job_is_cancelled_and_no_other(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    retried = await memory.enqueue("report", tenant=0)
    [taken] = await memory.receive(1, 1)
    await memory.retry(taken, 120)
    held = [retried, await memory.enqueue("report", tenant=1)]
    held.append(await memory.enqueue_in(600, "report", tenant=2))
    other = await memory.enqueue("minutely")
    listed = await client.get("/api/jobs?state=waiting&job=report")
    assert listed.json()["total"] == 1
    refused = await client.post("/api/jobs/cancel-waiting", json={"job": "report"})
    assert refused.status_code == 401
    answer = await client.post(
        "/api/jobs/cancel-waiting", json={"job": "report"}, headers=bearer(TOKEN)
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"job": "report", "count": 3}
    statuses = [(await client.get(f"/api/jobs/{job_id}")).json()["state"] for job_id in held]
    assert statuses == ["cancelled"] * 3
    assert (await client.get(f"/api/jobs/{other}")).json()["state"] == "queued"
    for kind in ("waiting", "delayed", "retrying"):  # held by the broker, listed no more
        assert (await client.get(f"/api/jobs?state={kind}&job=report")).json()["total"] == 0
    waiting = (await client.get("/api/jobs?state=waiting")).json()["items"]
    assert [i["job_id"] for i in waiting] == [other]
    again = await client.post(
        "/api/jobs/cancel-waiting", json={"job": "report"}, headers=bearer(TOKEN)
    )
    assert again.json()["count"] == 0


async def test_a_failed_job_s_page_has_its_traceback_and_its_attempts(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    job_id = await memory.enqueue("broken", n=3)

    async def attempted() -> bool:
        return bool((await client.get(f"/api/jobs/{job_id}")).json()["runs"])

    async with running_worker(_app(), memory):
        await wait_until(attempted, timeout=10)
    found = (await client.get(f"/api/jobs/{job_id}")).json()
    assert (found["state"], found["error"]) == (
        "failed",
        "failed after 1 attempt(s): RuntimeError: broken 3",
    )
    trace = found["traceback"]
    assert trace.startswith("Traceback (most recent call last):"), trace
    assert 'raise RuntimeError(f"broken {n}")' in trace
    assert trace.endswith("RuntimeError: broken 3")
    [run] = found["runs"]
    assert (run["job_id"], run["attempt"], run["outcome"]) == (job_id, 1, "dead_lettered")
    doc = document()
    spec = doc["paths"]["/api/jobs/{id}"]["get"]["responses"]["200"]
    schema = {**spec["content"]["application/json"]["schema"], "components": doc["components"]}
    jsonschema.validate(found, schema)
    waiting = (await client.get(f"/api/jobs/{await memory.enqueue('report', tenant=1)}")).json()
    assert (waiting["traceback"], waiting["runs"]) == (None, [])
    jsonschema.validate(waiting, schema)


def _strict(node: object) -> object:
    """The document's schemas, each object with properties closed to any other field."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


async def test_every_answer_has_exactly_the_fields_its_documented_type_has(
    client: httpx.AsyncClient, memory: MemoryBroker
) -> None:
    async with running_worker(_app(), memory) as worker:
        failed = await memory.enqueue("broken", n=1)
        await wait_until(lambda: worker.stats.dead_lettered == 1, timeout=10)

        async def rolled() -> bool:
            return bool((await client.get("/api/replicas")).json()["items"])

        await wait_until(rolled, timeout=10)
        roll = (await client.get("/api/replicas")).json()
    await memory.enqueue("report", tenant=1)
    await memory.enqueue_in(600, "report", tenant=2)
    run = SettledRun("id1", "minutely", "r:1:aaaaaa", 1, "succeeded", time.time() - 1, time.time())
    assert await record_runs(memory, "minutely", [run])
    doc = document()
    components = _strict(doc["components"])

    def check(path: str, method: str, answer: dict[str, object]) -> None:
        spec = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]
        jsonschema.validate(answer, {**_strict(spec["schema"]), "components": components})  # type: ignore[dict-item]

    reads = {
        "/api/schedules": "/api/schedules",
        "/api/dead-letters": "/api/dead-letters",
        "/api/queues": "/api/queues",
        "/api/jobs/{id}": f"/api/jobs/{failed}",
    }
    for path, url in reads.items():
        answer = (await client.get(url)).json()
        check(path, "get", answer)
        assert answer.get("items", [answer]), path
    check("/api/replicas", "get", roll)
    for kind in ("waiting", "delayed", "failed", "dead"):
        answer = (await client.get(f"/api/jobs?state={kind}")).json()
        assert answer["items"], kind
        check("/api/jobs", "get", answer)
    paused = await client.post("/api/schedules/minutely/pause", json={}, headers=bearer(TOKEN))
    check("/api/schedules/{name}/pause", "post", paused.json())
    resumed = await client.post("/api/schedules/minutely/resume", json={}, headers=bearer(TOKEN))
    check("/api/schedules/{name}/resume", "post", resumed.json())
    listed = (await client.get("/api/schedules?q=minutely")).json()
    assert listed["items"][0]["last_run"]["duration"] is not None
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        check("/api/schedules/{name}/pause", "post", {**paused.json(), "stray": 1})
