"""A declared regular expression (`pattern`, `text_pattern`), run by RE2 (google-re2).

Python's `re` backtracks: `^(a+)+$` over 26 characters took 6.8 s, four times more per two more,
on every retry of the task. RE2's time is linear in the value, whatever the pattern; in exchange it
has no backreference and no look-around, which a declaration is refused for when it is read, with
the construct named and a rewrite suggested.

RE2's syntax is Python's for what both run, with its own meanings in a few places: `$` is the end
of the value (Python's also matches before a final newline, so `^[A-Z]{3}$` took "USD\\n"), and
`\\d`, `\\w`, `\\s`, `\\b` are ASCII (Python's also take other scripts' digits and letters).
Python's `\\Z` (the very end) is RE2's `\\z`, and is read as such.

A `Pattern` is pickled as its source and compiled again where it is loaded (Spark ships a check to
its workers by value), once per process.
"""

from __future__ import annotations

import functools
import re

import re2
from re2 import _re2  # the compiled program: a match without the wrapper's Match object (5x faster)

_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_ANCHOR_BOTH = _re2.RE2.Anchor.ANCHOR_BOTH
_NO_MATCH = (-1, -1)

# What RE2 refuses that Python runs: (a test of the source, the construct, the rewrite).
_UNSUPPORTED: tuple[tuple[re.Pattern, str, str], ...] = tuple(
    (re.compile(test), construct, rewrite)
    for test, construct, rewrite in (
        (
            r"\\[1-9]|\(\?P=|\\g<",
            "a backreference (\\1, (?P=name))",
            "match the group's pattern again instead of what it matched, or compare the two in a transform",
        ),
        (r"\(\?<?=", "a look-ahead or look-behind ((?=...), (?<=...))", "match the text itself, or drop it"),
        (
            r"\(\?<?!",
            "a negative look-ahead or look-behind ((?!...), (?<!...))",
            "list what may come there as a character class, e.g. [^x], or check it in a transform",
        ),
        (r"\(\?>", "an atomic group (?>...)", "use a plain group (?:...); RE2 never backtracks"),
        (
            r"[*+?}]\+",
            "a possessive quantifier (*+, ++, ?+)",
            "use the plain quantifier; RE2 never backtracks",
        ),
        (r"\(\?\(", "a conditional group (?(1)...)", "spell out both alternatives with |"),
        (r"\(\?#", "a comment group (?#...)", "drop the comment"),
        (r"\(\?[aiLmsu]*x", "verbose mode (?x)", "write the pattern without its spaces and comments"),
        (r"\(\?[imsx]*[aLu]", "the flag (?a), (?L) or (?u)", "drop it (RE2 reads \\d, \\w, \\s as ASCII)"),
    )
)


class PatternError(ValueError):
    """A pattern RE2 cannot run; the message names the construct and the rewrite."""


def _options(capture: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = not capture
    return options


def _re2_source(source: str) -> str:
    """`source` with Python's `\\Z` spelled as RE2 spells it, `\\z`; an escaped backslash stays one."""
    out, i = [], 0
    while i < len(source):
        pair = source[i : i + 2]
        out.append("\\z" if pair == "\\Z" else pair if pair[:1] == "\\" else source[i])
        i += len(pair) if pair[:1] == "\\" else 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _program(source: str, capture: bool) -> _re2.RE2:
    """The compiled program of `source`, once per process; PatternError if RE2 refuses it."""
    program = _re2.RE2(_re2_source(source).encode("utf-8", "surrogatepass"), _options(capture))
    if not program.ok():
        raise PatternError(_why(source, program.error()))
    return program


def _why(source: str, error: str | bytes) -> str:
    detail = error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    for test, construct, rewrite in _UNSUPPORTED:
        if test.search(source):
            return (
                f"uses {construct}, which RE2 cannot run (eosflow runs patterns in RE2, whose time is "
                f"linear in the value); {rewrite}"
            )
    return f"is not a regular expression RE2 runs: {detail}"


def _encoded(text: str) -> bytes:
    # surrogatepass: a transform's str may hold a lone surrogate; it then matches nothing it should not.
    return text.encode("utf-8", "surrogatepass")


def _decoded(part: bytes) -> str:
    return part.decode("utf-8", "surrogatepass")  # a span RE2 found starts and ends on a character


class Pattern:
    """A declared regular expression: `search` (a column's `pattern`: found anywhere, as re.search)
    and `fullmatch_groups` (`text_pattern`: the whole value, its named groups)."""

    __slots__ = ("pattern", "groupindex", "_search", "_groups")

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise PatternError(f"must be a regular expression in a string, not {pattern!r}")
        self.pattern = pattern
        program = _program(pattern, True)  # refuses what RE2 cannot run
        self.groupindex: dict[str, int] = {
            (name.decode() if isinstance(name, bytes) else name): i
            for name, i in program.NamedCapturingGroups()
        }
        self._search = _program(pattern, False).Match  # no groups: a search is just whether
        self._groups = program.Match

    def search(self, text: str) -> tuple[int, int] | None:
        """Where the pattern first matches in `text` (a byte span), or None."""
        encoded = _encoded(text)
        span = self._search(_UNANCHORED, encoded, 0, len(encoded))[0]
        return None if span == _NO_MATCH else span

    def fullmatch_groups(self, text: str) -> dict[str, str | None] | None:
        """The named groups of a match of the whole `text` (None: a group that took no part); None
        if the pattern does not match the whole text."""
        encoded = _encoded(text)
        spans = self._groups(_ANCHOR_BOTH, encoded, 0, len(encoded))
        if spans[0] == _NO_MATCH:
            return None
        return {
            name: None if (span := spans[i]) == _NO_MATCH else _decoded(encoded[span[0] : span[1]])
            for name, i in self.groupindex.items()
        }

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return Pattern, (self.pattern,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Pattern({self.pattern!r})"
