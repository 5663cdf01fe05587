"""Redis replies as text.

genloop's Redis clients are made without ``decode_responses``, so a string reply is ``bytes``;
redis-py's types cannot know that and give every reply as ``bytes | str`` (zrange and friends
as a wider union still, for ``withscores``). :func:`text` says which one arrives, so the type
checker follows a reply from the client to the code that reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def text(reply: object) -> str:
    """A string reply as ``str``: bytes are decoded as UTF-8, a ``str`` (a client made with
    ``decode_responses``) is taken as it is, anything else is a caller's mistake."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, str):
        return reply
    raise TypeError(f"a Redis string reply was expected, got {type(reply).__name__}")


def optional_text(reply: object) -> str | None:
    """A reply that may be missing (``GET`` of a key that is not there) as ``str`` or ``None``."""
    return None if reply is None else text(reply)


def data(reply: object) -> bytes:
    """A string reply as ``bytes`` (a serialized message), encoded as UTF-8 if it is text."""
    if isinstance(reply, bytes):
        return reply
    if isinstance(reply, str):
        return reply.encode()
    raise TypeError(f"a Redis string reply was expected, got {type(reply).__name__}")


def texts(replies: Iterable[object]) -> Iterator[str]:
    """Each reply as ``str`` (see :func:`text`), skipping ``None`` (a missing key's reply)."""
    return (text(reply) for reply in replies if reply is not None)


def scored(replies: Iterable[object]) -> list[tuple[str, float]]:
    """A ``withscores`` reply (``ZRANGE``, ``ZREVRANGEBYSCORE``) as ``(member, score)`` pairs."""
    pairs = []
    for reply in replies:
        if not isinstance(reply, tuple | list) or len(reply) != 2:
            raise TypeError(f"a (member, score) pair was expected, got {reply!r}")
        member, score = reply
        pairs.append((text(member), float(score)))
    return pairs
