"""deploy/: the Kubernetes manifests agree with ``m`` (their schemas and their promises to
each other: test_deploy_manifests.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from framework_m_core.cli.main import _parser

from .conftest import REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(file, pod spec, container) of every workload that runs ``m``."""
    out = []
    for path in MANIFESTS:
        for doc in documents(path):
            if doc["kind"] in ("Deployment", "Job"):
                pod = doc["spec"]["template"]["spec"]
                out += [(path.name, pod, c) for c in pod["containers"]]
    return out


def test_every_command_is_one_m_accepts_and_runs_as_non_root() -> None:
    assert len(containers()) == 4
    for name, pod, container in containers():
        args = _parser().parse_args(container["args"])  # exits on an unknown flag
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        env = {e["name"]: e for e in container["env"]}
        assert env["M_BROKER_URL"]["valueFrom"]["secretKeyRef"]["name"] == "framework-m-broker"
        if args.command == "worker":
            assert args.no_sync_schema, f"{name}: workers leave the schema to the sync-schema Job"


def test_workers_drain_inside_the_grace_period_and_probe_their_own_port() -> None:
    for name, pod, container in containers():
        args = _parser().parse_args(container["args"])
        if args.command != "worker":
            continue
        assert args.shutdown_timeout < pod["terminationGracePeriodSeconds"], name
        port = int({e["name"]: e for e in container["env"]}["M_HTTP"]["value"].split(":")[1])
        [ports] = container["ports"]
        assert ports["containerPort"] == port
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_autoscaler_scales_the_job_only_pool_on_the_ready_messages() -> None:
    [hpa] = [
        d for path in MANIFESTS for d in documents(path) if d["kind"] == "HorizontalPodAutoscaler"
    ]
    target = hpa["spec"]["scaleTargetRef"]["name"]
    [pool] = [
        d
        for p in MANIFESTS
        for d in documents(p)
        if d["metadata"]["name"] == target and d["kind"] == "Deployment"
    ]
    assert "--no-scheduler" in pool["spec"]["template"]["spec"]["containers"][0]["args"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "frameworkm_queue_ready"
    text = (DEPLOY / "kubernetes" / "worker-autoscaler.yaml").read_text()
    assert 'frameworkm_queue_messages{state="ready"}' in text  # the metric it is built from


def test_the_image_runs_m_as_a_non_root_user() -> None:
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    assert "USER 10001" in lines
    assert 'ENTRYPOINT ["m"]' in lines
    roles = [c for _, _, c in containers() if "--no-scheduler" in c["args"]]
    assert len(roles) == 1  # one pool ticks, one only runs jobs
