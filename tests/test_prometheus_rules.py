"""deploy/prometheus/: the alerting rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``), and every metric they name is one the workers serve."""

from __future__ import annotations

import re
import shutil
import subprocess

from framework_m_core.observability.metrics import Metrics

from .conftest import REPO

RULES = REPO / "deploy" / "prometheus"


def promtool(*args: str) -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: apt-get install prometheus (.ci/run does)"
    done = subprocess.run([path, *args], cwd=RULES, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    return said


def test_the_rules_pass_promtool_check_rules() -> None:
    assert "SUCCESS: 5 rules found" in promtool("check", "rules", "rules.yml")


def test_the_rules_pass_their_unit_tests() -> None:
    assert "SUCCESS" in promtool("test", "rules", "rules.test.yml")


def test_every_metric_the_rules_name_is_served() -> None:
    metrics = Metrics(concurrency=1)
    served = set(re.findall(r"^# TYPE (\w+) ", metrics.exposition().decode(), re.M))
    served |= {f"{name}_total" for name in served}  # counters are named with _total
    served.add("frameworkm_queue_messages")  # only with a broker's counts
    named = set(re.findall(r"\bframeworkm_\w+", (RULES / "rules.yml").read_text()))
    assert named, "the rules name no metric"
    assert named <= served, f"not served: {sorted(named - served)}"
