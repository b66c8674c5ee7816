"""The parts of a typed write (``store/write.py``): conditions, assignment values, named fragments.

Operands are strings: ``":name"`` is a value placeholder (its AttributeValue sits in the write's or
the fragment's values), anything else an attribute path. The trees are tiny and immutable, so a
builder keeps the parts that never change as module constants and only the values vary per job:
``store/write.py`` finds a constant shape's rendering by the identity of its parts, and only a shape
built afresh is hashed (by the dataclasses' own ``__hash__``) to find it by value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

#: An AttributeValue of the low-level client (``{"S": "x"}``).
AV = dict[str, Any]
#: Comparison operators of a condition.
Comparator = Literal["=", "<>", "<", "<=", ">", ">="]


# ── conditions ───────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right``; each side is a path or a ``:value``."""

    left: str
    op: Comparator
    right: str


@dataclass(frozen=True, slots=True)
class OneOf:
    """``path IN (:a, :b)``."""

    path: str
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Exists:
    """``attribute_exists(path)``."""

    path: str


@dataclass(frozen=True, slots=True)
class Missing:
    """``attribute_not_exists(path)``."""

    path: str


@dataclass(frozen=True, slots=True)
class All:
    """Every part holds (AND)."""

    parts: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """At least one part holds (OR)."""

    parts: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """The part does not hold."""

    part: Condition


Condition = Compare | OneOf | Exists | Missing | All | AnyOf | Not


def eq(left: str, right: str) -> Compare:
    """``left = right``."""
    return Compare(left, "=", right)


def all_of(*parts: Condition) -> All:
    """AND of ``parts``."""
    return All(parts)


def any_of(*parts: Condition) -> AnyOf:
    """OR of ``parts``."""
    return AnyOf(parts)


@dataclass(frozen=True, slots=True)
class Fragment:
    """A named part of a write's condition, with the values of its placeholders.

    The name says why the part is there (``fence``, ``runnable``, ``not_expired``...): tests and
    readers of a refusal find a guard by name instead of by its text.
    """

    name: str
    condition: Condition
    values: Mapping[str, AV] = field(default_factory=dict, compare=False)


# ── assignment values ────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class IfNotExists:
    """``if_not_exists(path, :default)``: the stored value, or the default on an item without one."""

    path: str
    default: str


@dataclass(frozen=True, slots=True)
class Plus:
    """``left + right`` or ``left - right`` (``left`` may be an ``IfNotExists``)."""

    left: str | IfNotExists
    op: Literal["+", "-"]
    right: str


@dataclass(frozen=True, slots=True)
class ListAppend:
    """``list_append(left, right)``."""

    left: str | IfNotExists
    right: str


Expr = str | IfNotExists | Plus | ListAppend
