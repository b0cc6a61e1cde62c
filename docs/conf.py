"""Sphinx configuration of the framework-m documentation site.

Build it with ``hatch run docs:build``. What describes the code is generated from the
code at every build, into ``_build/generated/`` (never edited, never committed):

* the capabilities each installed adapter declares;
* the mutants of ``mutation/mutants.py``;
* the pages of the API reference (``_ext/apiref.py``).

The contract suite's requirement table, which an adapter's author reads in a checkout,
is committed as ``_include/requirement-table.md``; ``tests/test_suite_catalogue.py``
fails when it differs from
:func:`framework_m_core.testing.contract.catalogue.requirement_table`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import apiref  # noqa: E402  (the site's own extension, beside this file)

import framework_m_core  # noqa: E402
from framework_m_core.ports.capabilities import Capability  # noqa: E402

project = "framework-m"
author = "framework-m contributors"
copyright = "framework-m contributors, MIT licence"
release = version = framework_m_core.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "apiref"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext", "_include"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"framework-m {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "separated"
autodoc_preserve_defaults = True
python_use_unqualified_type_names = True

nitpicky = True
# The build is offline (no intersphinx), so the standard library's and third-party
# libraries' objects, which signatures and annotations name, have no target here. They,
# and only they, are let through; every reference to framework-m's own objects resolves.
_STDLIB = (
    "_asyncio|abc|argparse|asyncio|collections|concurrent|contextlib|contextvars"
    "|dataclasses|datetime|enum|functools|http|importlib|inspect|io|itertools|json|logging"
    "|os|pathlib|re|signal|socket|ssl|subprocess|threading|time|types|typing"
    "|typing_extensions|urllib|uuid|zoneinfo"
)
_THIRD_PARTY = (
    "nats|redis|aio_pika|aiormq|pamqp|pytest|_pytest|anyio|prometheus_client|opentelemetry"
    "|sqlalchemy"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({_STDLIB})(\..+)?"),
    (r"py:.*", rf"({_THIRD_PARTY})(\..+)?"),
]


def _capability_table() -> str:
    """Which capabilities each installed adapter declares, a column per adapter."""
    first = ["memory", "nats", "tls", "redis", "rediss", "amqp", "amqps"]

    def order(ep: EntryPoint) -> tuple[int, str]:
        return (first.index(ep.name) if ep.name in first else len(first), ep.name)

    adapters: dict[type, list[str]] = {}
    for ep in sorted(entry_points(group="framework_m.adapters"), key=order):
        adapters.setdefault(ep.load(), []).append(f"`{ep.name}://`")
    rows = [
        "| capability | " + " | ".join(" ".join(s) for s in adapters.values()) + " |",
        "|---|" + "---|" * len(adapters),
    ]
    for capability in Capability:
        marks = ["yes" if capability in cls.capabilities else "-" for cls in adapters]
        rows.append(f"| `{capability.value}` | " + " | ".join(marks) + " |")
    return "\n".join(rows) + "\n"


def _mutant_table() -> str:
    """The mutants of ``mutation/mutants.py``: the suite that must kill each, and the
    promise each one breaks."""
    path = HERE.parent / "mutation" / "mutants.py"
    spec = importlib.util.spec_from_file_location("mutants", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    counts = Counter(m.adapter for m in module.MUTANTS)
    rows = ["| suite | mutants |", "|---|---|"]
    rows += [f"| `{suite}` | {counts[suite]} |" for suite in module.SUITES]
    rows += ["", "| mutant | suite | the promise it breaks |", "|---|---|---|"]
    rows += [f"| `{m.id}` | `{m.adapter}` | {m.promise} |" for m in module.MUTANTS]
    return "\n".join(rows) + "\n"


def _reread_all(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Every build reads every page again, so that each one reports every warning (the
    docstrings it includes may have changed without the page)."""
    return sorted(env.found_docs)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("env-get-outdated", _reread_all)
    apiref.write(app, "capabilities.md", _capability_table())
    apiref.write(app, "mutants.md", _mutant_table())
    return {"parallel_read_safe": False}
