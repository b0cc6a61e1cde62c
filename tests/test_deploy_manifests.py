"""deploy/kubernetes/ as an operator applies it (``kubectl apply -f deploy/kubernetes/``).

Every document passes its schema offline: the Kubernetes 1.30 API's (kubernetes-validate,
strict: an unknown field fails) for the built-in kinds, and tests/schemas/ for the
PodMonitor custom resource. The files keep their promises to each other: the disruption
budget and the spreading cover the ticker pods; each worker pod serves /metrics where its
annotations and the PodMonitor look; the autoscaler names the metric the adapter rule
exposes, from a query promtool accepts; the console reads its tokens from the Secret and
its probes are answered.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from framework_m_core.adapters.registry import open_broker
from framework_m_core.cli.main import _parser
from framework_m_core.console.auth import MIN_TOKEN, Guard
from framework_m_core.console.hosts import HostCheck, allowed_names
from framework_m_core.console.server import build
from framework_m_core.console.views import Views
from framework_m_core.errors import ConfigurationError
from framework_m_core.observability.probes import parse_address

from .conftest import REPO

KUBERNETES = "1.30.0"
DEPLOY = REPO / "deploy" / "kubernetes"
CUSTOM = {
    ("monitoring.coreos.com/v1", "PodMonitor"): Path(__file__).parent
    / "schemas"
    / "podmonitor-v1.json"
}
QUEUE_READY = 'max(frameworkm_queue_messages{state="ready"}) by (queue)'

Doc = dict[str, Any]


def _documents() -> list[tuple[str, Doc]]:
    return [
        (path.name, doc)
        for path in sorted(DEPLOY.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


DOCUMENTS = _documents()


def schema_errors(doc: Doc) -> list[str]:
    """Why ``doc`` fails its schema; empty when it passes. A kind without a schema raises."""
    custom = CUSTOM.get((doc["apiVersion"], doc["kind"]))
    if custom is not None:
        validator = jsonschema.Draft202012Validator(json.loads(custom.read_text()))
        return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{e.json_path}: {e.message}"]
    return []


def of_kind(kind: str) -> list[Doc]:
    return [doc for _, doc in DOCUMENTS if doc["kind"] == kind]


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector selects a pod with ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    tests = {
        "In": lambda key, values: labels.get(key) in values,
        "NotIn": lambda key, values: labels.get(key) not in values,
        "Exists": lambda key, values: key in labels,
        "DoesNotExist": lambda key, values: key not in labels,
    }
    return all(
        tests[e["operator"]](e["key"], e.get("values", []))
        for e in selector.get("matchExpressions", [])
    )


def pod_labels(workload: Doc) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def container(workload: Doc) -> Doc:
    only: Doc
    [only] = workload["spec"]["template"]["spec"]["containers"]
    return only


def command(workload: Doc) -> Namespace:
    return _parser().parse_args(container(workload)["args"])


def env(workload: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container(workload)["env"]}


def named_ports(workload: Doc) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container(workload)["ports"]}


def role(workload: Doc) -> str:
    """``ticker``, ``worker`` (the job-only pool) or the command, e.g. ``console``."""
    args = command(workload)
    if args.command != "worker":
        return str(args.command)
    return "worker" if args.no_scheduler else "ticker"


def deployment(name: str) -> Doc:
    [only] = [d for d in of_kind("Deployment") if role(d) == name]
    return only


def adapter_rules() -> list[Doc]:
    [config] = [d for d in of_kind("ConfigMap") if "prometheus-adapter" in d["metadata"]["name"]]
    rules: list[Doc] = yaml.safe_load(config["data"]["config.yaml"])["externalRules"]
    return rules


@pytest.mark.parametrize(
    "doc",
    [doc for _, doc in DOCUMENTS],
    ids=[f"{name}:{doc['kind']}/{doc['metadata']['name']}" for name, doc in DOCUMENTS],
)
def test_each_document_passes_its_schema(doc: Doc) -> None:
    assert schema_errors(doc) == []
    assert "namespace" not in doc["metadata"], "kubectl apply -n NAMESPACE places every one"


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("Deployment", ("spec", "replicas"), "two"),
        ("Deployment", ("spec", "template", "spec", "containers", 0, "ports", 0, "port"), 80),
        ("PodDisruptionBudget", ("spec", "minAvaliable"), 1),
        ("HorizontalPodAutoscaler", ("spec", "metrics", 0, "external", "metric"), "q"),
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0, "interval"), "30 seconds"),
        ("PodMonitor", ("spec", "selector", "matchExpressions", 0, "operator"), "in"),
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0, "portName"), "http"),
        ("PodMonitor", ("metadata", "name"), "Framework_M"),
    ],
)
def test_a_broken_document_fails_its_schema(
    kind: str, path: tuple[str | int, ...], value: object
) -> None:
    broken = copy.deepcopy(of_kind(kind)[0])
    *parents, last = path
    node: Any = broken
    for key in parents:
        node = node[key]
    node[last] = value
    assert schema_errors(broken) != []


def test_the_pod_monitor_schema_is_a_schema_and_needs_a_selector() -> None:
    [(_, custom)] = CUSTOM.items()
    jsonschema.Draft202012Validator.check_schema(json.loads(custom.read_text()))
    [monitor] = of_kind("PodMonitor")
    broken = copy.deepcopy(monitor)
    del broken["spec"]["selector"]
    assert schema_errors(broken) != []


def test_the_disruption_budget_and_the_spreading_cover_the_ticker_pods() -> None:
    ticker = deployment("ticker")
    labels = pod_labels(ticker)
    [budget] = of_kind("PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert ticker["spec"]["replicas"] > budget["spec"]["minAvailable"], "a drain could never evict"
    assert ticker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    pod = ticker["spec"]["template"]["spec"]
    [apart] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert apart["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selects(apart["podAffinityTerm"]["labelSelector"], labels)
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert selects(spread["labelSelector"], labels)
    for selector in (budget["spec"]["selector"], apart["podAffinityTerm"]["labelSelector"]):
        chosen = [d for d in of_kind("Deployment") if selects(selector, pod_labels(d))]
        assert chosen == [ticker]


def test_each_worker_pod_serves_metrics_where_its_annotations_and_the_pod_monitor_look() -> None:
    [monitor] = of_kind("PodMonitor")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    workers = [deployment("ticker"), deployment("worker")]
    selector = monitor["spec"]["selector"]
    scraped = [d for d in of_kind("Deployment") if selects(selector, pod_labels(d))]
    assert sorted(d["metadata"]["name"] for d in scraped) == sorted(
        d["metadata"]["name"] for d in workers
    ), "the PodMonitor scrapes the ticker and worker pools, and not the console"
    assert endpoint["path"] == "/metrics"
    for workload in workers:
        name = workload["metadata"]["name"]
        port = named_ports(workload)[endpoint["port"]]
        assert parse_address(env(workload)["M_HTTP"]["value"])[1] == port, name
        assert workload["spec"]["template"]["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(port),
            "prometheus.io/path": endpoint["path"],
        }, name
        probes = container(workload)["livenessProbe"], container(workload)["readinessProbe"]
        assert {p["httpGet"]["port"] for p in probes} == {endpoint["port"]}, name
    console = deployment("console")
    assert "annotations" not in console["spec"]["template"]["metadata"]


def test_the_autoscaler_names_the_metric_the_adapter_rule_exposes(tmp_path: Path) -> None:
    [hpa] = of_kind("HorizontalPodAutoscaler")
    [metric] = hpa["spec"]["metrics"]
    [rule] = adapter_rules()
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == rule["name"]["as"] == "frameworkm_queue_ready"
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment("worker")["metadata"]["name"]

    matched = re.fullmatch(r"\^(\w+)\$", rule["name"]["matches"])
    assert matched, rule["name"]["matches"]
    series = matched[1]
    assert rule["seriesQuery"].startswith(series + "{")
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}}
    # The adapter fills <<.LabelMatchers>> with the HPA's namespace (and its selector).
    query = rule["metricsQuery"].replace("<<.Series>>", series)
    assert query.replace(",<<.LabelMatchers>>", "") == QUEUE_READY
    filled = query.replace("<<.LabelMatchers>>", 'namespace="default"')
    check = {"groups": [{"name": "adapter", "rules": [{"record": "q:ready", "expr": filled}]}]}
    (tmp_path / "adapter.yml").write_text(json.dumps(check))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (.ci/run does)"
    done = subprocess.run(
        [promtool, "check", "rules", "adapter.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "SUCCESS: 1 rules found" in done.stdout, done.stdout + done.stderr


def test_the_documented_helm_values_hold_the_shipped_adapter_rule() -> None:
    text = (REPO / "docs" / "operating.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    [values] = [b for b in blocks if isinstance(b, dict) and "rules" in b]
    assert values["rules"]["external"] == adapter_rules()


def test_every_secret_a_workload_names_is_shipped() -> None:
    shipped = {(s["metadata"]["name"], key) for s in of_kind("Secret") for key in s["stringData"]}
    for workload in of_kind("Deployment") + of_kind("Job"):
        for var in container(workload)["env"]:
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert (ref["name"], ref["key"]) in shipped, (workload["metadata"]["name"], ref)


def test_the_console_reads_its_tokens_from_the_secret_and_refuses_the_placeholders() -> None:
    console = deployment("console")
    assert console["spec"]["replicas"] == 1, "the page's sessions live in one process"
    variables = env(console)
    secrets = {s["metadata"]["name"]: s["stringData"] for s in of_kind("Secret")}
    for name in ("M_CONSOLE_TOKEN", "M_CONSOLE_READ_TOKEN"):
        assert "value" not in variables[name]
        ref = variables[name]["valueFrom"]["secretKeyRef"]
        placeholder = secrets[ref["name"]][ref["key"]]
        assert len(placeholder) < MIN_TOKEN
        with pytest.raises(ConfigurationError, match="at least 16 characters"):
            Guard(placeholder, None)
    assert "optional" not in variables["M_CONSOLE_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert not [a for a in container(console)["args"] if "token" in a.lower()]


def test_the_console_answers_its_probes_and_its_service_names() -> None:
    console = deployment("console")
    args = command(console)
    host, port = parse_address(args.http)
    assert host == "0.0.0.0"
    assert named_ports(console) == {"http": port}
    [service] = of_kind("Service")
    assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(console))
    [service_port] = service["spec"]["ports"]
    assert service_port["targetPort"] == "http"

    names = list(env(console))
    assert names.index("POD_NAMESPACE") < names.index("M_CONSOLE_HOSTS")  # for $(POD_NAMESPACE)
    namespace = env(console)["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert namespace == "metadata.namespace"
    allowed = env(console)["M_CONSOLE_HOSTS"]["value"].replace("$(POD_NAMESPACE)", "default")
    app = build(
        Views(open_broker("memory://"), None),
        Guard("c" * MIN_TOKEN, "r" * MIN_TOKEN),
        hosts=HostCheck(allowed_names([host, allowed])),
    )

    def status(host_header: str, path: str) -> int:
        async def get() -> int:
            transport = httpx.ASGITransport(app=app)
            base = f"http://{host_header}"
            async with httpx.AsyncClient(transport=transport, base_url=base) as client:
                return (await client.get(path)).status_code

        return asyncio.run(get())

    for probe in ("livenessProbe", "readinessProbe"):
        get = container(console)[probe]["httpGet"]
        assert get["port"] == "http"
        assert status(f"10.1.2.3:{port}", get["path"]) == 200  # the kubelet sends the pod's IP
    service_name = service["metadata"]["name"]
    for name in (service_name, f"{service_name}.default.svc.cluster.local"):
        assert status(f"{name}:{service_port['port']}", "/api/session") == 200
    assert status(f"console.elsewhere.example:{port}", "/api/session") == 400


@pytest.mark.parametrize(
    "workload",
    of_kind("Deployment") + of_kind("Job"),
    ids=lambda w: str(w["metadata"]["name"]),
)
def test_every_pod_meets_the_restricted_pod_security_standard(workload: Doc) -> None:
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert set(c["resources"]["requests"]) == {"cpu", "memory"}
        assert "memory" in c["resources"]["limits"]
