"""A property-based run over the console's OpenAPI document (schemathesis) against a
real ``m console`` process on Redis, with the change token: of the hundreds of requests
it makes from the document (valid and not, reads and changes), none gets a server
error."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from framework_m_core.console.openapi import document
from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

from .brokers import free_port
from .test_console import Console

pytestmark = [pytest.mark.processes, pytest.mark.timeout(400)]

TOKEN = "fuzz-token-0123456789abcdef"
_VERBS = {"get", "post", "put", "patch", "delete"}


def test_no_request_made_from_the_document_gets_a_server_error(
    procs: Processes, tmp_path: Path
) -> None:
    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()
    try:
        assert procs.m("sync-schema", "--broker", url).wait(60) == 0
        port = free_port()
        process = procs.m(
            "console", "--app", "examples.heartbeat", "--broker", url,
            "--http", f"127.0.0.1:{port}", env={"M_CONSOLE_TOKEN": TOKEN},
        )  # fmt: skip
        console = Console(port)
        console.wait_up(process)
        command = [
            str(Path(sys.executable).with_name("st")), "run", f"{console.base}/api/openapi.json",
            "--header", f"Authorization: Bearer {TOKEN}", "--checks", "not_a_server_error",
            "--max-examples", "20", "--seed", "1", "--request-timeout", "30",
        ]  # fmt: skip
        # in a directory of its own: schemathesis keeps its example database where it runs
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 0, (done.returncode, said[-1500:])
        counted = re.search(r"(\d+) generated, (\d+) passed", said)
        assert counted is not None, said[-3000:]
        assert counted.group(1) == counted.group(2)
        assert int(counted.group(1)) >= 200, said[-3000:]
        # every operation of the document but the document's own route, which a schema
        # loaded from its URL leaves out
        operations = sum(
            1
            for path, item in document()["paths"].items()
            for verb in item
            if verb in _VERBS and path != "/api/openapi.json"
        )
        assert f"Tested: {operations}" in said, said[-3000:]
        assert TOKEN not in process.output
        process.signal(signal.SIGTERM)
        assert process.wait(20) == 0, process.output
    finally:
        asyncio.run(ns.drop())
