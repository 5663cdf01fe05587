"""``GET /v1/schema`` is what an agent asks first: a fresh gateway answers within 2 s, a warm one
within 200 ms, and the schema is built again only when what is served changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from genloop.workers import OpRegistry, default_registry
from genloop.workers.backends import store_backend as store_backend_module
from genloop.workers.backends.embedded import EmbeddedBackend
from genloop.workers.ops.registry import OpSpec

HERE = Path(__file__).resolve().parent

#: A fresh process serving the default back end; it prints the seconds each call took.
COLD = """
import json, sys, tempfile, time
from pathlib import Path
import httpx
from server import LiveServer
from genloop.workers.backends.embedded import EmbeddedBackend
from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app
tmp = Path(tempfile.mkdtemp())
backend = EmbeddedBackend(tmp / "home", threads=1)
store = SqliteGatewayStore(tmp / "gateway.db")
headers = {"Authorization": f"Bearer {store.create_key('t')}"}
times = []
with LiveServer(create_app(backend, store, GatewaySettings())) as server:
    for _ in range(6):
        began = time.perf_counter()
        response = httpx.get(f"{server.url}/v1/schema", headers=headers, timeout=60)
        response.raise_for_status()
        times.append(time.perf_counter() - began)
backend.close()
print(json.dumps({"times": times, "diffusers": "diffusers" in sys.modules}))
"""


def test_a_fresh_gateway_answers_within_2s_and_a_warm_one_within_200ms(tmp_path):
    # Given a gateway process that has answered nothing yet
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    out = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    first, *warm = report["times"]
    # Then its first answer is within 2 s, later ones within 200 ms (the best of five, so
    # one scheduling hiccup of a loaded machine does not decide), with diffusers never imported
    assert first < 2.0, report
    assert min(warm) < 0.2, report
    assert not report["diffusers"]


class _Params(BaseModel):
    size: int = 1


def test_the_schema_is_built_once_until_what_is_served_changes(tmp_path, monkeypatch):
    # Given a back end, and a count of the schema builds
    registry = OpRegistry()
    registry.register(default_registry["select"])
    backend = EmbeddedBackend(tmp_path / "home", threads=0, registry=registry)
    builds = []
    build = store_backend_module.spec_schema
    monkeypatch.setattr(store_backend_module, "spec_schema",
                        lambda *a, **k: builds.append(1) or build(*a, **k))
    try:
        # When the schema is asked for three times
        first = backend.schema()
        first.graph["title"] = "changed by the caller"
        again = [backend.schema() for _ in range(2)]
        # Then it was built once, and a caller's change to its copy is not seen by the next
        assert len(builds) == 1
        assert again[0] == again[1] and again[0].graph["title"] != "changed by the caller"
        # When an op is registered, the next schema is built again and lists it
        registry.register(OpSpec(name="schema-latency-op", fn=lambda *a: None, params=_Params))
        assert "schema-latency-op" in [op.name for op in backend.schema().served.ops]
        assert len(builds) == 2
    finally:
        backend.close()
