"""A request's ``cache`` setting reaches the engine: 'off' is exact, the default is close."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from genloop.sdk import Graph, GraphError


def _pixels(client, result, node):
    return [np.asarray(Image.open(io.BytesIO(client.read_artifact(c.artifact))), dtype=float)
            for c in result.items(node)]


def test_cache_off_differs_from_the_cached_default_only_slightly(client):
    g = Graph()
    off = g.generate("a blue square", model="tiny", n=2, steps=8, cache="off", id="off")
    cached = g.generate("a blue square", model="tiny", n=2, steps=8, cache="deepcache:2",
                        id="cached")

    result = client.submit(g).wait(timeout=180)

    a, b = _pixels(client, result, off), _pixels(client, result, cached)
    assert any((x != y).any() for x, y in zip(a, b, strict=True))  # caching did something
    mse = np.mean([((x - y) ** 2).mean() for x, y in zip(a, b, strict=True)])
    assert 10 * np.log10(255**2 / mse) > 25


def test_a_bad_cache_mode_is_a_graph_error(client):
    g = Graph()
    g.generate("a cat", model="tiny", cache="sometimes")
    with pytest.raises(GraphError, match="params.cache"):
        client.submit(g)
