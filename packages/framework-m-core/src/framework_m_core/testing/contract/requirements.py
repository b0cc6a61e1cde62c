"""What a contract test needs of the adapter under test, declared with :func:`requires`.

A requirement is a :class:`~framework_m_core.ports.capabilities.Capability` the
adapter must declare, or a condition on its settings or test URL (a short
window, an option in the URL). A test whose requirements are unmet is skipped
with the reason; a test never checks less because of what the adapter lacks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from ...ports.capabilities import Capability, as_capabilities
from ...ports.protocols import BrokerProtocol

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__framework_m_requires__"


class Requirement(ABC):
    """A condition a contract test needs; :meth:`unmet` says why it does not hold."""

    @abstractmethod
    def unmet(self, broker: BrokerProtocol, url: str) -> str | None:
        """Why the adapter under test (unconnected) with test URL ``url`` falls short."""

    @abstractmethod
    def __str__(self) -> str: ...


@dataclass(frozen=True)
class Declared(Requirement):
    """The adapter declares ``capability``."""

    capability: Capability

    def unmet(self, broker: BrokerProtocol, url: str) -> str | None:
        if self.capability in as_capabilities(broker.capabilities, type(broker).__qualname__):
            return None
        return f"the adapter does not declare the {self.capability.value!r} capability"

    def __str__(self) -> str:
        return f"capability {self.capability.value}"


@dataclass(frozen=True)
class Short(Requirement):
    """The broker's ``setting`` (``dedup_window`` or ``visibility_timeout``) is short enough
    to wait out in a test."""

    setting: str
    limit: float = 5.0

    def unmet(self, broker: BrokerProtocol, url: str) -> str | None:
        value = float(getattr(broker, self.setting))
        if value <= self.limit:
            return None
        return f"the test broker's {self.setting} is {value:g}s; give it at most {self.limit:g}s"

    def __str__(self) -> str:
        return f"{self.setting} <= {self.limit:g}s"


@dataclass(frozen=True)
class UrlOption(Requirement):
    """The test URL sets ``option`` (so that a test can open it with another value)."""

    option: str

    def unmet(self, broker: BrokerProtocol, url: str) -> str | None:
        if any(key == self.option for key, _ in parse_qsl(urlsplit(url).query)):
            return None
        return f"the test URL has no {self.option}= option"

    def __str__(self) -> str:
        return f"URL option {self.option}"


@dataclass(frozen=True)
class HostPort(Requirement):
    """The test URL names one server as ``host:port`` (so a test can reach past it)."""

    def unmet(self, broker: BrokerProtocol, url: str) -> str | None:
        netloc = urlsplit(url).netloc.rsplit("@", 1)[-1]
        try:
            ok = "," not in netloc and urlsplit(url).port is not None
        except ValueError:
            ok = False
        return None if ok else "the test URL does not name a single host:port"

    def __str__(self) -> str:
        return "a single host:port in the URL"


@dataclass(frozen=True)
class AnyOf(Requirement):
    """At least one of ``options`` holds."""

    options: tuple[Requirement, ...]

    def unmet(self, broker: BrokerProtocol, url: str) -> str | None:
        reasons = [r.unmet(broker, url) for r in self.options]
        if any(reason is None for reason in reasons):
            return None
        return " and ".join(str(r) for r in reasons)

    def __str__(self) -> str:
        return " or ".join(str(r) for r in self.options)


SHORT_DEDUP_WINDOW = Short("dedup_window")
SHORT_VISIBILITY = Short("visibility_timeout")
DEDUP_WINDOW_IN_URL = UrlOption("dedup_window")
SINGLE_HOST = HostPort()


def as_requirement(item: object) -> Requirement:
    """A requirement from a :class:`Requirement` or a capability (or its name)."""
    if isinstance(item, Requirement):
        return item
    (capability,) = as_capabilities([item], "a contract test")
    return Declared(capability)


def requires(*needed: Capability | Requirement | str) -> Callable[[F], F]:
    """Mark a contract test as needing ``needed``; an unknown capability raises at import."""
    reqs = tuple(as_requirement(n) for n in needed)

    def mark(test: F) -> F:
        setattr(test, ATTRIBUTE, (*getattr(test, ATTRIBUTE, ()), *reqs))
        return test

    return mark


def requirements_of(test: Callable[..., Any]) -> tuple[Requirement, ...]:
    return tuple(getattr(test, ATTRIBUTE, ()))


def any_of(*options: Capability | Requirement) -> AnyOf:
    return AnyOf(tuple(as_requirement(o) for o in options))
