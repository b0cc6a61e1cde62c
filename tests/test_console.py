"""m console as operators run it: a process of its own beside two ticking ``m worker``
replicas on Redis and on NATS, asked over HTTP and driven in Debian's Chromium.

The API lists the schedules with their next slot and both replicas, answers for the
queue and describes itself; a pause without the token is refused, with it no slot of
the schedule runs until resume. In the browser the page loads without console errors,
shows the schedules, pauses and resumes them (the replicas obey), and requeues a dead
letter, which then runs.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Page, sync_playwright

from framework_m_core.adapters.registry import connected, open_broker
from framework_m_core.testing import namespace
from framework_m_core.testing.namespaces import with_option
from framework_m_core.testing.scenarios import RECORDER_APP, Process, Processes, stop_all

from .brokers import free_port

pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]

T = TypeVar("T")
SERVERS = ["redis://127.0.0.1:6379/0", "nats://127.0.0.1:4222"]
TOKEN = "console-test-token-0123456789"
CHROMIUM = "/usr/bin/chromium"
# As root, without the sandbox; no calls home from a machine without internet.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Console:
    """The console process's HTTP API."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        host: str | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if host is not None:
            request.add_header("Host", host)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=15) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, (path, status, body)
        return body

    def wait_up(self, process: Process, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get("/api/openapi.json")
                return
            except (urllib.error.URLError, ConnectionError):
                assert process.proc.poll() is None, f"m console exited:\n{process.output}"
                assert time.monotonic() < deadline, f"m console not up:\n{process.output}"
                time.sleep(0.2)


def steered_slots(log: Path) -> list[int]:
    """The slots of ``steered`` the replicas ran, from the recorder's steer log."""
    if not log.exists():
        return []
    return [
        int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("steered ")
    ]


def wait_for_steered_after(log: Path, after: float, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not [s for s in steered_slots(log) if s > after]:
        assert time.monotonic() < deadline, f"no slot of steered ran after {after:.1f}"
        time.sleep(0.1)


def in_a_thread(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end in a thread of its own: Playwright's sync API keeps an
    event loop running in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(work())).result()


def poll(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.2)
    return found


@pytest.fixture
def page() -> Iterator[tuple[Page, list[str]]]:
    assert shutil.which("chromium"), "chromium is missing: apt-get install chromium (.ci/run does)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.set_default_timeout(30_000)
            yield tab, errors
        finally:
            browser.close()


@pytest.mark.parametrize("server", SERVERS, ids=["redis", "nats"])
def test_the_console_lists_and_steers_a_fleet_over_http_and_in_a_browser(
    procs: Processes, server: str, tmp_path: Path, page: tuple[Page, list[str]]
) -> None:
    ns = namespace(server)
    url = with_option(ns.url(), "dedup_window", 30)
    steer, status = tmp_path / "steer.log", tmp_path / "status.log"
    status.touch()
    env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_STEER_LOG": str(steer)}
    env["FM_STATUS_LOG"] = str(status)
    env["FM_OVERLAP_LOG"] = str(tmp_path / "overlap.log")
    env["FM_SLOW_LOG"] = str(tmp_path / "slow.log")
    try:
        outbox = f"sqlite:///{tmp_path / 'app.db'}"  # the relays' count shows on the page
        workers = procs.workers(url, 2, "--outbox-url", outbox, env=env)
        port = free_port()
        process = procs.m(
            "console", "--app", RECORDER_APP, "--broker", url, "--http", f"127.0.0.1:{port}",
            "--sample-every", "1", env={**env, "M_CONSOLE_TOKEN": TOKEN},
        )  # fmt: skip
        console = Console(port)
        console.wait_up(process)
        _api_lists_the_fleet(console, workers)
        _a_pause_needs_the_token_and_holds_every_slot(console, workers, steer)
        _the_page_shows_pauses_and_resumes(page, console, workers, steer)
        _the_page_requeues_a_dead_letter(page, console, url, status, tmp_path / "marker")
        _the_page_shows_a_schedule_s_history(page, console, workers)
        _the_page_lists_jobs_by_state(page, console, url)
        _the_overview_shows_the_outbox(page, console)
        _pictures(page)
        assert TOKEN not in process.output
        stop_all(workers)
        _the_page_lists_and_cancels_waiting_jobs(page, console, url)
        process.signal(signal.SIGTERM)
        assert process.wait(20) == 0, process.output
    finally:
        in_a_thread(ns.drop)


def _api_lists_the_fleet(console: Console, workers: list[Process]) -> None:
    schedules = console.get("/api/schedules")["items"]
    names = {s["name"] for s in schedules}
    assert {"record", "steered", "hourly"} <= names
    assert all(s["next_slot"] > time.time() - 2 for s in schedules)
    replicas = poll(
        "both replicas on the roll",
        lambda: len(found := console.get("/api/replicas")["items"]) == 2 and found,
    )
    assert {r["pid"] for r in replicas} == {w.pid for w in workers}
    assert all(r["ticking"] for r in replicas)
    queues = console.get("/api/queues")
    assert queues["counts"]["dead_letters"] == 0
    poll("a queue sample", lambda: console.get("/api/queues")["samples"])
    paths = console.get("/api/openapi.json")["paths"]
    for path in ("/api/schedules", "/api/replicas", "/api/queues", "/api/dead-letters"):
        assert path in paths
    assert "/api/schedules/{name}/pause" in paths
    port = console.base.rsplit(":", 1)[1]
    for path in ("/api/dead-letters", "/api/replicas"):  # a rebound name reads nothing
        status, said = console.call("GET", path, host=f"rebound.example:{port}")
        assert (status, list(said)) == (400, ["error"]), (path, said)


def _a_pause_needs_the_token_and_holds_every_slot(
    console: Console, workers: list[Process], steer: Path
) -> None:
    status, _ = console.call("POST", "/api/schedules/steered/pause", {"reason": "api"})
    assert status == 401
    status, said = console.call("POST", "/api/schedules/steered/pause", {}, token="x" * 20)
    assert status == 401, said
    wait_for_steered_after(steer, time.time())  # running before the pause
    status, said = console.call(
        "POST", "/api/schedules/steered/pause", {"reason": "api"}, token=TOKEN
    )
    assert status == 200, said
    paused = time.time()
    for w in workers:  # each replica says so at its next tick
        w.wait_for(r"steered: paused \(api\)", 1, 15)
    time.sleep(2.5)  # slots that must not run come and go
    resuming = time.time()
    status, said = console.call("POST", "/api/schedules/steered/resume", {}, token=TOKEN)
    assert status == 200, said
    during = [s for s in steered_slots(steer) if paused + 1 < s < resuming]
    assert not during, f"slots ran while paused: {during}"
    wait_for_steered_after(steer, resuming)


def _the_page_shows_pauses_and_resumes(
    page: tuple[Page, list[str]], console: Console, workers: list[Process], steer: Path
) -> None:
    tab, errors = page
    tab.goto(console.base + "/")
    _the_page_opens_on_the_overview(tab, workers)
    tab.click("nav button[data-tab=schedules]")
    row = tab.locator("#schedules tbody tr[data-name='steered']")
    row.wait_for()
    shown = tab.locator("#schedules tbody td.name").all_inner_texts()
    assert {"record", "steered", "hourly"} <= set(shown)
    assert row.locator("button", has_text="Pause").is_hidden()  # read only until signed in
    tab.fill("#token", TOKEN)
    tab.click("#sign-in button[type=submit]")
    tab.locator("#signed-in").wait_for()
    tab.once("dialog", lambda dialog: dialog.accept("from the page"))
    row.locator("button", has_text="Pause").click()
    paused = time.time()
    row.locator(
        "td.state", has_text="paused (from the page) by console (signed-in page from"
    ).wait_for()
    for w in workers:
        w.wait_for(r"steered: paused \(from the page\)", 1, 15)
    time.sleep(2.5)
    resuming = time.time()
    row.locator("button", has_text="Resume").click()
    row.locator("td.state", has_text="active").wait_for()
    during = [s for s in steered_slots(steer) if paused + 1 < s < resuming]
    assert not during, f"slots ran while paused from the page: {during}"
    wait_for_steered_after(steer, math.ceil(resuming))
    tab.click("nav button[data-tab=replicas]")
    tab.locator("#replicas tbody tr").nth(1).wait_for()
    assert errors == [], errors


def _the_page_requeues_a_dead_letter(
    page: tuple[Page, list[str]], console: Console, url: str, status: Path, marker: Path
) -> None:
    tab, errors = page

    async def enqueue() -> str:
        async with connected(open_broker(url)) as broker:
            return await broker.enqueue("fails_until", marker=str(marker))

    job_id = in_a_thread(enqueue)
    poll(
        "the job dead-lettered",
        lambda: console.get(f"/api/dead-letters?q={job_id}")["total"] == 1,
    )
    tab.click("nav button[data-tab=dead-letters]")
    tab.fill("#dead-letters-q", job_id)
    row = tab.locator("#dead-letters tbody tr", has_text=job_id)
    row.wait_for()
    assert "is missing" in row.inner_text()
    marker.touch()  # from now on the job succeeds
    row.locator("input[type=checkbox]").check()
    drawn = int(tab.locator("main").get_attribute("data-refreshes") or 0)
    tab.fill("#dead-letters-q", job_id + " ")  # the list is drawn again...
    poll(
        "the list drawn again",
        lambda: int(tab.locator("main").get_attribute("data-refreshes") or 0) > drawn,
    )
    assert row.locator("input[type=checkbox]").is_checked()  # ...and the choice stays
    tab.once("dialog", lambda dialog: dialog.accept())  # "Requeue 1 dead letter(s)?"
    tab.click("#requeue")
    tab.locator("#message", has_text="Requeued 1 dead letter(s)").wait_for()
    poll("the requeued job ran", lambda: f"fails_until {job_id}" in status.read_text())
    assert console.get(f"/api/dead-letters?q={job_id}")["total"] == 0
    _the_page_requeues_every_dead_letter_of_a_job(tab, console, url, status, marker)
    assert errors == [], errors


def _the_page_requeues_every_dead_letter_of_a_job(
    tab: Page, console: Console, url: str, status: Path, marker: Path
) -> None:
    """Two dead letters of fails_until and one of always_fails: a requeue of the job
    fails_until, confirmed with its count, requeues exactly those two, and they run."""
    marker.unlink()

    async def enqueue() -> tuple[list[str], str]:
        async with connected(open_broker(url)) as broker:
            ids = [await broker.enqueue("fails_until", marker=str(marker)) for _ in range(2)]
            return ids, await broker.enqueue("always_fails")

    ids, other = in_a_thread(enqueue)
    poll(
        "three dead letters",
        lambda: (
            {d["job_id"] for d in console.get("/api/jobs?state=dead&limit=200")["items"]}
            >= {*ids, other}
        ),
    )
    dead_before = console.get("/api/jobs?state=dead&job=always_fails&limit=200")["total"]
    marker.touch()
    asked = _confirmed(tab, "#dead-job", "fails_until", "#requeue-job")
    tab.locator("#message", has_text="Requeued 2 dead letter(s) of fails_until").wait_for()
    assert asked == ["Requeue all 2 dead letter(s) of fails_until?"]
    for job_id in ids:
        poll("a requeued job ran", lambda j=job_id: f"fails_until {j}" in status.read_text())
    assert console.get("/api/jobs?state=dead&job=fails_until")["total"] == 0
    left = console.get("/api/jobs?state=dead&job=always_fails&limit=200")
    assert left["total"] == dead_before
    assert other in {d["job_id"] for d in left["items"]}


def _the_page_shows_a_schedule_s_history(
    page: tuple[Page, list[str]], console: Console, workers: list[Process]
) -> None:
    """``overlapping`` runs 2.5 s every second with overlap="skip": its history holds
    runs and skips, each with the replica that settled it, and a skip is not shown as a
    failure."""
    tab, errors = page
    roll = {r["id"] for r in console.get("/api/replicas")["items"]}

    def both() -> list[dict[str, Any]] | None:
        found = console.get("/api/schedules/overlapping/history")["items"]
        return found if {"succeeded", "skipped"} <= {r["outcome"] for r in found} else None

    runs = poll("a run and a skip of overlapping in its history", both)
    assert {r["replica"] for r in runs} <= roll
    assert all(r["duration"] >= 2.5 for r in runs if r["outcome"] == "succeeded")
    assert all(r["duration"] is None for r in runs if r["outcome"] == "skipped")
    tab.click("nav button[data-tab=schedules]")
    tab.fill("#schedules-q", "")
    row = tab.locator("#schedules tbody tr[data-name='overlapping']")
    row.locator("button.link").click()
    history = tab.locator("#history")
    history.locator("h2", has_text="Last runs of overlapping").wait_for()
    skipped = history.locator("td.outcome.skipped").first
    skipped.wait_for()
    assert skipped.inner_text() == "skipped: previous run still going"
    succeeded = history.locator("td.outcome.succeeded").first
    succeeded.wait_for()
    shown = set(history.locator("tbody tr td:nth-child(3)").all_inner_texts())
    assert shown <= roll
    assert shown
    bad = tab.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--bad')")
    assert bad.strip()
    colour = skipped.evaluate("e => getComputedStyle(e).color")
    failed = tab.evaluate(
        "() => { const e = document.createElement('span'); e.className = 'failed';"
        " document.body.append(e); const c = getComputedStyle(e).color; e.remove(); return c; }"
    )
    assert colour != failed, "a skip by overlap is shown in the colour of a failure"
    shots = os.environ.get("FM_SCREENSHOTS")
    if shots:  # hatch run screenshots: the pictures of docs/console.md
        Path(shots).mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(Path(shots) / "schedules.png"), full_page=True)
    assert errors == [], errors


def _the_page_lists_jobs_by_state(page: tuple[Page, list[str]], console: Console, url: str) -> None:
    """Two long runs are listed as running with their replicas, a job that fails as
    failed and dead; a job's id opens its status."""
    tab, errors = page
    roll = {r["id"] for r in console.get("/api/replicas")["items"]}

    async def enqueue() -> tuple[list[str], str, str]:
        async with connected(open_broker(url)) as broker:
            slow = [await broker.enqueue("slow", seconds=8.0) for _ in range(2)]
            later = await broker.enqueue_in(3600, "slow", seconds=0.1)
            return slow, await broker.enqueue("always_fails"), later

    slow, failing, later = in_a_thread(enqueue)
    delayed = console.get("/api/jobs?state=delayed")["items"]
    assert [d["job_id"] for d in delayed] == [later]
    assert delayed[0]["due_at"] > time.time() + 3500
    running = poll(
        "both slow jobs listed as running",
        lambda: (
            len(found := console.get("/api/jobs?state=running&job=slow")["items"]) == 2 and found
        ),
    )
    assert {r["job_id"] for r in running} == set(slow)
    assert {r["replica"] for r in running} <= roll
    poll(
        "the failing job listed as dead",
        lambda: console.get(f"/api/jobs?state=dead&q={failing}")["total"] == 1,
    )
    tab.click("nav button[data-tab=jobs]")
    for job_id in slow:
        tab.locator(f"#job-list tbody tr[data-job-id='{job_id}']").wait_for()
    shown = tab.locator("#job-list tbody tr", has_text=slow[0])
    assert shown.locator("td").last.inner_text() in roll  # the replica column
    shots = os.environ.get("FM_SCREENSHOTS")
    if shots:
        tab.screenshot(path=str(Path(shots) / "jobs.png"), full_page=True)
    tab.click("#jobs .states button[data-state=delayed]")
    tab.locator(f"#job-list tbody tr[data-job-id='{later}']").wait_for()
    tab.click("#jobs .states button[data-state=failed]")
    row = tab.locator(f"#job-list tbody tr[data-job-id='{failing}']")
    row.wait_for()
    assert "failed, dead-lettered" in row.inner_text()
    assert "RuntimeError: failing on purpose" in row.inner_text()
    tab.click("#jobs .states button[data-state=dead]")
    row.wait_for()
    row.locator("button.link").click()
    tab.locator("#jobs dl.job dd.failed").wait_for()
    trace = tab.locator("#job-traceback")
    trace.wait_for()
    assert "raise RuntimeError" in trace.inner_text()
    assert trace.inner_text().endswith("RuntimeError: failing on purpose")
    attempt = tab.locator("#job-runs tbody tr")
    attempt.first.wait_for()
    assert attempt.count() == 1
    assert "failed, dead-lettered" in attempt.first.inner_text()
    assert errors == [], errors


def _the_page_lists_and_cancels_waiting_jobs(
    page: tuple[Page, list[str]], console: Console, url: str
) -> None:
    """With the workers stopped, jobs enqueued wait: the page lists them first in line
    first, and cancels every waiting job of one job (after a confirmation that counts
    them) and no other."""
    tab, errors = page

    async def enqueue() -> tuple[list[str], str]:
        async with connected(open_broker(url)) as broker:
            marked = [await broker.enqueue("marked") for _ in range(3)]
            return marked, await broker.enqueue("add", a=1, b=2)

    marked, other = in_a_thread(enqueue)
    tab.click("nav button[data-tab=overview]")
    oldest = tab.locator("#overview .tiles dt", has_text="oldest waiting").locator("+ dd")
    oldest.filter(has_text="s (marked)").wait_for()
    assert console.get("/api/queues")["oldest_waiting"]["job_id"] == marked[0]
    tab.click("nav button[data-tab=jobs]")
    tab.click("#jobs .states button[data-state=waiting]")
    tab.fill("#jobs-q", "marked")
    tab.locator("#jobs .shown", has_text="1-3 of 3").wait_for()
    shown = tab.locator("#job-list tbody tr").evaluate_all("rows => rows.map(r => r.dataset.jobId)")
    assert shown == marked
    asked = _confirmed(tab, "#waiting-job", "marked", "#cancel-waiting")
    tab.locator("#message", has_text="Cancelled 3 waiting job(s) of marked").wait_for()
    assert asked == ["Cancel all 3 waiting, delayed and retrying job(s) of marked?"]
    tab.locator("#jobs .shown", has_text="none").wait_for()
    assert [console.get(f"/api/jobs/{job_id}")["state"] for job_id in marked] == ["cancelled"] * 3
    waiting = console.get("/api/jobs?state=waiting")["items"]
    assert other in [w["job_id"] for w in waiting]
    assert not set(marked) & {w["job_id"] for w in waiting}
    assert errors == [], errors


def _confirmed(tab: Page, field: str, job: str, action: str) -> list[str]:
    """Name ``job`` in ``field``, click ``action`` and accept its confirmation; the
    questions asked (filled in as the page asks them)."""
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    tab.once("dialog", accept)
    tab.fill(field, job)
    tab.click(action)
    return asked


def _the_page_opens_on_the_overview(tab: Page, workers: list[Process]) -> None:
    """The overview: what the live replicas settled, throughput over time on labelled
    axes, and each replica with what it runs."""
    tab.locator("#overview-replicas tbody tr").nth(len(workers) - 1).wait_for()
    shown = tab.locator("#overview-replicas tbody tr td:first-child").all_inner_texts()
    assert {int(text.rsplit(":", 1)[1]) for text in shown} == {w.pid for w in workers}
    tiles = tab.locator("#overview .tiles")
    tiles.locator("dt", has_text="settled by the live replicas").wait_for()

    def settled() -> int:
        text = tiles.locator("dt:has-text('settled by the live replicas') + dd").inner_text()
        return int(text) if text.isdigit() else 0

    poll("the replicas' settled deliveries shown", lambda: settled() > 0)
    chart = tab.locator("#throughput")
    poll("a throughput line", lambda: chart.locator("polyline").count() == 2)
    labels = chart.locator("text.axis").all_text_contents()
    assert "jobs/s" in labels
    assert sum(1 for t in labels if len(t) == 8 and t.count(":") == 2) == 3  # the times


def _the_overview_shows_the_outbox(page: tuple[Page, list[str]], console: Console) -> None:
    """The relays' latest count of the outbox table (none waits) is an overview tile."""
    tab, errors = page
    poll("the outbox counted in the roll", lambda: console.get("/api/queues")["outbox"] is not None)
    seen = console.get("/api/queues")["outbox"]
    assert (seen["rows"], seen["failing"]) == (0, 0)
    tab.click("nav button[data-tab=overview]")
    tile = tab.locator("#overview .tiles dt", has_text="outbox rows waiting").locator("+ dd")
    tile.filter(has_text="none").wait_for()
    assert errors == [], errors


def _pictures(page: tuple[Page, list[str]]) -> None:
    """With FM_SCREENSHOTS (hatch run screenshots): the tabs docs/console.md shows."""
    tab, errors = page
    shots = os.environ.get("FM_SCREENSHOTS")
    if not shots:
        return
    for name, ready in (
        ("overview", "#throughput polyline"),
        ("replicas", "#replicas tbody tr"),
        ("queues", "#queue-chart polyline"),
        ("dead-letters", "#dead-letters tbody tr"),
    ):
        tab.click(f"nav button[data-tab={name}]")
        if name == "dead-letters":
            tab.fill("#dead-letters-q", "")  # every one, not the last one searched
        tab.locator(ready).first.wait_for(state="attached")
        tab.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
    assert errors == [], errors
