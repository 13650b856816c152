"""How a target follows its declaration (docs/DESIGN.md, "Declarations that evolve"): pure rules.

The target's columns (as its sink reads them from its catalog, spelled as declared types) are compared with
the declaration's. What loses nothing becomes a change the sink applies (a new optional column, a widening,
a NOT NULL dropped, a column no longer declared kept and left NULL); what would change a committed row's
meaning becomes a refusal, which the sink words with the statement that would do it in its own terms.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")


@dataclass(frozen=True)
class Column:
    """A column as a declaration states it or a target holds it: its declared type's spelling."""

    name: str
    type: str  # "bigint", "numeric(12,2)", "text[]"; a type no declaration spells stays as the target has it
    required: bool
    text_from: str | None = None  # declared text that was this type (`text_from`): the user's explicit choice


class Kind(StrEnum):
    ADD = "add"  # a new optional column
    WIDEN = "widen"  # the type, to one that holds every value the old one did
    RELAX = "relax"  # required to optional
    RETIRE = "retire"  # no longer declared: kept, NULL from now on (and optional)


@dataclass(frozen=True)
class Change:
    kind: Kind
    column: str
    type: str  # the column's type after the change
    was: str | None = None  # WIDEN: the type before

    def __str__(self) -> str:
        return {
            Kind.ADD: f"added optional column {self.column} {self.type}",
            Kind.WIDEN: f"widened column {self.column} from {self.was} to {self.type}",
            Kind.RELAX: f"made column {self.column} optional",
            Kind.RETIRE: f"column {self.column} is no longer declared: kept, NULL in rows from now on",
        }[self.kind]


class Problem(StrEnum):
    TYPE = "type"  # a type change that is no widening (for this sink)
    REQUIRED = "required"  # an existing optional column declared required
    NEW_REQUIRED = "new_required"  # a new column declared required
    RENAMED = "renamed"  # a column removed and a new one reading its source


@dataclass(frozen=True)
class Refusal:
    problem: Problem
    column: str
    have: str | None = None  # TYPE: the target's type; RENAMED: the old column's name
    want: str | None = None  # TYPE: the declared type

    def __str__(self) -> str:
        return {
            Problem.TYPE: f"column {self.column} is {self.have} in the target but declared {self.want}",
            Problem.REQUIRED: f"column {self.column} is declared required but the target allows NULL in it",
            Problem.NEW_REQUIRED: f"required column {self.column} is new (earlier rows have no value for it)",
            Problem.RENAMED: f"column {self.column} reads what {self.have} read: a rename of {self.have}",
        }[self.problem]


@dataclass(frozen=True)
class Evolution:
    changes: tuple[Change, ...] = ()
    refusals: tuple[Refusal, ...] = ()


def numeric(type_: str) -> tuple[int, int] | None:
    """(precision, scale) of a numeric(p,s) spelling, else None."""
    m = _NUMERIC.fullmatch(type_.replace(" ", ""))
    return (int(m[1]), int(m[2])) if m else None


def renames(before: Mapping[str, tuple], now: Mapping[str, tuple]) -> dict[str, str]:
    """{new column: removed column} where a column the earlier declaration had and this one lacks read the
    same source (path into the record) as a column new to this one: the declaration renamed it."""
    removed = {path: name for name, path in before.items() if name not in now}
    return {name: removed[path] for name, path in now.items() if name not in before and path in removed}


def _elements(have: str, want: str) -> tuple[str, str] | None:
    """Both arrays: their element types; else None."""
    if have.endswith("[]") and want.endswith("[]"):
        return have[:-2], want[:-2]
    return None


def widens(have: str, want: str) -> bool:
    """Whether every value of `have` is a value of `want`, unchanged (the rule for Postgres; an array's
    element by the same rule)."""
    if elements := _elements(have, want):
        return widens(*elements)
    if (have, want) in (("integer", "bigint"), ("integer", "double")):
        return True  # a 32-bit integer is a double exactly; a bigint above 2^53 is not
    h, w = numeric(have), numeric(want)
    return h is not None and w is not None and w[1] >= h[1] and w[0] - w[1] >= h[0] - h[1]


def made_text(have: str, want: str, text_from: str | None) -> bool:
    """Whether `want` is text made from `have` by the declaration's explicit choice (`text_from: <have>`):
    a change Postgres applies through each value's text (eosflow.schema.text_from)."""
    return want == "text" and text_from == have


def iceberg_promotes(have: str, want: str) -> bool:
    """Iceberg's own type promotion (the spec's "Schema Evolution"): int to long, a decimal's precision; a
    list's element field as any field."""
    if elements := _elements(have, want):
        return iceberg_promotes(*elements)
    if (have, want) == ("integer", "bigint"):
        return True
    h, w = numeric(have), numeric(want)
    return h is not None and w is not None and w[1] == h[1] and w[0] >= h[0]


def evolve(
    declared: Sequence[Column],
    target: Sequence[Column],
    *,
    widening: Callable[[str, str], bool] = widens,
    renamed: Mapping[str, str] | None = None,
) -> Evolution:
    """What brings `target` to `declared`, or what stops it.

    renamed: {new column: removed column} for new columns that read what a removed one read (the sink
    knows the last declaration's sources).
    A declared column's `text_from` makes it text from that type (Postgres, through each value's text);
    Iceberg's columns carry none (it promotes no type to a string), so Iceberg refuses it.
    """
    have = {c.name: c for c in target}
    names = {c.name for c in declared}
    changes: list[Change] = []
    refusals: list[Refusal] = []
    for column in declared:
        old = have.get(column.name)
        if old is None:
            was = (renamed or {}).get(column.name)
            if was is not None and was in have and was not in names:
                refusals.append(Refusal(Problem.RENAMED, column.name, have=was))
            elif column.required:
                refusals.append(Refusal(Problem.NEW_REQUIRED, column.name))
            else:
                changes.append(Change(Kind.ADD, column.name, column.type))
            continue
        if old.type != column.type:
            if made_text(old.type, column.type, column.text_from) or widening(old.type, column.type):
                changes.append(Change(Kind.WIDEN, column.name, column.type, was=old.type))
            else:
                refusals.append(Refusal(Problem.TYPE, column.name, have=old.type, want=column.type))
        if column.required and not old.required:
            refusals.append(Refusal(Problem.REQUIRED, column.name))
        elif old.required and not column.required:
            changes.append(Change(Kind.RELAX, column.name, column.type))
    # Every run names them again (its log says so): the target keeps a column the declaration does not.
    changes += [Change(Kind.RETIRE, c.name, c.type) for c in target if c.name not in names]
    return Evolution(tuple(changes), tuple(refusals))
