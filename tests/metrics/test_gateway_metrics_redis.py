"""/metrics of a gateway over a Redis pool (`genloop serve --redis`): the submitting process
counts what it submits, runs and the root nodes queued at once, though no worker runs here."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import redis
from metrics_util import moved, scrape
from redis_util import redis_url

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app
from genloop.sdk import Client, Graph
from genloop.workers.backends.catalogue import publish
from genloop.workers.backends.redis_backend import RedisBackend
from genloop.workers.ops.registry import default_registry

TOKEN = "operator-only"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
from server import LiveServer  # noqa: E402


def test_a_gateway_over_redis_counts_the_runs_and_root_nodes_it_submits(tmp_path):
    prefix = f"metered-{uuid.uuid4().hex[:8]}"
    # What a pool serving tiny published before it scaled to zero
    publish(redis.Redis.from_url(redis_url()), default_registry, ["gpu", "cpu"], prefix,
            models={"tiny": "a tiny test model"})
    backend = RedisBackend(redis_url(), prefix=prefix, artifacts=f"file://{tmp_path / 'art'}")
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    g = Graph()
    first = g.generate("a red circle", n=2, steps=2, model="tiny", id="gen")
    g.score(first, text="a red circle", evaluator="clip", id="score")
    g.generate("a blue square", n=1, steps=2, model="tiny", id="other")
    try:
        with LiveServer(create_app(backend, store, GatewaySettings(metrics_token=TOKEN))) as s:
            client = Client.http(s.url, api_key=store.create_key("metered"))
            before = scrape(f"{s.url}/metrics", TOKEN)
            client.submit(g)
            after = scrape(f"{s.url}/metrics", TOKEN)
            client.close()
    finally:
        backend.close()
        store.close()

    assert moved(before, after, "genloop_runs_total", status="submitted") == 1
    assert moved(before, after, "genloop_nodes_total", op="generate", status="queued") == 2
    assert moved(before, after, "genloop_nodes_total", op="score", status="queued") == 0
