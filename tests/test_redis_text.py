"""Redis replies as text (genloop.workers.stores.redis_text): what a client without
``decode_responses`` returns (bytes) and what one with it returns (str) read the same, and a
reply of another shape is refused rather than turned into text."""

from __future__ import annotations

import pytest

from genloop.workers.stores.redis_text import data, optional_text, scored, text, texts


def test_bytes_and_str_replies_read_as_the_same_text():
    assert text(b"run-\xc3\xa9") == text("run-é") == "run-é"
    assert data(b"\x00\x01") == b"\x00\x01" and data("é") == "é".encode()
    assert optional_text(None) is None and optional_text(b"k") == "k"


def test_missing_keys_are_skipped_and_order_is_kept():
    assert list(texts([b"b", None, "a", b"c"])) == ["b", "a", "c"]


def test_scored_replies_become_member_score_pairs():
    assert scored([(b"r1", 2.0), ["r2", "3.5"]]) == [("r1", 2.0), ("r2", 3.5)]


@pytest.mark.parametrize("reply", [1, [b"a"], ("a", 1.0)])
@pytest.mark.parametrize("read", [text, data])
def test_a_reply_that_is_no_string_is_refused_naming_what_came(read, reply):
    with pytest.raises(TypeError, match=f"string reply was expected, got {type(reply).__name__}"):
        read(reply)


@pytest.mark.parametrize("reply", [b"r1", [b"r1"], (b"r1", 1.0, 2.0)])
def test_a_member_without_its_score_is_refused(reply):
    with pytest.raises(TypeError, match="pair was expected"):
        scored([reply])
