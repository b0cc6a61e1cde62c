"""What a user installing the packages meets: versions, the other project's core, READMEs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

ADAPTERS = ["framework_m_nats", "framework_m_redis", "framework_m_rabbitmq"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_beside_another_project_s_core_says_so(adapter: str, tmp_path: Path) -> None:
    foreign = tmp_path / "framework_m_core"
    foreign.mkdir()
    (foreign / "__init__.py").write_text("__version__ = '0.36.4'  # the index's framework-m-core\n")
    result = subprocess.run(
        [sys.executable, "-c", f"import {adapter}"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"{adapter} needs framework-m's framework-m-core (>=0.1,<0.2)" in result.stderr
    assert "belongs to another project" in result.stderr


@pytest.mark.parametrize(
    ("package", "page"),
    [
        ("adapter-nats", "nats"),
        ("adapter-redis", "redis"),
        ("adapter-rabbitmq", "rabbitmq"),
    ],
)
def test_each_adapter_s_own_readme_links_to_its_broker_page(package: str, page: str) -> None:
    own = (REPO / "packages" / package / "README.md").read_text()
    assert f"](../../docs/brokers/{page}.md#url-and-options)" in own
    assert (REPO / "docs" / "brokers" / f"{page}.md").is_file()
    assert "| option |" not in own  # the options are listed on the broker's page only
    assert "pip install ./packages/framework-m-core ./packages/" in own
    assert "belong to another project" in own


def test_every_package_carries_the_license() -> None:
    for package in [*(REPO / "packages").iterdir(), REPO / "examples" / "adapter-sqlite"]:
        pyproject = (package / "pyproject.toml").read_text()
        assert (package / "LICENSE").read_text() == (REPO / "LICENSE").read_text(), package
        assert 'license-files = ["LICENSE"]' in pyproject, package
        assert "Programming Language :: Python :: 3.12" in pyproject, package
