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
        self._places: list[Place] | None = None  # asked at every scroll: kept until the slots change

    def arrange(self, lead: int) -> None:
        """Lay the slots out below `lead` lines, on their heights as they are now."""
        starts, line = [], lead
        for slot in self.slots:
            line += slot.gap
            starts.append(line)
            line += slot.height
        self.starts, self.end = starts, line
        self._places = None

    def rendered(self) -> None:
        """A slot was rendered again: its entries may have changed."""
        self._places = None

    def place(self, index: int) -> Place | None:
        """Place `index`, the last one for -1; None if there is no such place."""
        places = self.places()
        return places[index] if places and -1 <= index < len(places) else None

    def shows(self, place: Place, first: int, height: int) -> bool:
        """Whether a line of `place` (its entry's, or its whole item's) is among the `height` lines from `first`."""
        start = self.starts[place.slot]
        if place.key is not None:
            top, end = start + place.line, start + place.line + 1
        else:
            top, end = start, start + self.slots[place.slot].height
        return top < first + height and end > first

    def nearest_shown(self, index: int, first: int, height: int) -> int | None:
        """The place among those lines nearest place `index`, out of them: the first if it is above, else the last."""
        shown = [n for n, place in enumerate(self.places()) if self.shows(place, first, height)]
        if not shown:
            return None
        return shown[0] if self.starts[self.places()[index].slot] < first else shown[-1]

    def locate(self, y: int) -> tuple[int, int] | None:
        """(slot index, line within the item) for history line `y`, or None on a gap."""
        index = bisect_right(self.starts, y) - 1
        if index < 0:
            return None
        line = y - self.starts[index]
        return (index, line) if line < self.slots[index].height else None

    def places(self) -> list[Place]:
        """Where the cursor can stop, in order: each entry of an item that has some, else each item one can copy."""
        if self._places is not None:
            return self._places
        places = []
        for index, slot in enumerate(self.slots):
            targets = slot.rendered.targets if slot.rendered is not None else {}
            if targets:
                places += [Place(index, key, line) for line, key in sorted(targets.items())]
            elif slot.item.copy_text() is not None:
                places.append(Place(index, None, 0))
        self._places = places
        return places
