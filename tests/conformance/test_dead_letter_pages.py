"""Dead letters read page by page, and those of one key (what the web service's list and its
message status read)."""

from __future__ import annotations

import pytest

from sqldelay import InvalidArgumentError


def _bury(q, front, keys):
    for key in keys:
        q.offer(key, {"k": key})
        assert front.dead_letters(q).bury(q.poll(), f"failed {key}") is True


def test_pages_follow_each_other_and_a_key_finds_its_letters(make_queue, clock, front):
    q, other = make_queue(), make_queue()
    _bury(q, front, ["a", "b", "c", "d", "e"])
    _bury(other, front, ["a"])
    letters = front.dead_letters(q)
    pages = [letters.list(q.name, limit=2, offset=n) for n in (0, 2, 4, 6)]
    assert [[d.key for d in page] for page in pages] == [["a", "b"], ["c", "d"], ["e"], []]

    [only] = letters.list(q.name, key="c")
    assert (only.key, only.last_error) == ("c", "failed c")
    assert letters.list(q.name, key="zz") == []
    assert {d.queue for d in letters.list(key="a")} == {q.name, other.name}


def test_bad_offsets_and_keys_are_refused(make_queue, front):
    q = make_queue()
    letters = front.dead_letters(q)
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidArgumentError, match="offset"):
            letters.list(q.name, offset=bad)
    with pytest.raises(InvalidArgumentError, match="key"):
        letters.list(q.name, key="")
