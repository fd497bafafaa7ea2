"""The spec's building blocks, shared by its models (:mod:`benchctl.spec.model`, :mod:`benchctl.spec.workloads`)."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"  # pydantic's (Rust) regex: $ is the end of the text
Name = Annotated[str, Field(pattern=NAME_RE, description="lowercase letters, digits and '-' (max 40)")]


def _numbers(annotation: Any) -> tuple[bool, bool]:
    """(a number is valid here, a boolean is valid here), through Optional/Union/Annotated/Literal; for a list or
    tuple, of its items."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _numbers(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        parts = [_numbers(a) for a in typing.get_args(annotation)]
        return any(n for n, _ in parts), any(b for _, b in parts)
    if origin is typing.Literal:
        args = typing.get_args(annotation)
        return False, any(isinstance(a, bool) for a in args)
    if annotation is bool:
        return False, True
    if annotation in (int, float):
        return True, False
    return False, annotation is Any


def _items(annotation: Any) -> Any | None:
    """The item type of a list/tuple annotation (through Optional/Annotated), or None."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _items(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        found = [i for a in typing.get_args(annotation) if (i := _items(a)) is not None]
        return found[0] if found else None
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return args[0] if args else None
    return None


class Strict(BaseModel):
    # floats are finite: NaN and infinity are refused in every field (benchctl.spec.bounds)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, data: Any) -> Any:
        """pydantic takes ``true`` as 1 in a number field: a spec's ``repeats: true`` would run one repeat. A
        boolean where a number (or a list of numbers) is asked is refused instead, naming the field."""
        if not isinstance(data, dict):
            return data
        for name, v in data.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            if field is None:
                continue
            many = isinstance(v, (list, tuple))
            annotation = (_items(field.annotation) if many else field.annotation) or Any
            number, boolean = _numbers(annotation)
            if number and not boolean and any(isinstance(x, bool) for x in (v if many else [v])):
                raise ValueError(f"field {name} is {v!r}: a boolean is not a number here; give a number")
        return data
