"""Capabilities are a closed set: an adapter or a test naming an unknown one is an error."""

from __future__ import annotations

import pytest

from framework_m_core import Capability, ConfigurationError
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.testing import requires
from framework_m_core.testing.contract.requirements import SHORT_VISIBILITY, any_of, requirements_of


def test_an_adapter_declaring_an_unknown_capability_is_refused_when_defined() -> None:
    with pytest.raises(ConfigurationError, match="unknown capability 'raw_publish'"):

        class Old(MemoryBroker):
            capabilities = frozenset({"raw_publish"})  # type: ignore[arg-type]


def test_declared_names_become_capabilities() -> None:
    class Named(MemoryBroker):
        capabilities = frozenset({"cross_process"})  # type: ignore[arg-type]

    assert Named.capabilities == {Capability.CROSS_PROCESS}


def test_a_test_requiring_an_unknown_capability_is_refused_at_import() -> None:
    with pytest.raises(ConfigurationError, match="unknown capability 'teleport'"):
        requires("teleport")


def test_requirements_say_why_they_are_unmet() -> None:
    @requires(Capability.CROSS_PROCESS, any_of(Capability.REDELIVER_ON_CLOSE, SHORT_VISIBILITY))
    def test() -> None: ...

    broker = MemoryBroker.from_url("memory://x?visibility_timeout=30")
    reasons = [r.unmet(broker, "memory://x") for r in requirements_of(test)]
    assert reasons[0] == "the adapter does not declare the 'cross_process' capability"
    assert reasons[1] is None  # memory:// releases deliveries on close
