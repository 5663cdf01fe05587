"""A hostile or careless tenant through the real gateway: each hole found in the multi-tenant
review, reproduced as the plain HTTP request that showed it, now answered safely."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from server import LiveServer

from genloop.gateway import GatewaySettings, TenantLimits, create_app
from genloop.gateway.service import scoped_key
from genloop.sdk import Graph, Loop
from genloop.sdk.wire import ApiError
from genloop.workers.models.models_config import ModelsConfig


def post(url: str, key: str, body: bytes | str, **headers: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **headers}
    return httpx.post(f"{url}/v1/runs", content=body, headers=headers, timeout=30)


def error(response: httpx.Response, status: int, code: str) -> ApiError:
    assert response.status_code == status, response.text
    body = ApiError.model_validate_json(response.content)
    assert body.code == code
    return body


def messages(body: ApiError) -> str:
    return "\n".join(p["message"] for p in body.details.get("problems", []))


def wait_finished(stack, run_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not stack.backend.get(run_id).status.terminal:
        assert time.monotonic() < deadline, "run did not finish"
        time.sleep(0.05)


def images(label: str, n: int = 2) -> Graph:
    g = Graph()
    g.add("gw-image", params={"label": label, "n": n}, id="image")
    return g


def test_an_artifact_key_sent_as_a_prompt_does_not_grant_the_artifact(stack):
    # Given alice's finished run and one of its artifact keys
    _, alice = stack.tenant()
    _, bob = stack.tenant()
    run = stack.client(alice).submit(images("alice-secret"))
    key = run.wait(timeout=30).items("image")[0]["artifact"]
    # When bob submits a generate node (and a custom op) that echo the key into their outputs
    g = Graph()
    g.generate(key, n=1, model="tiny", id="echo")
    g.add("gw-image", params={"label": key, "n": 1}, id="label")
    response = post(stack.url, bob, g.model_dump_json())
    assert response.status_code == 201, response.text
    result = stack.client(bob).get(response.json()["id"]).wait(timeout=180)
    assert result.items("echo")[0].prompt == key
    assert result.items("label")[0]["label"] == key
    # Then the key is still not his to read; his own generated image is
    headers = {"Authorization": f"Bearer {bob}"}
    assert httpx.get(f"{stack.url}/v1/artifacts/{key}", headers=headers).status_code == 404
    own = result.items("echo")[0].artifact
    assert httpx.get(f"{stack.url}/v1/artifacts/{own}", headers=headers).status_code == 200


def test_a_doubling_graph_is_costed_as_what_it_makes(stack):
    # Given 20 levels of two generate nodes, each fed by both nodes of the level above: each
    # makes one image per input item, so level k makes 2**k images per node
    g = Graph()
    above = [g.generate("p", n=1, model="tiny", id="a0"), g.generate("p", n=1, model="tiny",
                                                                      id="b0")]
    for level in range(1, 21):
        above = [g.generate(model="tiny", inputs=above, id=f"{side}{level}") for side in "ab"]
    _, key = stack.tenant()
    # When it is submitted
    body = error(post(stack.url, key, g.model_dump_json()), 429, "candidate_limit")
    # Then the images counted are the sum over levels, not one per node
    assert body.details["requested"] == sum(2 * 2**k for k in range(21))
    assert body.details["limit"] == 1024


def test_a_run_over_the_cost_budget_is_refused_with_the_figures(stack):
    _, key = stack.tenant()
    g = Graph()
    g.generate("a huge poster", n=256, width=4096, height=4096, steps=200, model="tiny")
    body = error(post(stack.url, key, g.model_dump_json()), 429, "cost_limit")
    # 256 images x 16.78 megapixels x 200 steps x (1 + 3 retries)
    assert body.details["requested"] == pytest.approx(256 * 4096 * 4096 / 1e6 * 200 * 4)
    assert body.details["limit"] == 100_000


#: What one ``_costed`` run costs: 4 images x 0.001024 MP x 4 steps x 4 attempts.
ONE_RUN = 4 * 32 * 32 / 1e6 * 4 * 4


def _costed(held: bool = False) -> Graph:
    """A run of cost ``ONE_RUN``; ``held``: behind a wait that lasts until it is cancelled."""
    g = Graph()
    if held:
        g.add("gw-wait", params={"sleep": 60.0}, id="wait", inputs=[])
    g.generate("p", n=4, model="tiny", id="gen")
    return g


@pytest.fixture
def held_runs(stack):
    """Posts held runs for a tenant's key (201 expected), cancelled at the end."""
    posted: list[tuple[str, str]] = []

    def hold(key: str, **headers: str) -> str:
        response = post(stack.url, key, _costed(held=True).model_dump_json(), **headers)
        assert response.status_code == 201, response.text
        posted.append((key, response.json()["id"]))
        return posted[-1][1]

    yield hold
    for key, run_id in posted:
        httpx.post(f"{stack.url}/v1/runs/{run_id}/cancel",
                   headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_concurrent_cost_counts_the_tenants_unfinished_runs(stack, held_runs):
    # Given a tenant whose unfinished runs may cost 2.5 runs' worth at once, with two running
    _, key = stack.tenant(TenantLimits(max_concurrent_cost=ONE_RUN * 2.5))
    for _ in range(2):
        held_runs(key)
    # When a third run of the same cost is submitted while both run
    body = error(post(stack.url, key, _costed().model_dump_json()), 429, "concurrent_cost_limit")
    # Then the refusal counts both (not only the last looked at), and it is retryable
    assert body.details["requested"] == pytest.approx(3 * ONE_RUN)
    again = post(stack.url, key, _costed().model_dump_json())
    assert "retry-after" in {k.lower() for k in again.headers}


def test_a_keyed_run_the_back_end_lost_is_made_again_and_counted_like_a_new_one(
        stack, held_runs):
    # Given a tenant whose unfinished runs may cost 1.5 runs' worth at once, and whose keyed
    # run the back end no longer has (a wiped home)
    name, key = stack.tenant(TenantLimits(max_concurrent_cost=ONE_RUN * 1.5))
    stack.store.add_run("f" * 32, name, scoped_key(name, "k"), ONE_RUN)
    # When the tenant posts that key again, Then the back end makes the run anew, the lost
    # one is forgotten, and the key names the new run
    run_id = held_runs(key, **{"Idempotency-Key": "k"})
    assert stack.store.owner("f" * 32) is None
    assert stack.store.run_for_key(scoped_key(name, "k")) == run_id
    # And the new run counts its cost while it runs, like any other
    body = error(post(stack.url, key, _costed().model_dump_json()), 429, "concurrent_cost_limit")
    assert body.details["requested"] == pytest.approx(2 * ONE_RUN)


def test_infinite_backoff_is_refused_and_nothing_is_stored(stack):
    name, key = stack.tenant()
    raw = ('{"kind": "graph", "nodes": [{"id": "w", "op": "gw-wait", '
           '"max_backoff": Infinity}]}')
    body = error(post(stack.url, key, raw), 422, "invalid_request")
    (problem,) = body.details["problems"]
    assert problem["loc"][-1] == "max_backoff" and "finite" in problem["message"]
    assert stack.store.open_runs(name) == []
    # And the pool goes on serving everyone (the sweeper has nothing unreadable to trip on)
    _, other = stack.tenant()
    assert stack.client(other).submit(images("after")).wait(timeout=30).status == "succeeded"


def test_non_finite_numbers_anywhere_in_a_spec_are_refused(stack):
    # NaN in a loop's target, Infinity in a select threshold (free-form params): both used to
    # be stored as null
    _, key = stack.tenant()
    for rounds in (1, 2):  # one round has no refine node to carry the target
        loop = json.dumps({"kind": "loop", "prompt": "p", "rounds": rounds, "candidates": 1,
                           "model": "tiny", "target": "T"}).replace('"T"', "NaN")
        body = error(post(stack.url, key, loop), 422, "invalid_request")
        assert "finite" in body.details["problems"][0]["message"]
    g = Graph()
    g.select(g.score(g.generate("p", model="tiny"), text="p"), strategy="threshold",
             threshold=0.5, id="sel")
    raw = g.model_dump_json().replace("0.5", "Infinity")
    body = error(post(stack.url, key, raw), 422, "invalid_graph")
    assert messages(body) == "params.threshold: inf is not a finite number"


@pytest.mark.parametrize("model", ["../../", "/etc", "/no/such/dir", "openai/clip-vit",
                                   "tiny/../tiny"])
def test_path_like_and_unlisted_model_names_are_refused_at_submit(stack, model):
    _, key = stack.tenant()
    g = Graph()
    g.generate("p", model=model, id="gen")
    start = time.monotonic()
    body = error(post(stack.url, key, g.model_dump_json()), 422, "invalid_graph")
    # One answer for every such name: it never depends on what exists on the host
    assert messages(body) == f"unknown model {model!r}; allowed: shapes, tiny"
    assert [p["path"] for p in body.details["problems"]] == ["nodes[0].params.model"]
    assert time.monotonic() - start < 5


def test_unknown_evaluator_strategy_and_queue_are_refused_at_submit(stack):
    _, key = stack.tenant()
    g = Graph()
    gen = g.generate("p", model="tiny", id="gen")
    sc = g.score(gen, text="p", evaluator="no-such-evaluator", id="score")
    g.refine(sc, prompt="p", strategy="no-such-strategy", id="refine")
    g.add("gw-wait", id="queued", queue="no-such-queue")
    body = error(post(stack.url, key, g.model_dump_json()), 422, "invalid_graph")
    text = messages(body)
    assert "unknown evaluator 'no-such-evaluator'; allowed: " in text and "clip" in text
    from genloop.workers.ops.refine import default_refiners

    assert ("unknown strategy 'no-such-strategy'; allowed: " + ", ".join(default_refiners.names())
            in text and "agent" in default_refiners.names())
    assert "no workers consume queue 'no-such-queue'" in text
    assert set(body.details["node_ids"]) == {"score", "refine", "queued"}


def test_a_tenants_evaluator_allow_list_narrows_the_operators(stack):
    _, key = stack.tenant(TenantLimits(evaluators=["shapes-clip"], models=["tiny"]))
    loop = Loop(prompt="p", rounds=1, candidates=1, model="shapes", evaluator="clip")
    body = error(post(stack.url, key, loop.model_dump_json()), 422, "invalid_graph")
    text = messages(body)
    assert "unknown model 'shapes'; allowed: tiny" in text
    assert "unknown evaluator 'clip'; allowed: shapes-clip" in text


def test_a_long_prompt_is_refused_before_it_is_copied_into_every_candidate(stack):
    _, key = stack.tenant()
    g = Graph()
    g.generate("x" * 4001, n=16, model="tiny", id="gen")
    body = error(post(stack.url, key, g.model_dump_json()), 422, "invalid_graph")
    assert messages(body) == "params.prompt: 4001 characters; at most 4000 allowed"


def test_a_lone_surrogate_is_a_422_not_a_500(stack):
    _, key = stack.tenant()
    # A typed field (a loop's prompt) is refused by the request model; a graph's params are
    # free-form JSON, where the lone surrogate used to reach the store and fail there
    loop = '{"kind": "loop", "prompt": "a \\ud800 cat", "model": "tiny"}'
    error(post(stack.url, key, loop), 422, "invalid_request")
    graph = ('{"kind": "graph", "nodes": [{"id": "g", "op": "generate", '
             '"params": {"prompt": "a \\ud800 cat", "model": "tiny"}}]}')
    body = error(post(stack.url, key, graph), 422, "invalid_graph")
    assert messages(body) == "params.prompt: not valid Unicode (a lone surrogate)"


def test_a_body_that_is_not_json_is_415(stack):
    _, key = stack.tenant()
    body = images("x").model_dump_json()
    error(post(stack.url, key, body, **{"Content-Type": "text/plain"}), 415,
          "unsupported_media_type")
    error(post(stack.url, key, body, **{"Content-Type": "application/x-www-form-urlencoded"}),
          415, "unsupported_media_type")
    assert post(stack.url, key, body,
                **{"Content-Type": "application/json; charset=utf-8"}).status_code == 201


def test_last_event_id_is_parsed_strictly_and_clamped(stack):
    _, key = stack.tenant()
    run = stack.client(key).submit(images("events"))
    run.wait(timeout=30)
    url = f"{stack.url}/v1/runs/{run.id}/events?follow=false"
    auth = {"Authorization": f"Bearer {key}"}
    huge = httpx.get(url, headers={**auth, "Last-Event-ID": "9999999999999999999"})
    assert huge.status_code == 200 and "data:" not in huge.text  # nothing after it
    for bad in ("\u0663", "12a", "-1", "1e3"):
        response = httpx.get(url, headers={**auth, "Last-Event-ID": bad.encode()})
        error(response, 422, "invalid_request")
    first = httpx.get(url, headers={**auth, "Last-Event-ID": "0"})
    assert first.status_code == 200 and "data:" in first.text


def test_a_409_names_the_run_the_key_belongs_to(stack):
    _, key = stack.tenant()
    first = post(stack.url, key, images("a").model_dump_json(), **{"Idempotency-Key": "k1"})
    assert first.status_code == 201
    body = error(post(stack.url, key, images("b").model_dump_json(), **{"Idempotency-Key": "k1"}),
                 409, "idempotency_conflict")
    assert body.details["run_id"] == first.json()["id"]


def _cached(stack, run_id: str) -> bool:
    events = stack.backend.events(run_id, limit=1000)
    return any(e.type == "instance.succeeded" and "cached" in (e.message or "") for e in events)


def test_results_are_not_shared_across_tenants_unless_the_operator_says(stack):
    # Given alice's finished run
    _, alice = stack.tenant()
    _, bob = stack.tenant()
    spec = images(f"shared-{time.monotonic_ns()}")
    stack.client(alice).submit(spec).wait(timeout=30)
    # When bob submits the exact spec, even naming alice's namespace himself
    raw = json.loads(spec.model_dump_json())
    raw["namespace"] = "tenant:alice"
    response = post(stack.url, bob, json.dumps(raw))
    wait_finished(stack, response.json()["id"])
    # Then his run did the work itself: the cache told him nothing
    assert not _cached(stack, response.json()["id"])
    # And behind a gateway that shares results, a third tenant's copy is served from the cache
    settings = GatewaySettings(share_results=True, limits=TenantLimits(max_concurrent_runs=20))
    with LiveServer(create_app(stack.backend, stack.store, settings)) as shared:
        _, carol = stack.tenant()
        _, dave = stack.tenant()
        spec = images(f"shared-{time.monotonic_ns()}")
        first = post(shared.url, carol, spec.model_dump_json())
        wait_finished(stack, first.json()["id"])
        second = post(shared.url, dave, spec.model_dump_json())
        wait_finished(stack, second.json()["id"])
        assert _cached(stack, second.json()["id"])


def test_a_models_config_file_names_what_tenants_may_use(stack, tmp_path):
    # Given an operator's models config with one local model
    config = tmp_path / "models.toml"
    (tmp_path / "sd").mkdir()
    config.write_text('[models.house-sd]\nsource = "./sd"\nsteps = 10\nwidth = 64\n'
                      "height = 64\n")
    settings = GatewaySettings(models=ModelsConfig.load(config),
                               limits=TenantLimits(max_concurrent_runs=20, max_cost_per_run=1.0))
    with LiveServer(create_app(stack.backend, stack.store, settings)) as gateway:
        _, key = stack.tenant()
        # When a tenant names a model outside it: 422 listing the allowed names
        g = Graph()
        g.generate("p", model="sd", id="gen")
        body = error(post(gateway.url, key, g.model_dump_json()), 422, "invalid_graph")
        assert messages(body) == "unknown model 'sd'; allowed: house-sd, shapes, tiny"
        # And a configured one is costed with its own defaults: 64 x 64 x 10 steps x 4 attempts
        g = Graph()
        g.generate("p", model="house-sd", n=8, id="gen")
        body = error(post(gateway.url, key, g.model_dump_json()), 429, "cost_limit")
        assert body.details["requested"] == pytest.approx(8 * 64 * 64 / 1e6 * 10 * 4)


def test_evaluator_options_are_data_only_for_a_tenant(stack):
    _, key = stack.tenant(TenantLimits(evaluators=["clip", "brand-palette", "composite"]))
    path = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="clip",
                evaluator_options={"pretrained": "/etc/passwd"})
    assert "evaluator 'clip' takes no options from a tenant" in messages(
        error(post(stack.url, key, path.model_dump_json()), 422, "invalid_graph"))
    g = Graph()
    gen = g.generate("p", model="tiny", id="gen")
    g.score(gen, text="p", evaluator="composite", id="score", options={
        "weights": {"clip": 1, "hf-clip": 1},
        "options": {"clip": {"pretrained": "/etc/passwd"}}})
    body = error(post(stack.url, key, g.model_dump_json()), 422, "invalid_graph")
    said = [(p["path"], p["message"]) for p in body.details["problems"]]
    assert said[0][0] == "nodes[1].params.options.weights.hf-clip"
    assert said[0][1].startswith("unknown evaluator 'hf-clip'")
    assert said[1][0] == "nodes[1].params.options.options.clip"
    assert said[1][1].startswith("evaluator 'clip' takes no options")
    brand = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="composite",
                 evaluator_options={"weights": {"clip": 1, "brand-palette": 0.2},
                                    "options": {"brand-palette": {"palette": ["#e4002b"]}}})
    accepted = post(stack.url, key, brand.model_dump_json())
    assert accepted.status_code in (200, 201, 202), accepted.text


def test_an_unknown_fallback_strategy_is_refused_at_submit(stack):
    from genloop.workers.ops.refine import default_refiners

    allowed = sorted(set(default_refiners.names()) - {"agent"})
    _, key = stack.tenant()
    # A loop's fallback, and a graph's refine node's: neither may name an unknown strategy,
    # nor 'agent' (it is what the fallback stands in for)
    for fallback in ("no-such-strategy", "agent"):
        loop = Loop(prompt="p", rounds=2, candidates=1, model="tiny", refiner="agent",
                    fallback=fallback)
        body = error(post(stack.url, key, loop.model_dump_json()), 422, "invalid_graph")
        (problem,) = body.details["problems"]
        assert problem["message"] == (f"unknown fallback {fallback!r}; allowed: "
                                       + ", ".join(allowed))
        assert problem["path"] == "fallback" and problem["allowed"] == allowed
    g = Graph()
    sc = g.score(g.generate("p", model="tiny", id="gen"), text="p", id="score")
    g.refine(sc, prompt="p", strategy="agent", fallback="no-such-strategy", id="refine")
    body = error(post(stack.url, key, g.model_dump_json()), 422, "invalid_graph")
    assert messages(body) == "unknown fallback 'no-such-strategy'; allowed: " + ", ".join(allowed)
    assert body.details["problems"][0]["path"] == "nodes[2].params.fallback"


def test_a_fan_out_past_the_tenants_limits_fails_its_node_when_it_comes(stack, tmp_path):
    from genloop_test_ops import executions

    tiny = 32 * 32 / 1e6 * 4 * 4  # megapixel-steps of one tiny image, retries counted
    _, key = stack.tenant(TenantLimits(max_concurrent_runs=20, max_candidates_per_run=8,
                                       max_cost_per_run=5.5 * tiny))
    client = stack.client(key)
    # Given a custom op that returns 40 items, planned at submit as one, feeding a map
    log = str(tmp_path / "log")
    g = Graph()
    src = g.add("test-items", params={"log": log, "value": 40}, id="src")
    each = g.add("test-each", inputs=[src], map=True, params={"log": log}, id="each")
    g.add("test-sum", inputs=[each], params={"log": log}, id="sum")
    # When it runs, then the map node fails with the figures instead of expanding, nothing
    # downstream runs, and the run fails
    result = client.submit(g).wait(timeout=60)
    assert result.status == "failed"
    assert result.outputs["each"].error == ("LimitExceeded: 40 input items; at most 8 per node "
                                            "(an op upstream returned more items than planned)")
    assert result.outputs["sum"].status == "skipped"
    assert executions(log) == 1  # the source alone ran

    def fed_by_requests(n: int, generates: int) -> Graph:
        g = Graph()
        asks = g.add("gw-prompts", params={"prompt": "p", "n": n}, id="asks")
        for i in range(generates):
            g.generate(model="tiny", inputs=[asks], map=True, id=f"gen{i}")
        return g

    # And two generate nodes fed 6 requests each would take the run past its 8 images
    result = client.submit(fed_by_requests(6, 2)).wait(timeout=60)
    assert result.outputs["gen0"].error == ("LimitExceeded: the run would generate 12 images; "
                                            "at most 8 (an op upstream returned more items "
                                            "than planned)")
    # And 6 tiny images are within 8 images but past the cost of 5.5
    result = client.submit(fed_by_requests(6, 1)).wait(timeout=60)
    assert result.outputs["gen0"].error.startswith(
        f"LimitExceeded: the run would cost {6 * tiny:.4g} megapixel-steps; at most "
        f"{5.5 * tiny:g}")
    # While a fan-out within them runs
    result = client.submit(fed_by_requests(5, 1)).wait(timeout=180)
    assert result.status == "succeeded" and len(result.items("gen0")) == 5
