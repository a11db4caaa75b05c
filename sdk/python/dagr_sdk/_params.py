"""Typed params: a dataclass describes them (as a JSON Schema) and checks them.

`schema_of(cls)` turns a dataclass into the JSON Schema that `describe`
returns, so dagr checks a workflow's params when it is applied;
`convert(value, cls)` turns the params' JSON into an instance at run time,
naming the path of the first value that does not fit (`rows[2].price`).
"""

import dataclasses
import types
import typing
from typing import Any, Union

_SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number"}


class ParamsError(ValueError):
    """A value that does not fit the params' type, with where it is."""

    def __init__(self, path: str, message: str):
        super().__init__(f"at `{path}`: {message}" if path else message)
        self.path = path


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _is_optional(tp) -> bool:
    return type(None) in _union_args(tp)


def _union_args(tp) -> tuple:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(tp)
    return ()


def schema_of(tp) -> dict:
    """The JSON Schema of a type made of dataclasses, scalars, lists, dicts,
    `Optional`, `Literal` and `Any`."""
    if tp is Any or tp is object:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if tp is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        properties = {}
        required = []
        for field in dataclasses.fields(tp):
            properties[field.name] = schema_of(hints[field.name])
            doc = field.metadata.get("description")
            if doc:
                properties[field.name]["description"] = doc
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            if not has_default:
                required.append(field.name)
        schema = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        return schema
    args = _union_args(tp)
    if args:
        return {"anyOf": [schema_of(a) for a in args]}
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        item = typing.get_args(tp)
        return {"type": "array", "items": schema_of(item[0])} if item else {"type": "array"}
    if origin is dict or tp is dict:
        item = typing.get_args(tp)
        return {"type": "object", "additionalProperties": schema_of(item[1])} if item else {"type": "object"}
    raise TypeError(f"dagr_sdk cannot describe params of type {tp!r}")


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def convert(value, tp, path: str = ""):
    """Turns JSON `value` into `tp`, or raises `ParamsError` naming where it does not fit."""
    if tp is Any or tp is object:
        return value
    if tp is type(None):
        if value is not None:
            raise ParamsError(path, f"expected null, got {_kind(value)}")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamsError(path, f"expected a boolean, got {_kind(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise ParamsError(path, f"expected an integer, got {_kind(value)}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamsError(path, f"expected a number, got {_kind(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ParamsError(path, f"expected a string, got {_kind(value)}")
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ParamsError(path, f"expected an object, got {_kind(value)}")
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        for key in value:
            if key not in names:
                known = ", ".join(sorted(names)) or "none"
                raise ParamsError(_join(path, key), f"unknown field (known fields: {known})")
        kwargs = {}
        for field in dataclasses.fields(tp):
            if field.name in value:
                kwargs[field.name] = convert(value[field.name], hints[field.name], _join(path, field.name))
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ParamsError(_join(path, field.name), "missing field")
        return tp(**kwargs)
    args = _union_args(tp)
    if args:
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(value, arg, path)
            except ParamsError as e:
                errors.append(str(e))
        raise ParamsError(path, f"{_kind(value)} fits none of the allowed types")
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ParamsError(path, f"expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
        return value
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, list):
            raise ParamsError(path, f"expected an array, got {_kind(value)}")
        item = typing.get_args(tp)
        items = [convert(v, item[0], _join(path, i)) for i, v in enumerate(value)] if item else list(value)
        return (origin or tp)(items) if (origin or tp) is not list else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ParamsError(path, f"expected an object, got {_kind(value)}")
        item = typing.get_args(tp)
        if not item:
            return dict(value)
        return {k: convert(v, item[1], _join(path, k)) for k, v in value.items()}
    raise TypeError(f"dagr_sdk cannot read params of type {tp!r}")
