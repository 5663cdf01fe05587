"""The wire to a hosted vision-language model: one yes/no question per chat completion.

The server speaks OpenAI's chat-completions API (OpenAI, vLLM, SGLang, llama.cpp, Ollama...).
Only the operator configures it: :meth:`VlmConfig.from_env` reads the base URL, model and key from
the worker's environment, so nothing a tenant sends in a spec can point a worker at another host
or spend another key.

Each question is one request asking for a single token with its top log-probabilities, so
P(yes) comes from the model's own distribution where the server returns log-probabilities
(:func:`p_yes_from_logprobs`), and from the answer's word where it does not.

Errors are translated here. Timeouts, connection errors, 408, 429 and 5xx are retried with
exponential backoff (a 429's ``Retry-After`` is honoured up to ``max_backoff``); once the tries
are spent they become :class:`~genloop.sdk.errors.Transient`, so the score op is retried later. A
4xx that asking again cannot fix (bad key, unknown model) is
:class:`~genloop.sdk.errors.Permanent` at once. An answer that is neither yes nor no is asked again
too (a sampling server may answer differently), then returned with ``p_yes=None``: the judge
decides what an unreadable answer scores, not the wire.
"""

from __future__ import annotations

import base64
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from genloop.sdk.errors import Permanent, Transient
from genloop.sdk.ops import JudgeUsage
from genloop.sdk.wire import retry_after

from .vlm_env import ENV_API_KEY, ENV_BASE_URL, ENV_MAX_RPS, ENV_MODEL

#: Appended to every question: the one token the request leaves room for is the answer.
INSTRUCTIONS = "Answer yes or no."
_RETRY_STATUS = frozenset({408, 429})


@dataclass(frozen=True)
class VlmConfig:
    """Where the model is and how hard to push it. ``api_key`` never appears in a repr."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    #: Requests per second this client sends at most, retries included.
    max_rps: float = 5.0
    #: Seconds per request (connect, send, read); a slower answer is retried.
    timeout: float = 30.0
    #: Tries per question, the first included.
    attempts: int = 4
    #: Longest wait between two tries, seconds; a 429's ``Retry-After`` is capped to it.
    max_backoff: float = 10.0

    def __post_init__(self) -> None:
        if not self.max_rps > 0 or not self.timeout > 0 or self.max_backoff < 0:
            raise Permanent("vlm-judge: max_rps and timeout must be > 0, max_backoff >= 0")
        if self.attempts < 1:
            raise Permanent("vlm-judge: attempts must be >= 1")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **tuning: Any) -> VlmConfig:
        """The operator's server from ``environ`` (default: the process environment);
        ``tuning`` sets the other fields. Raises :class:`Permanent` naming the variable to set."""
        env = os.environ if environ is None else environ
        base_url = env.get(ENV_BASE_URL, "").strip()
        model = env.get(ENV_MODEL, "").strip()
        if not base_url or not model:
            missing = [n for n, v in ((ENV_BASE_URL, base_url), (ENV_MODEL, model)) if not v]
            raise Permanent(
                f"vlm-judge is not configured on this back end: the operator sets "
                f"{' and '.join(missing)} (an OpenAI-compatible API root such as "
                f"http://host:8000/v1, and the model it serves) in the workers' environment")
        if not base_url.startswith(("http://", "https://")):
            raise Permanent(f"{ENV_BASE_URL} must be an http(s) URL, got {base_url!r}")
        if ENV_MAX_RPS in env and "max_rps" not in tuning:
            try:
                tuning["max_rps"] = float(env[ENV_MAX_RPS])
            except ValueError:
                raise Permanent(
                    f"{ENV_MAX_RPS} must be a number, got {env[ENV_MAX_RPS]!r}") from None
        return cls(base_url=base_url.rstrip("/"), model=model,
                   api_key=env.get(ENV_API_KEY) or None, **tuning)


class Answer(BaseModel):
    """The model's answer to one question: ``p_yes`` is ``None`` when it was unreadable.
    ``usage``: the requests asking it took and the tokens their replies reported."""

    model_config = ConfigDict(frozen=True)

    p_yes: float | None
    text: str
    usage: JudgeUsage = JudgeUsage()


class RateLimit:
    """Starts at most ``max_rps`` requests a second across every thread: each takes the next
    slot ``1 / max_rps`` after the last one, so there are no bursts for a per-second quota to
    count against."""

    def __init__(self, max_rps: float) -> None:
        self.interval = 1.0 / max_rps
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Sleep until this caller's slot."""
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            time.sleep(slot - now)


class _Retry(Exception):
    """A try worth repeating; ``retry_after``: the seconds the server asked for, if any."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Unreadable(_Retry):
    def __init__(self, answer: Answer) -> None:
        super().__init__(f"unreadable answer {answer.text!r}")
        self.answer = answer


class ChatClient:
    """Asks questions about PNG images; counts what it sent and the tokens it was billed.

    Thread-safe: the judge calls :meth:`ask` from its pool. ``requests`` counts HTTP requests
    (retries included); the token counts add up every reply's ``usage``.
    """

    def __init__(self, config: VlmConfig) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._http = httpx.Client(base_url=config.base_url, headers=headers,
                                  timeout=config.timeout)
        self._limit = RateLimit(config.max_rps)
        self._backoff = wait_exponential(multiplier=0.2, max=config.max_backoff) + wait_random(
            0, 0.05)
        self._lock = threading.Lock()
        self.requests = self.prompt_tokens = self.completion_tokens = 0

    def ask(self, question: str, png: bytes) -> Answer:
        """The answer to ``question`` about the PNG image ``png``, with what asking it cost."""
        body = request_body(self.config.model, question, png)
        retrying = Retrying(stop=stop_after_attempt(self.config.attempts), wait=self._wait,
                            retry=retry_if_exception_type(_Retry), reraise=True)
        spent: list[JudgeUsage] = []  # one entry a request, its reply's tokens if it had any
        try:
            answer = retrying(self._once, body, spent)
        except _Unreadable as exc:
            answer = exc.answer
        except _Retry as exc:
            raise Transient(f"vlm-judge: {self.config.base_url}: {exc} "
                            f"({self.config.attempts} tries)") from None
        return answer.model_copy(update={"usage": sum(spent, JudgeUsage())})

    def close(self) -> None:
        self._http.close()

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        server_says = getattr(exc, "retry_after", None)
        if server_says is not None:
            return min(float(server_says), self.config.max_backoff)
        return float(self._backoff(state))

    def _once(self, body: dict[str, Any], spent: list[JudgeUsage]) -> Answer:
        self._limit.wait()
        with self._lock:
            self.requests += 1
        spent.append(JudgeUsage(calls=1))
        try:
            response = self._http.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise _Retry(f"no answer within {self.config.timeout}s ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise _Retry(f"cannot reach the server: {exc}") from exc
        status = response.status_code
        if status in _RETRY_STATUS or status >= 500:
            raise _Retry(f"HTTP {status}", retry_after(response) if status == 429 else None)
        if not response.is_success:
            raise Permanent(_refused(response, self.config))
        try:
            payload = response.json()
            choice = payload["choices"][0]
            content = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise _Retry(
                f"the reply is not a chat completion: {response.text[:200]!r}") from None
        text = "" if content is None else str(content)
        spent[-1] = self._count(payload.get("usage"))
        p_yes = p_yes_from_logprobs(choice.get("logprobs"))
        answer = Answer(p_yes=p_yes if p_yes is not None else p_yes_from_text(text), text=text)
        if answer.p_yes is None:
            raise _Unreadable(answer)
        return answer

    def _count(self, usage: object) -> JudgeUsage:
        """One request's reply: its tokens, added to the client's totals."""
        tokens = usage if isinstance(usage, dict) else {}
        prompt, completion = tokens.get("prompt_tokens"), tokens.get("completion_tokens")
        spent = JudgeUsage(calls=1,
                           prompt_tokens=prompt if isinstance(prompt, int) and prompt > 0 else 0,
                           completion_tokens=(completion if isinstance(completion, int)
                                              and completion > 0 else 0))
        with self._lock:
            self.prompt_tokens += spent.prompt_tokens
            self.completion_tokens += spent.completion_tokens
        return spent


def request_body(model: str, question: str, png: bytes) -> dict[str, Any]:
    """The chat-completions request for one question: one token, greedy, with log-probs."""
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    content = [{"type": "text", "text": f"{question} {INSTRUCTIONS}"},
               {"type": "image_url", "image_url": {"url": url}}]
    return {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 5}


def _word(token: str) -> str:
    return token.strip().strip(".!,").lower()


def p_yes_from_logprobs(logprobs: object) -> float | None:
    """Softmax over the yes and no tokens among the first token's top log-probabilities (any
    case or spacing: " Yes" and "yes" both count as yes); ``None`` if there are none."""
    try:
        first = logprobs["content"][0]  # type: ignore[index]
        tops = list(first.get("top_logprobs") or []) + [first]
    except (TypeError, KeyError, IndexError, AttributeError):
        return None
    found: dict[str, float] = {}
    for item in tops:
        token, lp = item.get("token"), item.get("logprob")
        if (isinstance(token, str) and isinstance(lp, (int, float)) and math.isfinite(lp)
                and _word(token) in ("yes", "no")):
            found.setdefault(token, float(lp))  # the top list first; the chosen token repeats
    if not found:
        return None
    top = max(found.values())
    weights = {token: math.exp(lp - top) for token, lp in found.items()}
    yes = sum(w for token, w in weights.items() if _word(token) == "yes")
    return yes / sum(weights.values())


def p_yes_from_text(text: str) -> float | None:
    """1.0 for a yes, 0.0 for a no, ``None`` for anything else."""
    return {"yes": 1.0, "no": 0.0}.get(_word(text))


def _refused(response: httpx.Response, config: VlmConfig) -> str:
    status, said = response.status_code, response.text[:200]
    hint = {401: f"check {ENV_API_KEY}", 403: f"check {ENV_API_KEY}",
            404: f"check {ENV_BASE_URL} (the API root, ending before /chat/completions) and "
                 f"{ENV_MODEL}"}.get(status, "asking again will not help")
    return (f"vlm-judge: {config.base_url}/chat/completions refused the request for model "
            f"{config.model!r} (HTTP {status}: {said!r}); {hint}")
