"""JSON Schemas of the console's answers, made from the dataclasses that make them.

An answer built as ``dataclasses.asdict(value)`` (and the extra fields its ``as_dict``
adds) is described by :func:`schema_of` its class: a field added to the class is in the
document too, so the two cannot drift.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from typing import Any, Literal, Union

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_of(cls: type[Any], **extra: Any) -> dict[str, Any]:
    """The schema of ``asdict(value)`` for dataclass ``cls``, with ``extra`` fields
    (name -> type) its answer adds; every field is required (it may be null)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    fields.update(extra)
    return {
        "type": "object",
        "required": sorted(fields),
        "properties": {name: _schema(kind) for name, kind in fields.items()},
    }


def _schema(kind: Any) -> dict[str, Any]:
    origin = typing.get_origin(kind)
    if kind is Any:
        return {}
    if kind is type(None) or kind in _SCALARS:
        return {"type": "null" if kind is type(None) else _SCALARS[kind]}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):  # a class of its own
        return {"$ref": f"#/components/schemas/{kind.__name__}"}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"enum": [member.value for member in kind]}
    if origin is Literal:
        return {"enum": list(typing.get_args(kind))}
    if origin in (Union, types.UnionType):
        parts = [_schema(arg) for arg in typing.get_args(kind)]
        if all(set(p) == {"type"} for p in parts):
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}
    return _container(kind, origin)


def _container(kind: Any, origin: Any) -> dict[str, Any]:
    args = typing.get_args(kind)
    if origin in (list, tuple, collections.abc.Sequence) or kind in (list, tuple):
        return {"type": "array", **({"items": _schema(args[0])} if args else {})}
    if origin in (dict, collections.abc.Mapping) or kind is dict:
        return {"type": "object", **({"additionalProperties": _schema(args[1])} if args else {})}
    raise TypeError(f"no JSON Schema for {kind!r}")
