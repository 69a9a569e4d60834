"""Bounded tables of what lazy mode remembers between steps: structures seen once (a plan, a
backward template or a gradient recipe is learnt on a second sighting, as a graph that follows
the data may never repeat) and what was learnt, least recently used dropped first."""

from __future__ import annotations

import collections


class Remembered(collections.OrderedDict):
    """An ordered dict of at most ``limit`` entries: ``put`` and ``seen_before`` drop the least
    recently used; ``get_recent`` marks a found entry as just used."""

    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    def put(self, key, value=None):
        self[key] = value
        if len(self) > self.limit:
            self.popitem(last=False)

    def get_recent(self, key):
        found = self.get(key)
        if found is not None:
            self.move_to_end(key)
        return found

    def seen_before(self, key):
        """Whether ``key`` was seen once before (then forgotten: the caller learns it now);
        otherwise it is remembered as seen."""
        if key in self:
            del self[key]
            return True
        self.put(key)
        return False


__all__ = ["Remembered"]
