"""What describes the contract suite stays current: every mutant of the mutation run
(``hatch run mutate``) still applies and names existing tests, and the requirement
table the docs include from ``docs/_include`` is the suite's own."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from types import ModuleType

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_core.testing.contract.catalogue import requirement_table

from .conftest import REPO


def _catalogue() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants", REPO / "mutation" / "mutants.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


CATALOGUE = _catalogue()
TESTS = {name for name, _ in inspect.getmembers(BrokerContract) if name.startswith("test_")}


@pytest.mark.parametrize("mutant", CATALOGUE.MUTANTS, ids=lambda m: m.id)
def test_each_mutant_applies_and_names_suite_tests(mutant: object) -> None:
    text = (REPO / mutant.file).read_text()  # type: ignore[attr-defined]
    for old, new in mutant.edits:  # type: ignore[attr-defined]
        assert text.count(old) == 1, f"{old!r} is not in {mutant.file} exactly once"  # type: ignore[attr-defined]
        assert old != new
    suite = CATALOGUE.SUITES[mutant.adapter]  # type: ignore[attr-defined]
    names = TESTS if "test_contract_" in suite else _defined_tests(suite)
    for selector in mutant.tests:  # type: ignore[attr-defined]
        assert any(selector in name for name in names), f"no test of {suite} matches {selector!r}"


def _defined_tests(suite: str) -> set[str]:
    """The test functions a suite that is not a contract hook-up defines (a file, or
    every test file of a directory)."""
    path = REPO / suite
    files = sorted(path.glob("test_*.py")) if path.is_dir() else [path]
    return {
        name
        for f in files
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", f.read_text(), re.M)
    }


def test_mutant_ids_are_unique() -> None:
    ids = [m.id for m in CATALOGUE.MUTANTS]
    assert len(ids) == len(set(ids))


def test_no_two_areas_define_a_test_of_one_name() -> None:
    """The areas are mixins of one class: a test named as one of another area would
    hide it, and the suite would lose that test without a word."""
    from framework_m_core.testing.contract.broker import AREAS

    seen: dict[str, str] = {}
    for area in AREAS:
        for name in vars(area):
            if name.startswith("test_"):
                assert name not in seen, f"{name} is in {seen[name]} and {area.__name__}"
                seen[name] = area.__name__


def test_the_committed_requirement_table_is_the_suites() -> None:
    committed = (REPO / "docs" / "_include" / "requirement-table.md").read_text()
    assert committed == requirement_table() + "\n", (
        "docs/_include/requirement-table.md is stale: write requirement_table() into it"
    )
