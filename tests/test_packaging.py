"""What a user installing the packages meets: versions, the other project's core, READMEs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from framework_m_core.adapters.registry import ADAPTER_FOLDERS, install_hint

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


# Where the project speaks of installing itself: its sources, READMEs, docs and examples.
_HINTED = ["packages/*/src/**/*.py", "packages/*/README.md", "README.md", "docs/**/*.md"]
_HINTED += ["examples/**/*.py", "examples/**/*.md", "deploy/**/*"]
_OURS = re.compile(
    r"^framework[-_]m(?:[-_](?:core|nats|redis|rabbitmq|django|outbox))?(?:\[[^\]]*\])?$"
)
_PIP = re.compile(r"pip install ((?:[^`\"\n#(]|\n(?!\n))+)")
_EXTRA = re.compile(r"(?<![/\w])framework-m-core\[\w+\]")  # outside a path: a bare name
_BARE = re.compile(r"\binstall[ `'\"]{1,3}(framework-m(?:-\w+)?(?:\[[^\]]*\])?)", re.IGNORECASE)


def _readme_forms() -> tuple[set[str], set[str]]:
    """The package folders and extras the README installs, read from its Install part."""
    readme = (REPO / "README.md").read_text()
    install = readme[readme.index("## Install") : readme.index("## Quick start")]
    assert "pip install ./packages/framework-m-core ./packages/adapter-redis" in install
    folders = {
        "framework-m-core",
        *re.findall(r"\badapter-\w+|\bframework-m-django\b|\bframework-m-outbox\b", install),
    }
    extras = set(re.findall(r"`\[(\w+)\]`", install))
    assert folders == {
        "framework-m-core", "adapter-redis", "adapter-nats", "adapter-rabbitmq",
        "framework-m-django", "framework-m-outbox",
    }  # fmt: skip
    # core's extras, and the outbox's (one per database)
    assert extras == {"metrics", "tracing", "console", "testing", "postgresql", "mysql", "sqlite"}
    return folders, extras


def _wrong_argument(arg: str, folders: set[str], extras: set[str]) -> bool:
    """Whether ``arg`` of a ``pip install`` names a package of this project otherwise than
    as the README does: by its name (the index's is another project's), or by a folder
    or an extra the README does not install."""
    arg = arg.strip("'\"`,;:")
    if "{" in arg:  # a placeholder: install_hint() is checked with each value
        return False
    if _OURS.match(arg):
        return True
    local = re.fullmatch(r"\./packages/([\w-]+)(?:\[([\w,]+)\])?", arg)
    if local is None:
        return arg.startswith("./packages/")
    asked = set((local.group(2) or "").split(",")) - {""}
    return local.group(1) not in folders or not asked <= extras


def _wrong_hints(text: str, folders: set[str], extras: set[str]) -> list[str]:
    """The install hints of ``text`` that name a package not as the README installs it."""
    wrong = []
    for found in _PIP.finditer(text):
        if re.match(r"` fetches that\s+one", text[found.end() :]):  # the README's warning
            continue
        arguments = found.group(1).replace("\\\n", " ").split()
        if any(_wrong_argument(arg, folders, extras) for arg in arguments):
            wrong.append(found.group(0).strip())
    for found in _BARE.finditer(text):
        if not re.match(r"` fetches that\s+one", text[found.end() :]):
            wrong.append(found.group(0))
    for found in _EXTRA.finditer(text):
        if not text[: found.start()].endswith("pip install "):  # those are checked above
            wrong.append(found.group(0))
    return wrong


def test_every_install_hint_gives_the_readme_s_command() -> None:
    folders, extras = _readme_forms()
    wrong: dict[str, list[str]] = {}
    for pattern in _HINTED:
        for path in sorted(REPO.glob(pattern)):
            if not path.is_file() or "_build" in path.parts:
                continue
            found = _wrong_hints(path.read_text(errors="replace"), folders, extras)
            if found:
                wrong[str(path.relative_to(REPO))] = found
    assert not wrong, wrong
    hints = {install_hint(scheme) or "" for scheme in ADAPTER_FOLDERS}
    for hint in hints:
        assert hint.startswith("pip install ./packages/"), hint
        assert not _wrong_hints(hint, folders, extras), hint
    # every adapter the README installs has its scheme (core, Django's backend and the
    # outbox none)
    assert len(hints) == len(folders - {"framework-m-django", "framework-m-outbox"})
