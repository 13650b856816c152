"""The delivery modes (docs/DESIGN.md, "Delivery modes"): when a run's positions commit against its output.

exactly_once, the default, commits both in one transaction; the other two exist to show, with real faults,
what they cost. A pipeline may declare any of the three, a publisher exactly_once or at_least_once.
The declarations parse the text once into a Delivery; everything after compares members. A Delivery is a
str (StrEnum), so what is shown or written of one is its value, byte for byte the text declared.
"""

from __future__ import annotations

from enum import StrEnum


class Delivery(StrEnum):
    EXACTLY_ONCE = "exactly_once"  # positions and output in one transaction
    AT_LEAST_ONCE = "at_least_once"  # output first, positions after: a crash in between duplicates
    AT_MOST_ONCE = "at_most_once"  # positions first, output after: a crash in between loses
