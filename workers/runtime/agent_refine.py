"""Agent-driven refine: a loop pauses at its refine node until an agent answers.

The refine op (strategy ``agent``) appends a ``refine.requested`` event whose message is a
:class:`~genloop.sdk.ops.RefineRequest` (the scored candidates with their critiques), then
waits. An agent answers through any back end (:func:`answer`): the answer is appended as a
``refine.answered`` event, which the waiting op reads.

Exactly one answer counts. Whoever answers first, the agent or the op giving up at its timeout,
takes a lease on ``refine-answer:{run}:{node}`` (the store's ``SET NX`` claim, held far longer
than any run); the loser is refused. So a second answer, or one after the fallback began, is a
:class:`~genloop.sdk.errors.RefineConflict` (HTTP 409), and an answer that won the lease just as
the op timed out is still used: the op, losing the lease, goes on waiting for its event.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from genloop.sdk.errors import Cancelled, GraphError, GraphProblem, RefineConflict, Transient
from genloop.sdk.graph import Graph
from genloop.sdk.ops import (
    GenerationRequest,
    RefineAnswer,
    RefineParams,
    RefineRequest,
    ScoredCandidate,
)
from genloop.sdk.validation import bad_values

from ..ops.registry import OpRegistry
from ..stores.base import StateStore
from ..stores.records import EventRecord
from .context import OpContext
from .planner import answer_cost_problem

REQUESTED, ANSWERED = "refine.requested", "refine.answered"
#: The answer's lease outlives any run; it only has to stop a second answer.
_LEASE_TTL = 30 * 24 * 3600.0
_POLL = 0.1


def _lease(run_id: str, node_id: str) -> str:
    return f"refine-answer:{run_id}:{node_id}"


def _events(store: StateStore, run_id: str, after: int, kind: str):
    while batch := store.events(run_id, after, 500):
        for event in batch:
            if event.type == kind:
                yield event
        after = batch[-1].id


def answer(store: StateStore, run_id: str, reply: RefineAnswer,
           registry: OpRegistry | None = None) -> RefineAnswer:
    """Hand ``reply`` to the refine node waiting in ``run_id``; ``RefineConflict`` if none is
    waiting for it (never asked, already answered, or fallen back); ``GraphError`` naming each
    problem if the answer may not run (:func:`answer_problems`; with ``registry``, the run's
    cost limit too). A refused answer is refused before the claim, so the pause stays open for
    a valid one, or for its fallback at the timeout."""
    store.get_run(run_id)  # NotFound for an unknown run
    asked = {e.node_id: e for e in _events(store, run_id, 0, REQUESTED)}
    answered = {e.node_id: e for e in _events(store, run_id, 0, ANSWERED)}
    node_id = reply.node_id
    if node_id is None:
        waiting = sorted(set(asked) - set(answered))
        if not waiting:
            raise RefineConflict(f"run {run_id} has no refine waiting for an answer")
        if len(waiting) > 1:
            raise RefineConflict(f"run {run_id} has {len(waiting)} refine nodes waiting "
                                 f"({', '.join(waiting)}); name one with node_id")
        node_id = waiting[0]
    if node_id not in asked:
        raise RefineConflict(f"refine node {node_id!r} of run {run_id} has not asked for an "
                             "answer")
    if node_id in answered:
        raise _taken(run_id, node_id)
    pause = RefineRequest.model_validate_json(asked[node_id].message or "")
    problems = answer_problems(pause, reply)
    if registry is not None and not problems:
        graph = Graph.model_validate(store.run_spec(run_id).graph)
        earlier = [(e.node_id, RefineAnswer.model_validate_json(e.message).requests)
                   for e in answered.values() if e.node_id and e.message]
        if why := answer_cost_problem(graph, registry, node_id, reply.requests, earlier):
            problems.append(GraphProblem(node_id=node_id, path="requests", message=why))
    if problems:
        raise GraphError(problems)
    if not store.claim(_lease(run_id, node_id), f"agent:{uuid.uuid4().hex}", _LEASE_TTL):
        raise _taken(run_id, node_id)
    reply = reply.model_copy(update={"node_id": node_id})
    store.append_event(run_id, EventRecord(type=ANSWERED, time=time.time(), node_id=node_id,
                                           message=reply.model_dump_json()))
    return reply


def answer_problems(pause: RefineRequest, reply: RefineAnswer) -> list[GraphProblem]:
    """What makes ``reply`` unusable for ``pause``: more images than the round may make, an
    edit of an image the pause did not show (an unknown key would fail the next round, and
    the run with it), ``strength`` or ``mask`` without ``init_image``, strings that cannot be
    stored (lone surrogates)."""
    problems = []
    if len(reply.requests) > pause.candidates:
        problems.append(GraphProblem(
            node_id=pause.node_id, path="requests", message=f"requests: {len(reply.requests)} "
            f"images; the round makes at most {pause.candidates}"))
    shown = {c.artifact for c in pause.scored}
    for i, r in enumerate(reply.requests):
        where = f"requests[{i}]"
        if r.init_image is not None and r.init_image not in shown:
            problems.append(GraphProblem(
                node_id=pause.node_id, path=f"{where}.init_image", received=r.init_image[:80],
                message=f"{where}.init_image: not a candidate this pause showed; edit one of "
                "its scored candidates (their artifact keys)"))
        for name in ("strength", "mask"):
            if getattr(r, name) is not None and r.init_image is None:
                problems.append(GraphProblem(
                    node_id=pause.node_id, path=f"{where}.{name}",
                    message=f"{where}.{name}: only with init_image (an edit of a candidate)"))
    return problems + value_problems(reply)


def value_problems(reply: RefineAnswer, max_string: int | None = None) -> list[GraphProblem]:
    """Strings in ``reply`` that cannot be stored (lone surrogates) or, with ``max_string``,
    are longer than that (a gateway's prompt cap)."""
    return [GraphProblem(node_id=reply.node_id, path=path, message=f"{path}: {why}")
            for i, r in enumerate(reply.requests)
            for path, why in bad_values(r.model_dump(), f"requests[{i}]", max_string)]


def _taken(run_id: str, node_id: str) -> RefineConflict:
    return RefineConflict(f"refine node {node_id!r} of run {run_id} already has its answer "
                          "(or timed out and fell back)")


def ask(ctx: OpContext, scored: list[ScoredCandidate], params: RefineParams) -> Future:
    """Ask the agent; a future of its requests for the next round, or of ``None`` when the
    timeout passed first. The op returns it as a :class:`~.deferred.Deferred`, so a loop
    waiting for its agent holds no worker thread: the process's :class:`AnswerWatch` polls.

    A retried attempt finds the answer an earlier attempt got, instead of asking again."""
    earlier = _reply(ctx, 0)
    if earlier is not None:
        done: Future = Future()
        done.set_result(_for_round(earlier, params))
        return done
    request = RefineRequest(
        node_id=ctx.node_id, round=params.round, prompt=params.prompt,
        candidates=params.candidates, timeout=params.timeout, fallback=params.fallback,
        scored=[c.model_copy(update={"embedding": None}) for c in scored],
    )
    after = ctx.store.append_event(ctx.run_id, EventRecord(
        type=REQUESTED, time=time.time(), node_id=ctx.node_id,
        message=request.model_dump_json()))
    if ctx.answers is None:  # an op context made outside an executor
        raise GraphError([GraphProblem(node_id=ctx.node_id, message=(
            "the agent refine strategy needs an executor: nothing here would read the answer"))])
    return ctx.answers.wait(_Waiter(ctx, params, after, time.monotonic() + params.timeout))


@dataclass
class _Waiter:
    ctx: OpContext
    params: RefineParams
    after: int
    deadline: float
    future: Future = field(default_factory=Future)
    gave_up: bool = False

    def poll(self) -> bool:
        """Look once; True when the future is settled."""
        ctx = self.ctx
        reply = _reply(ctx, self.after)
        if reply is not None:
            ctx.log.info("agent answered with %d requests", len(reply.requests))
            self.future.set_result(_for_round(reply, self.params))
            return True
        if ctx.cancelled:
            self.future.set_exception(Cancelled(f"run {ctx.run_id} was cancelled"))
            return True
        if not self.gave_up and time.monotonic() >= self.deadline:
            if ctx.store.claim(_lease(ctx.run_id, ctx.node_id), "timeout", _LEASE_TTL):
                ctx.log.info("no answer in %.0fs: falling back to %s", self.params.timeout,
                             self.params.fallback)
                self.future.set_result(None)
                return True
            self.gave_up = True  # an answer won the lease: its event is on its way
        return False


class AnswerWatch:
    """One thread per executor looks for the answers of every refine waiting in it (started
    by the first wait; :meth:`close` ends it). The executor puts it in each op's context.

    Hand-written: the answer arrives as an event in the state store, which has no
    notification channel on every back end (SQLite), so it is polled, once per waiter every
    ``_POLL`` s, from one thread however many loops wait."""

    def __init__(self) -> None:
        self._waiters: list[_Waiter] = []
        self._lock = threading.Lock()
        self._passing = threading.Lock()  # held while a pass reads the stores
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def close(self) -> None:
        """Stop watching: once this returns, no pass reads the store, which may then close
        (a store closed under a reading thread can crash SQLite). The waiters' leases run out
        and their work is sent again, as for any stopped worker."""
        self._closed.set()
        with self._passing, self._lock:
            self._waiters = []

    def wait(self, waiter: _Waiter) -> Future:
        with self._lock:
            self._waiters.append(waiter)
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="genloop-agent-answers")
                self._thread.start()
        return waiter.future

    def _run(self) -> None:
        while not self._closed.wait(_POLL):
            with self._passing:
                self._pass()

    def _pass(self) -> None:
        with self._lock:
            waiting = list(self._waiters)
        settled = []
        for waiter in waiting:
            try:
                if waiter.poll():
                    settled.append(waiter)
            except Exception as exc:  # noqa: BLE001  (a store outage: the op retries)
                waiter.future.set_exception(Transient(f"waiting for the agent: {exc}"))
                settled.append(waiter)
        if settled:
            with self._lock:
                self._waiters = [w for w in self._waiters if w not in settled]


def _reply(ctx: OpContext, after: int) -> RefineAnswer | None:
    for event in _events(ctx.store, ctx.run_id, after, ANSWERED):
        if event.node_id == ctx.node_id and event.message:
            return RefineAnswer.model_validate_json(event.message)
    return None


def _for_round(reply: RefineAnswer, params: RefineParams) -> list[GenerationRequest]:
    """The answer as this loop's next round: its round number, at most ``candidates`` images
    (what the loop was costed for)."""
    return [r.model_copy(update={"round": params.round + 1})
            for r in reply.requests[:params.candidates]]
