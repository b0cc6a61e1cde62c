"""deploy/prometheus/ and deploy/grafana/: the alerting rules pass ``promtool check rules``
and their unit tests (``promtool test rules``); every query of the Grafana dashboard is
PromQL that promtool accepts; both name only metrics the workers serve."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from framework_m_core.observability.metrics import Metrics

from .conftest import REPO

RULES = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "framework-m.json"


def promtool(*args: str, cwd: Path = RULES) -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: apt-get install prometheus (.ci/run does)"
    done = subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    return said


def test_the_rules_pass_promtool_check_rules() -> None:
    assert "SUCCESS: 9 rules found" in promtool("check", "rules", "rules.yml")


def test_the_rules_pass_their_unit_tests() -> None:
    assert "SUCCESS" in promtool("test", "rules", "rules.test.yml")


def served() -> set[str]:
    """Every series name a worker's /metrics can hold."""
    text = Metrics(concurrency=1).exposition().decode()
    names = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    names |= {f"{name}_total" for name in names}  # counters are named with _total
    names |= {f"{name}_{part}" for name in names for part in ("bucket", "sum", "count")}
    names.add("frameworkm_queue_messages")  # only with a broker's counts
    return names


def test_every_metric_the_rules_name_is_served() -> None:
    named = set(re.findall(r"\bframeworkm_\w+", (RULES / "rules.yml").read_text()))
    assert named, "the rules name no metric"
    assert named <= served(), f"not served: {sorted(named - served())}"


def _dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in board["panels"] for t in panel["targets"]]


def test_every_dashboard_query_is_promql_over_served_metrics(tmp_path: Path) -> None:
    queries = _dashboard_queries()
    assert len(queries) >= 10
    named = {name for q in queries for name in re.findall(r"\bframeworkm_\w+", q)}
    assert named <= served(), f"not served: {sorted(named - served())}"
    rules = {  # each query as a recording rule: promtool parses its PromQL
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query{i}", "expr": q.replace("$__rate_interval", "5m")}
                    for i, q in enumerate(queries)
                ],
            }
        ]
    }
    (tmp_path / "queries.yml").write_text(json.dumps(rules))
    said = promtool("check", "rules", "queries.yml", cwd=tmp_path)
    assert f"SUCCESS: {len(queries)} rules found" in said


def test_dashboard_panels_each_have_a_place_of_their_own() -> None:
    board = json.loads(DASHBOARD.read_text())
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        assert g["x"] + g["w"] <= 24
        taken |= cells
    assert board["templating"]["list"][0]["type"] == "datasource"


def served_labels() -> set[str]:
    """Every label name a worker's /metrics can carry, from one that saw each event."""
    m = Metrics(concurrency=1, schedules=1, ticker=True)
    m.tick("report", "enqueued", 60)
    m.next_slot("report", 120)
    m.job_started("report", 0.0, 60)
    m.job_triggered("report")
    m.job_finished("report", "succeeded", 0.1)
    m.waiting("report", 1)
    m.broker_error("receive")
    text = m.exposition().decode()
    found = {n for labels in re.findall(r"^\w+\{(.*)\} ", text, re.M) for n in _names(labels)}
    return found | {"queue", "state"}  # only with a broker's counts


def _names(labels: str) -> list[str]:
    return re.findall(r'(\w+)="', labels)


def test_no_metric_label_is_one_prometheus_sets_on_its_targets() -> None:
    # honor_labels: false (the default) renames a clashing label to exported_<name>
    assert served_labels() >= {"schedule", "job_name", "outcome"}
    assert not served_labels() & {"job", "instance", "__name__"}


def test_rules_and_panels_aggregate_only_by_labels_the_workers_serve() -> None:
    texts = [(RULES / "rules.yml").read_text(), *_dashboard_queries()]
    grouped = {
        name.strip()
        for text in texts
        for group in re.findall(r"\bby \(([^)]*)\)", text)
        for name in group.split(",")
    }
    assert grouped, "nothing aggregates by a label"
    assert grouped <= served_labels() | {"le"}, sorted(grouped - served_labels())
