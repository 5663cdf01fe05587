"""``vlm-judge``: a hosted vision-language model asked one yes/no question per clause.

CLIP scores how well a caption fits on a scale it was never trained to make absolute; a VLM can
be asked the question a person would ask ("is the first object yellow?") and answers with a
probability. The prompt is split as the clause critic splits it (:mod:`.clauses`): a shapes
caption gives one question per attribute, relation and background; free text gives one question,
"Does this image show: <prompt>?", because its fragments lose their meaning out of context.

An image's score is ``100 x`` the product of its P(yes): the chance that every clause holds if
the answers were independent, the same scale as ``shapes-critic``'s, so one ``target`` means the
same on both. Each image gets a :class:`~genloop.sdk.ops.Critique` (each clause's P(yes) x 100 and
the weakest) for critic-driven refiners.

An answer that stays neither yes nor no after the client's retries scores its clause 0: the
judge cannot vouch for the image, so it ranks last, while the rest of the batch keeps its
scores (raising would fail every image scored with it). It is logged with the model's words,
counted in :attr:`VlmUsage.unreadable` and not cached, so the next scoring asks again.

Answers are cached by (model, sha256 of the PNG sent, question) in an LRU: an image scored
twice, or by two requests at once, is asked about once. Each image's :class:`Scores` usage is
what the questions asked for it cost (requests, retries included, and the tokens the replies
report; an answer from the cache costs nothing), so a run's ``compute.judge`` adds up what its
own scoring was billed; :attr:`VlmJudge.usage` counts the judge's totals since it was built.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import ClauseScore, Critique, JudgeUsage

from .base import Evaluator, Scores
from .clauses import DEFAULT_SPLITTERS, Clause
from .vlm_client import ChatClient, VlmConfig
from .vlm_env import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL

logger = logging.getLogger(__name__)

#: Bump when the questions change: it is part of the identity, so stored scores are redone.
QUESTIONS_VERSION = "1"
_TUNING = frozenset({"max_rps", "timeout", "attempts", "max_backoff"})
_OPERATOR_ONLY = {"base_url": ENV_BASE_URL, "url": ENV_BASE_URL, "model": ENV_MODEL,
                  "api_key": ENV_API_KEY, "key": ENV_API_KEY}
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Question:
    """The clause a question is about, and its words as sent."""

    clause: Clause
    text: str


def questions(prompt: str) -> list[Question]:
    """One question per clause of a prompt a splitter knows; one for the whole of free text."""
    whole = prompt.strip()
    for split in DEFAULT_SPLITTERS:
        if clauses := split(whole):
            return [Question(c, _clause_question(whole, c)) for c in clauses]
    return [Question(Clause(name=whole, text=whole), f"Does this image show: {whole}?")]


def _clause_question(prompt: str, clause: Clause) -> str:
    owner, _, attribute = clause.name.rpartition(".")
    subject = f"the {owner} object's {attribute}" if owner else f"the {attribute}"
    return f'Looking only at {subject}: is it "{clause.text}", as in "{prompt}"?'


class VlmUsage(BaseModel):
    """What a judge has spent so far (since it was built)."""

    model_config = ConfigDict(frozen=True)

    requests: int  #: HTTP requests sent, retries included
    questions: int  #: questions the server answered (cache misses)
    cache_hits: int  #: answers reused: cached, in flight, or the same image twice in a batch
    unreadable: int  #: answers that were neither yes nor no after retries (scored 0)
    prompt_tokens: int
    completion_tokens: int


class AnswerCache:
    """P(yes) by key, least recently used dropped beyond ``size``; plus the requests in flight,
    so a second asker waits for the first instead of sending the question again."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise Permanent(f"vlm-judge: cache_size must be >= 0, got {size}")
        self.size = size
        self._done: OrderedDict[Key, float] = OrderedDict()
        self._flying: dict[Key, Future[float | None]] = {}
        self._lock = threading.Lock()

    def claim(self, key: Key) -> tuple[Future[float | None], bool]:
        """``key``'s answer as a future, and whether the caller must ask for it (neither
        cached nor in flight; then it must call :meth:`settle`)."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                ready: Future[float | None] = Future()
                ready.set_result(self._done[key])
                return ready, False
            if key in self._flying:
                return self._flying[key], False
            future: Future[float | None] = Future()
            self._flying[key] = future
            return future, True

    def settle(self, key: Key, p_yes: float | None, error: BaseException | None = None) -> None:
        """Resolve ``key``'s claim; keep a readable answer."""
        with self._lock:
            future = self._flying.pop(key)
            if error is None and p_yes is not None and self.size:
                self._done[key] = p_yes
                while len(self._done) > self.size:
                    self._done.popitem(last=False)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(p_yes)

    def __len__(self) -> int:
        return len(self._done)


class VlmJudge(Evaluator):
    """Scores images by a hosted VLM's yes/no answers, ``concurrency`` questions in flight."""

    probability = True

    def __init__(self, config: VlmConfig, *, concurrency: int = 4, cache_size: int = 4096,
                 device: str = "cpu") -> None:
        if concurrency < 1:
            raise Permanent(f"vlm-judge: concurrency must be >= 1, got {concurrency}")
        self.config = config
        self.device = device
        self.identity = f"vlm-judge:{QUESTIONS_VERSION}/{config.model}"
        self.client = ChatClient(config)
        self.cache = AnswerCache(cache_size)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="vlm-judge")
        self._lock = threading.Lock()
        self._asked = self._hits = self._unreadable = 0

    @classmethod
    def from_env(cls, device: str = "cpu", **options: Any) -> VlmJudge:
        """The judge of the operator's server (:meth:`VlmConfig.from_env`). ``options`` tune it
        (``max_rps``, ``timeout``, ``attempts``, ``max_backoff``, ``concurrency``,
        ``cache_size``); the server, model and key are never options."""
        if refused := sorted(set(options) & set(_OPERATOR_ONLY)):
            raise Permanent(f"vlm-judge takes no option {refused[0]!r}: its server, model and "
                            f"key are the operator's ({ENV_BASE_URL}, {ENV_MODEL}, "
                            f"{ENV_API_KEY} in the workers' environment)")
        unknown = set(options) - _TUNING - {"concurrency", "cache_size"}
        if unknown:
            raise Permanent(f"vlm-judge takes no options {sorted(unknown)}; it takes "
                            f"{sorted(_TUNING | {'concurrency', 'cache_size'})}")
        tuning = {k: v for k, v in options.items() if k in _TUNING}
        rest = {k: v for k, v in options.items() if k not in _TUNING}
        return cls(VlmConfig.from_env(**tuning), device=device, **rest)

    @property
    def usage(self) -> VlmUsage:
        """Requests, answers and tokens so far, over every run this judge scored for."""
        with self._lock:
            return VlmUsage(requests=self.client.requests, questions=self._asked,
                            cache_hits=self._hits, unreadable=self._unreadable,
                            prompt_tokens=self.client.prompt_tokens,
                            completion_tokens=self.client.completion_tokens)

    def close(self) -> None:
        """Stop the pool and the HTTP client (the registry keeps judges for the process)."""
        self._pool.shutdown(wait=True)
        self.client.close()

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        asked = questions(text)
        pngs = [_png(image) for image in images]
        digests = [hashlib.sha256(png).hexdigest() for png in pngs]
        futures: dict[Key, Future[float | None]] = {}
        sent: dict[Key, Future[JudgeUsage]] = {}  # the questions this call asked itself
        repeats = 0
        for png, digest in zip(pngs, digests, strict=True):
            for q in asked:
                key = (self.config.model, digest, q.text)
                if key in futures:
                    repeats += 1
                else:
                    futures[key], asking = self._claim(key, q, png)
                    if asking is not None:
                        sent[key] = asking
        with self._lock:
            self._hits += repeats
        values, details, usage = [], [], []
        for digest in digests:
            keys = [(self.config.model, digest, q.text) for q in asked]
            probs = [futures[key].result() for key in keys]
            # Each asked question is billed to the first image of this call that needed it
            usage.append(sum((sent.pop(key).result() for key in keys if key in sent),
                             JudgeUsage()))
            readable = [0.0 if p is None else p for p in probs]
            weakest = min(range(len(asked)), key=lambda k: readable[k])
            values.append(100 * math.prod(readable))
            details.append(Critique(
                clauses=[ClauseScore(clause=q.clause.name, text=q.clause.text, score=100 * p)
                         for q, p in zip(asked, readable, strict=True)],
                weakest=asked[weakest].clause.name,
            ))
        return Scores(values=values, evaluator=self.identity, details=details, usage=usage)

    def _claim(self, key: Key, question: Question,
               png: bytes) -> tuple[Future[float | None], Future[JudgeUsage] | None]:
        """``key``'s answer, and what asking it costs when this caller asks it (``None`` for
        an answer cached or already asked for)."""
        future, mine = self.cache.claim(key)
        if mine:
            return future, self._pool.submit(self._ask, key, question, png)
        with self._lock:
            self._hits += 1
        return future, None

    def _ask(self, key: Key, question: Question, png: bytes) -> JudgeUsage:
        try:
            answer = self.client.ask(question.text, png)
        except BaseException as exc:  # noqa: BLE001  (handed to every waiter, raised there)
            self.cache.settle(key, None, exc)
            return JudgeUsage()
        with self._lock:
            self._asked += 1
            self._unreadable += answer.p_yes is None
        if answer.p_yes is None:
            logger.warning("%s: unreadable answer %r to %r (image %s...); clause %r scored 0",
                           self.identity, answer.text, question.text, key[1][:12],
                           question.clause.name)
        self.cache.settle(key, answer.p_yes)
        return answer.usage


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
