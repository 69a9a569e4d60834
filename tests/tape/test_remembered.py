"""Remembered: the bounded, least-recently-used tables of what lazy mode learns between steps."""

from tape.remembered import Remembered


def test_a_key_counts_as_seen_before_on_its_second_sighting_only():
    seen = Remembered(4)
    assert not seen.seen_before("a")  # first sighting: remembered
    assert seen.seen_before("a")  # second: the caller learns it, the mark is dropped
    assert not seen.seen_before("a")


def test_the_least_recently_used_entry_goes_first():
    table = Remembered(2)
    table.put("a", 1)
    table.put("b", 2)
    assert table.get_recent("a") == 1  # a is now the most recent
    table.put("c", 3)
    assert list(table) == ["a", "c"] and table.get_recent("b") is None
