"""The history's items laid out as lines: each item in a slot, with its rendering and the line it starts at.

Plain data and arithmetic, apart from `HistoryView`, which draws the slots: where each item
starts, which item a line belongs to, and the places the cursor can stop.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from hotloop.tui.items import Item, Rendered


@dataclass
class Slot:
    item: Item
    gap: int  # blank lines before the item
    rendered: Rendered | None = None
    height: int = 1  # rendered height, or an estimate until rendered


@dataclass(frozen=True)
class Place:
    """A cursor position: an item, and the entry in it (a tool call, the reasoning), if any."""

    slot: int
    key: str | None
    line: int  # line within the item


class SlotLayout:
    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.starts: list[int] = []
        self.end = 0  # where the history ends: the lead's and the finished items' lines, gaps included

    def arrange(self, lead: int) -> None:
        """Lay the slots out below `lead` lines, on their heights as they are now."""
        starts, line = [], lead
        for slot in self.slots:
            line += slot.gap
            starts.append(line)
            line += slot.height
        self.starts, self.end = starts, line

    def locate(self, y: int) -> tuple[int, int] | None:
        """(slot index, line within the item) for history line `y`, or None on a gap."""
        index = bisect_right(self.starts, y) - 1
        if index < 0:
            return None
        line = y - self.starts[index]
        return (index, line) if line < self.slots[index].height else None

    def places(self) -> list[Place]:
        """Where the cursor can stop, in order: each entry of an item that has some, else each item one can copy."""
        places = []
        for index, slot in enumerate(self.slots):
            targets = slot.rendered.targets if slot.rendered is not None else {}
            if targets:
                places += [Place(index, key, line) for line, key in sorted(targets.items())]
            elif slot.item.copy_text() is not None:
                places.append(Place(index, None, 0))
        return places
