"""The contract suite described: which tests each requirement gates (for the docs)."""

from __future__ import annotations

import inspect

from ...ports.capabilities import Capability
from .broker import AREAS
from .requirements import (
    DEDUP_WINDOW_IN_URL,
    SHORT_DEDUP_WINDOW,
    SHORT_VISIBILITY,
    SINGLE_HOST,
    AnyOf,
    Declared,
    Requirement,
    requirements_of,
)


def _gated(requirement: Requirement) -> list[Requirement]:
    return list(requirement.options) if isinstance(requirement, AnyOf) else [requirement]


def tests_by_requirement() -> dict[str, list[str]]:
    """Requirement (as the docs name it) -> the contract tests that need it."""
    out: dict[str, list[str]] = {}
    for area in AREAS:
        for name, test in inspect.getmembers(area, inspect.isfunction):
            if not name.startswith("test_") or name not in vars(area):
                continue
            for requirement in requirements_of(test):
                for one in _gated(requirement):
                    out.setdefault(str(one), []).append(f"`{area.__name__}.{name}`")
    return out


# What the requirements on the test set-up (not on the adapter) are for.
_SETUP = {
    str(SHORT_DEDUP_WINDOW): "the tests wait the dedup window out",
    str(SHORT_VISIBILITY): "the tests wait the visibility timeout out",
    str(DEDUP_WINDOW_IN_URL): "the tests open the URL with another window",
    str(SINGLE_HOST): "the tests point the URL at a closed port or through a proxy",
}


def requirement_table() -> str:
    """The Markdown table on the docs' "Writing an adapter" page: each requirement, what
    it stands for, and the contract tests it gates."""
    gated = tests_by_requirement()
    rows = ["| requirement | promise or purpose | tests it gates |", "|---|---|---|"]
    named = [(f"`{c.value}`", c.promise, str(Declared(c))) for c in Capability]
    named += [(key, why, key) for key, why in _SETUP.items()]
    for label, meaning, key in named:
        tests = "<br>".join(sorted(gated.get(key, []))) or "none"
        rows.append(f"| {label} | {meaning} | {tests} |")
    return "\n".join(rows)
