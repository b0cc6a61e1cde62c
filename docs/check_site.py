"""Check a built site: its pages are there and say what they must.

    python docs/check_site.py docs/_build/html

Run by ``hatch run docs:build`` after Sphinx; exits 1 naming each problem.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

PAGES = [
    "index",
    "getting-started",
    "jobs-and-schedules",
    "running-workers",
    "brokers/index",
    "brokers/memory",
    "brokers/nats",
    "brokers/redis",
    "brokers/rabbitmq",
    "operating",
    "overlap-and-limits",
    "steering-schedules",
    "runtime-schedules",
    "job-status",
    "console",
    "testing",
    "writing-an-adapter",
    "api/index",
    "api/ports",
    "api/core",
    "api/testing",
    "benchmarks",
    "development",
    "glossary",
    "changelog",
]

# (page, text it must contain), on the page's text with tags removed.
CONTENT = [
    ("api/ports", "JobQueueProtocol"),
    ("api/ports", "returns normally with the original job's id"),
    (
        "api/ports",
        "a duplicate inside the window (counted from this call) returns the original's id",
    ),
    ("api/core", "class framework_m_core.App"),
    ("api/testing", "BrokerContract"),
    ("jobs-and-schedules", "a wall time that occurs twice on a fall-back day fires once"),
    ("jobs-and-schedules", "a replica never enqueues a slot more than grace seconds late"),
    ("running-workers", "m worker --no-scheduler"),
    ("brokers/memory", "visibility_timeout"),
    ("brokers/nats", "max_ack_pending"),
    ("brokers/redis", "max_connections"),
    ("brokers/rabbitmq", "cache_persistence"),
    ("writing-an-adapter", "ConsumeContract.test_"),
    ("writing-an-adapter", "dead_letter_inspection"),
    ("brokers/index", "delayed_enqueue"),
    ("benchmarks", "drain no-op jobs"),
    ("glossary", "settle"),
    ("steering-schedules", "catchup_window"),
    ("runtime-schedules", "tick:@{id}:{slot}"),
    ("changelog", "[Unreleased]"),
    ("changelog", "[0.1.0]"),
]

# Anchors autodoc must have made on the API pages.
ANCHORS = [
    ("api/ports", "framework_m_core.ports.protocols.JobQueueProtocol.enqueue"),
    ("api/ports", "framework_m_core.ports.protocols.BrokerProtocol"),
    ("api/ports", "framework_m_core.ports.base.BaseBroker"),
    ("api/core", "framework_m_core.Worker"),
    ("api/testing", "framework_m_core.testing.drain"),
]

# Each broker's URL options are listed on its own page and nowhere else on the site.
OPTION_TABLES = {
    "brokers/nats": "| `max_ack_pending` |",
    "brokers/redis": "| `max_connections` |",
    "brokers/rabbitmq": "| `cache_persistence` |",
}


class _Text(HTMLParser):
    """The text of a page's main content, without scripts and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def text_of(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    text = "".join(parser.parts).replace("\u2019", "'").replace("\u00a0", " ")
    return re.sub(r"\s+", " ", text)


def problems(site: Path) -> list[str]:
    found = []
    html: dict[str, str] = {}
    for page in PAGES:
        path = site / f"{page}.html"
        if not path.is_file():
            found.append(f"missing page {page}.html")
        else:
            html[page] = path.read_text()
    for page, needle in CONTENT:
        if page in html and needle.lower() not in text_of(html[page]).lower():
            found.append(f"{page}.html does not say {needle!r}")
    for page, anchor in ANCHORS:
        if page in html and f'id="{anchor}"' not in html[page]:
            found.append(f"{page}.html has no anchor {anchor!r}")
    sources = site / "_sources"
    for page, row in OPTION_TABLES.items():
        holders = sorted(
            str(p.relative_to(sources)) for p in sources.rglob("*.txt") if row in p.read_text()
        )
        if holders != [f"{page}.md.txt"]:
            found.append(f"the option row {row!r} is in {holders}, not only in {page}.md")
    return found


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "docs/_build/html")
    found = problems(site)
    for problem in found:
        print(f"check_site: {problem}", file=sys.stderr)
    if not found:
        print(f"check_site: {site}: {len(PAGES)} pages, all present and complete")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
