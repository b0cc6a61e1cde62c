"""The API reference of the framework-m site: which object is documented where, and how
references to it resolve.

Each class, function and public constant is described once, on the first page of
:data:`SECTIONS` that names it (ports first), in the order of its module's source; the
generated pages are written to ``_build/generated/api-<page>.md`` and included by
``docs/api/<page>.md``. Every other name the object goes by (where it is defined, each
package that exports it, the members a class inherits) is registered as an alias of that
one description, so a reference by any of them resolves.

Names in signatures and docstrings are read the way their module sees them: an
annotation that could not be evaluated (a name imported only for type checking) reaches
Sphinx as the text the module wrote, such as ``deque`` or ``Delivery``; it becomes the
full name the module's imports give it, so that framework-m's objects resolve exactly and
another library's fall under the site's ``nitpick_ignore_regex``. Type variables are
placeholders, shown as text.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ParamSpec, TypeVar

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.domains.python import ObjectEntry, PythonDomain
from sphinx.environment import BuildEnvironment
from sphinx.pycode import ModuleAnalyzer

OWN = (
    "framework_m_core",
    "framework_m_nats",
    "framework_m_redis",
    "framework_m_rabbitmq",
    "framework_m_outbox",
)
CORE = "framework_m_core"
PORTS = [
    "protocols", "store", "store_base", "records", "capabilities", "schema", "base", "messages",
    "batching", "urls",
    "greeting",
]  # fmt: skip
CORE_LAYERS = [
    "app",
    "jobs",
    "handles",
    "errors",
    "about",
    "control",
    "scheduling",
    "runtime",
    "observability",
    "cli",
]
ADAPTERS = {
    "nats": "framework_m_nats",
    "redis": "framework_m_redis",
    "rabbitmq": "framework_m_rabbitmq",
    "outbox": "framework_m_outbox",
}


def _submodules(package: str) -> list[str]:
    """``package`` and every module under it, in name order, scripts left out."""
    module = importlib.import_module(package)
    found = pkgutil.walk_packages(getattr(module, "__path__", []), package + ".")
    names = sorted(i.name for i in found if not i.name.endswith("__main__"))
    return [package, *names]


def _sections() -> list[tuple[str, str, str]]:
    """(page, module, which members), in the order objects find their home: ``exported``
    documents what a package's ``__all__`` names, ``defined`` what a module defines,
    ``docstring`` the module's docstring alone."""
    out = [("ports", f"{CORE}.ports", "docstring")]
    out += [("ports", f"{CORE}.ports.{m}", "defined") for m in PORTS]
    out += [("core", CORE, "exported"), ("testing", f"{CORE}.testing", "exported")]
    out += [("testing", m, "defined") for m in _submodules(f"{CORE}.testing")[1:]]
    for layer in CORE_LAYERS:
        out += [("internals", m, "defined") for m in _submodules(f"{CORE}.{layer}")]
    out += [("memory", m, "defined") for m in _submodules(f"{CORE}.adapters")]
    for page, package in ADAPTERS.items():
        out += [(page, package, "exported")]
        out += [(page, m, "defined") for m in _submodules(package)[1:]]
    return out


def _is_code(value: Any) -> bool:
    return inspect.isclass(value) or inspect.isfunction(value)


def _canonical(value: Any) -> str | None:
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname and "<" not in qualname else None


def _hooks(cls: type) -> list[str]:
    """The private abstract methods of ``cls``: what a subclass implements."""
    return [
        name
        for name, value in vars(cls).items()
        if name.startswith("_")
        and not name.startswith("__")
        and getattr(value, "__isabstractmethod__", False)
    ]


def _directive(full: str, value: Any) -> list[str]:
    """The autodoc directive that describes ``value`` as ``full``."""
    if inspect.isfunction(value):
        return [f".. autofunction:: {full}"]
    if not inspect.isclass(value):
        long = len(repr(value)) > 200  # a table of test bodies, say: its name and doc suffice
        return [f".. autodata:: {full}", *(["   :no-value:"] if long else [])]
    kind = "exception" if issubclass(value, BaseException) else "class"
    lines = [f".. auto{kind}:: {full}", "   :members:", "   :undoc-members:"]
    if hooks := _hooks(value):
        lines.append(f"   :private-members: {', '.join(hooks)}")
    return lines


# -- what a module's names stand for ---------------------------------------------------


def _import_names(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            top = alias.name.split(".")[0]
            yield (alias.asname, alias.name) if alias.asname else (top, top)
        return
    base = node.module or ""
    if node.level:
        base = importlib.util.resolve_name("." * node.level + base, package)
    for alias in node.names:
        yield alias.asname or alias.name, f"{base}.{alias.name}"


@functools.cache
def imported(modname: str) -> dict[str, str]:
    """The full name of each name ``modname`` imports, type-checking imports included."""
    module = importlib.import_module(modname)
    source = inspect.getsourcefile(module)
    if source is None:
        return {}
    package = modname if hasattr(module, "__path__") else modname.rpartition(".")[0]
    tree = ast.parse(Path(source).read_text())
    return {
        name: full
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name, full in _import_names(node, package)
    }


def full_name(modname: str, name: str) -> str | None:
    """What ``name`` stands for in ``modname``: an import's full name, the module's own
    name for what it defines, "" for a type variable, None if the module has no such name."""
    module = importlib.import_module(modname)
    if isinstance(vars(module).get(name.split(".")[0]), TypeVar | ParamSpec):
        return ""
    if name in imported(modname):
        return imported(modname)[name]
    return f"{modname}.{name}" if name in vars(module) else None


def is_type_variable(dotted: str) -> bool:
    """Whether ``dotted`` names a type variable of framework-m's own modules."""
    modname, _, name = dotted.rpartition(".")
    if modname.split(".")[0] not in OWN:
        return False
    try:
        module = importlib.import_module(modname)
    except ImportError:
        return False
    return isinstance(getattr(module, name, None), TypeVar | ParamSpec)


# -- the catalogue ---------------------------------------------------------------------


@dataclass
class Section:
    """One module's part of a page: its docstring, then each member documented there."""

    modname: str
    members: list[tuple[str, Any]] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"## `{self.modname}`\n", "```{eval-rst}", f".. automodule:: {self.modname}"]
        for name, value in self.members:
            lines += ["", *_directive(f"{self.modname}.{name}", value)]
        return "\n".join([*lines, "```\n"])


class Catalogue:
    """Where each object of the packages is documented, and its other names."""

    def __init__(self) -> None:
        self.sections = _sections()
        self.homes: dict[int, str] = {}  # id of a class or function -> its documented name
        self.documented: dict[str, Any] = {}  # documented name -> the class or function
        self.pages: dict[str, list[Section]] = {}
        self.exported = {n for _, m, _ in self.sections for n in self._all(m)}
        for page, modname, mode in self.sections:
            self.pages.setdefault(page, []).append(self._section(modname, mode))
        self.aliases = self._aliases()

    @staticmethod
    def _all(modname: str) -> list[str]:
        return list(getattr(importlib.import_module(modname), "__all__", ()))

    def _home(self, full: str, value: Any) -> bool:
        """Make ``full`` the home of ``value`` unless it has one; whether it did."""
        if id(value) in self.homes:
            return False
        self.homes[id(value)] = full
        self.documented[full] = value
        return True

    def _section(self, modname: str, mode: str) -> Section:
        module = importlib.import_module(modname)
        section = Section(modname)
        if mode == "exported":
            for name in self._all(modname):
                value = getattr(module, name)
                if (
                    not name.startswith("_")
                    and _is_code(value)
                    and self._home(f"{modname}.{name}", value)
                ):
                    section.members.append((name, value))
        elif mode == "defined":
            section.members = [(n, v) for n, v in self._defined(module)]
        return section

    def _defined(self, module: ModuleType) -> Iterator[tuple[str, Any]]:
        """What ``module`` defines that is documented there, in the order of its source."""
        modname = module.__name__
        analyzer = ModuleAnalyzer.for_module(modname)
        commented = {n for (cls, n) in analyzer.find_attr_docs() if not cls}
        order = analyzer.tagorder
        names = sorted(
            (n for n in vars(module) if not n.startswith("_") and n in order), key=order.__getitem__
        )
        for name in names:
            value = getattr(module, name)
            if _is_code(value):
                if value.__module__ == modname and self._home(f"{modname}.{name}", value):
                    yield name, value
            elif name not in imported(modname) and (
                name in commented or self._is_constant(name, value)
            ):
                yield name, value

    def _is_constant(self, name: str, value: Any) -> bool:
        """Public data: an UPPER_CASE constant, or a name a package exports."""
        if isinstance(value, TypeVar | ParamSpec | ModuleType):
            return False
        return bool(re.fullmatch(r"[A-Z][A-Z0-9_]+", name)) or name in self.exported

    def _aliases(self) -> dict[str, set[str]]:
        """For each documented name, where else the object is defined or exported."""
        out: dict[str, set[str]] = {}
        for modname in {m for _, m, _ in self.sections}:
            module = importlib.import_module(modname)
            for name in self._all(modname):
                value = getattr(module, name, None)
                home = self.homes.get(id(value)) if _is_code(value) else None
                others = {f"{modname}.{name}", _canonical(value)} - {home, None}
                if home is not None and others:
                    out.setdefault(home, set()).update(o for o in others if o)
        return out


# -- Sphinx events ---------------------------------------------------------------------


class Resolver:
    """The Sphinx side: aliases in the Python domain, names read as their module sees them."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.names_of = {id(v): name for name, v in catalogue.documented.items()}

    def add_aliases(self, app: Sphinx, env: BuildEnvironment) -> None:
        """After reading: every other name of a description leads to it."""
        domain = env.get_domain("py")
        assert isinstance(domain, PythonDomain)
        objects = domain.objects
        for home, value in self.catalogue.documented.items():
            if inspect.isclass(value):
                for base in value.__mro__[1:]:
                    if (base_home := self.names_of.get(id(base))) is not None:
                        _alias_tree(objects, base_home, home)
        for home, others in self.catalogue.aliases.items():
            for other in others:
                _alias_tree(objects, home, other)

    def qualify(self, app: Sphinx, doctree: nodes.document) -> None:
        """After parsing a page: qualify the names in its signatures; type variables
        become text."""
        for xref in list(doctree.findall(addnodes.pending_xref)):
            if xref.get("refdomain") != "py":
                continue
            if is_type_variable(xref.get("reftarget", "")):
                xref.replace_self(_text_of(xref))
            elif _in_signature(xref):
                self._qualify(xref)

    def _qualify(self, xref: addnodes.pending_xref) -> None:
        """Read a signature's name as the module that documents it sees it, else as the
        one that defines the object (an export documented under its package's name)."""
        head, _, rest = xref.get("reftarget", "").partition(".")
        for modname in (xref.get("py:module"), self._defining_module(xref)):
            if not modname or modname.split(".")[0] not in OWN:
                continue
            full = full_name(modname, head)
            if full == "":
                xref.replace_self(_text_of(xref))
                return
            if full is not None:
                xref["reftarget"] = f"{full}.{rest}" if rest else full
                return

    def in_scope(
        self,
        app: Sphinx,
        env: BuildEnvironment,
        node: addnodes.pending_xref,
        contnode: nodes.TextElement,
    ) -> nodes.reference | None:
        """A reference nothing else resolved: a docstring's unqualified name, read as the
        module that documents it or the one that defines it sees it."""
        target = node.get("reftarget", "")
        if node.get("refdomain") != "py" or target.startswith((".", "~")):
            return None
        head, _, rest = target.partition(".")
        domain = env.get_domain("py")
        for modname in (node.get("py:module"), self._defining_module(node)):
            if not modname or modname.split(".")[0] not in OWN:
                continue
            full = full_name(modname, head)
            full = f"{full}.{rest}" if full and rest else full
            if full and full in domain.objects:  # type: ignore[attr-defined]
                resolved: nodes.reference | None = domain.resolve_xref(
                    env, node["refdoc"], app.builder, node["reftype"], full, node, contnode
                )
                return resolved
        return None

    def _defining_module(self, node: nodes.Node) -> str | None:
        """The module that defines the object whose description holds ``node``."""
        parent = node.parent
        while parent is not None and not isinstance(parent, addnodes.desc):
            parent = parent.parent
        signature = next(iter(parent.findall(addnodes.desc_signature)), None) if parent else None
        if signature is None:
            return None
        parts = signature.get("fullname", "").split(".")
        value = self.catalogue.documented.get(f"{signature.get('module')}.{parts[0]}")
        defined_in = getattr(value, "__module__", None)
        for part in parts[1:]:
            value = inspect.getattr_static(value, part, None)
            value = getattr(value, "__func__", value)  # a staticmethod's or classmethod's
            if _is_code(value):
                defined_in = value.__module__
        return defined_in


def _alias_tree(objects: dict[str, ObjectEntry], home: str, alias: str) -> None:
    """Register ``alias`` and its members' names for ``home``'s, where not taken."""
    for name, entry in [
        (n, e) for n, e in objects.items() if n == home or n.startswith(home + ".")
    ]:
        other = alias + name[len(home) :]
        if other not in objects:
            objects[other] = ObjectEntry(entry.docname, entry.node_id, entry.objtype, True)


def _in_signature(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, addnodes.desc_signature):
            return True
        parent = parent.parent
    return False


def _text_of(xref: addnodes.pending_xref) -> list[nodes.Node]:
    """What a reference shows, without the reference."""
    for condition in xref.findall(addnodes.pending_xref_condition):
        if condition["condition"] == "*":
            return list(condition.children)
    return list(xref.children)


def _dataclass_defaults(
    app: Sphinx,
    what: str,
    name: str,
    obj: Any,
    options: Any,
    signature: str | None,
    annotation: str | None,
) -> tuple[str | None, str | None] | None:
    """A dataclass field's ``default_factory`` shows as ``...``: the ``<factory>`` that
    ``inspect`` prints is not Python, and a signature that does not parse loses its links."""
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), annotation
    return None


def _no_borrowed_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """A constant without a doc comment shows none, not the docstring of its type; nor
    does a named tuple's field the text Python gives every field."""
    text = "\n".join(lines).strip()
    doc = getattr(type(obj), "__doc__", None)
    borrowed = what == "data" and bool(doc) and text == inspect.cleandoc(doc or "").strip()
    if borrowed or re.fullmatch(r"Alias for field number \d+", text):
        lines.clear()


GENERATED = Path("_build") / "generated"


def write(app: Sphinx, name: str, text: str) -> None:
    """Write a generated file under the source folder's ``_build/generated/``, only when
    it changed, so that Sphinx rereads only the pages whose includes did."""
    path = Path(app.srcdir) / GENERATED / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def setup(app: Sphinx) -> dict[str, Any]:
    resolver = Resolver(Catalogue())
    for page, sections in resolver.catalogue.pages.items():
        write(app, f"api-{page}.md", "\n".join(s.markdown() for s in sections))
    app.connect("autodoc-process-signature", _dataclass_defaults)
    app.connect("autodoc-process-docstring", _no_borrowed_docstring)
    app.connect("doctree-read", resolver.qualify)
    app.connect("env-updated", resolver.add_aliases)
    app.connect("missing-reference", resolver.in_scope)
    return {"parallel_read_safe": False}
