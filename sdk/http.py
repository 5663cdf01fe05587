"""HTTP back ends: the SDK talking to a genloop gateway (``Client.http``, ``AsyncClient.http``).

Both share :class:`_HttpBase` (configuration, retry policy, paths) and differ only in I/O, the
way httpx's ``Client`` and ``AsyncClient`` do. Transient failures (connection errors, 502/503/504,
429 honouring ``Retry-After``) are retried with exponential backoff and a cap. Every submit carries
an idempotency key, generated here when the caller gives none and kept across retries, so a POST
whose answer was lost can be sent again without making a second run.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from .backend import AsyncBackend, Backend
from .errors import ClientError, TransportError
from .loop import Loop
from .models import Event, RunInfo, RunPage, RunQuery, RunResult, RunSpec
from .ops import RefineAnswer
from .polling import TERMINAL_EVENTS, WaitByLongPoll
from .schema import SpecSchema
from .uploads import UPLOAD_MEDIA
from .webhooks import WebhookNotice
from .wire import (
    IDEMPOTENCY_HEADER,
    SseDecoder,
    error_from_response,
    retryable,
    transport_error,
)


@dataclass
class HttpConfig:
    """How to reach a gateway. ``transport`` replaces httpx's (tests, proxies, mocks)."""

    base_url: str
    api_key: str | None = None
    timeout: float = 30.0
    #: Tries per call, the first included.
    attempts: int = 5
    #: Longest wait between two tries, seconds (``Retry-After`` is capped to it too).
    max_backoff: float = 10.0
    #: How long an event stream may stay silent before it is treated as dropped.
    stream_timeout: float = 60.0
    headers: dict[str, str] = field(default_factory=dict)
    transport: Any = None


class _HttpBase:
    """What the sync and async HTTP back ends share: configuration, retries, paths."""

    def __init__(self, config: HttpConfig) -> None:
        self.config = config
        jitter = wait_random(0, 0.1)
        self._backoff = wait_exponential(multiplier=0.1, max=config.max_backoff) + jitter

    def _client_options(self) -> dict[str, Any]:
        headers = {"User-Agent": "genloop-sdk", **self.config.headers}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        options: dict[str, Any] = {
            "base_url": self.config.base_url.rstrip("/"), "headers": headers,
            "timeout": self.config.timeout,
        }
        if self.config.transport is not None:
            options["transport"] = self.config.transport
        return options

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        server_says = getattr(exc, "retry_after", None)
        if server_says is not None:
            return float(min(server_says, self.config.max_backoff))
        return float(self._backoff(state))

    def _retry_options(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.config.attempts), "wait": self._wait,
            "retry": retry_if_exception(retryable), "reraise": True,
        }

    @staticmethod
    def _submit_request(spec: RunSpec, key: str | None) -> dict[str, Any]:
        # A Loop goes as the fields its author set: the gateway's back end fills the rest,
        # with the model's recipe when none of its fields was set (Loop.with_recipe).
        body = (spec.model_dump_json(include=spec.model_fields_set | {"kind"})
                if isinstance(spec, Loop) else spec.model_dump_json())
        return {
            "content": body.encode(),
            "headers": {"Content-Type": "application/json",
                        IDEMPOTENCY_HEADER: key or uuid.uuid4().hex},
        }

    def _stream_request(self, run_id: str, after: int) -> dict[str, Any]:
        timeout = httpx.Timeout(self.config.timeout, read=self.config.stream_timeout)
        return {
            "url": f"/v1/runs/{run_id}/events", "params": {"after": after},
            "headers": {"Accept": "text/event-stream", "Last-Event-ID": str(after)},
            "timeout": timeout,
        }

    def _wait_request(self, seconds: float) -> dict[str, Any]:
        """A long poll's query and timeout: the request may be held ``seconds`` s."""
        return {"params": {"wait": round(seconds, 3)} if seconds > 0 else {},
                "timeout": httpx.Timeout(self.config.timeout + seconds)}

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        raise error_from_response(response)


class StreamResume:
    """An event stream's reconnect policy, without I/O (both back ends drive it).

    A dropped stream is opened again after the last event seen (``Last-Event-ID``), so nothing
    is missed and nothing repeats; ``attempts`` drops in a row without an event in between end
    the follow with the last error.
    """

    def __init__(self, run_id: str, after: int, config: HttpConfig) -> None:
        self.run_id, self.last, self.config = run_id, after, config
        self.drops = 0

    def seen(self, event: Event) -> bool:
        """Note ``event``; true when it is the run's last."""
        self.last, self.drops = event.id, 0
        return event.type in TERMINAL_EVENTS

    def dropped(self, exc: Exception | None) -> float:
        """The pause before reconnecting after the stream failed with ``exc`` (``None``: it
        ended before the run's last event). Raises what cannot or should no longer be retried.
        """
        if isinstance(exc, httpx.TransportError):
            error: ClientError = transport_error(exc, f"events of run {self.run_id}")
        elif isinstance(exc, ClientError):
            if not retryable(exc):
                raise exc
            error = exc
        else:
            error = TransportError(f"event stream of run {self.run_id} ended early")
        self.drops += 1
        if self.drops >= self.config.attempts:
            raise error
        return min(self.config.max_backoff, 0.1 * 2**self.drops)


class HttpBackend(_HttpBase, Backend):
    """``Client.http(...)``'s back end: a gateway over httpx, with safe retries."""

    delivers_webhooks = True

    def __init__(self, config: HttpConfig) -> None:
        super().__init__(config)
        self._http = httpx.Client(**self._client_options())

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        def once() -> httpx.Response:
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                raise transport_error(exc, f"{method} {url}") from exc
            return self._check(response)

        return Retrying(**self._retry_options())(once)

    def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo:
        request = self._submit_request(spec, idempotency_key)
        return RunInfo.model_validate_json(self._send("POST", "/v1/runs", **request).content)

    def get(self, run_id: str) -> RunInfo:
        return RunInfo.model_validate_json(self._send("GET", f"/v1/runs/{run_id}").content)

    def result(self, run_id: str) -> RunResult:
        response = self._send("GET", f"/v1/runs/{run_id}/result")
        return RunResult.model_validate_json(response.content)

    def runs(self, query: RunQuery) -> RunPage:
        return RunPage.model_validate_json(
            self._send("GET", "/v1/runs", params=_runs_params(query)).content)

    def notify(self, notice: WebhookNotice) -> str:
        response = self._send("POST", "/v1/webhooks", json=notice.model_dump(mode="json"))
        return str(response.json()["webhook_id"])

    def wait(self, run_id: str, timeout: float | None = None, poll: float = 0.05) -> RunInfo:
        """Long polls, each answered by the gateway the moment the run ends."""
        waiting = WaitByLongPoll(run_id, timeout, poll)
        while True:
            asked = waiting.ask()
            response = self._send("GET", f"/v1/runs/{run_id}", **self._wait_request(asked))
            info = RunInfo.model_validate_json(response.content)
            if (pause := waiting.pause(info, asked)) is None:
                return info
            if pause:
                time.sleep(pause)

    def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        response = self._send("POST", f"/v1/runs/{run_id}/refine",
                              **_refine_request(answer))
        return RefineAnswer.model_validate_json(response.content)

    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        params = {"after": after, "limit": limit, "follow": "false"}
        response = self._send("GET", f"/v1/runs/{run_id}/events", params=params)
        decoder = SseDecoder()
        return [e for line in response.text.splitlines() + [""] if (e := decoder.feed(line))]

    def follow(self, run_id: str, after: int = 0, poll: float = 0.05) -> Iterator[Event]:
        """Follow the run's event stream; a dropped connection resumes after the last event
        seen (``Last-Event-ID``), so nothing is missed and nothing repeats."""
        resume = StreamResume(run_id, after, self.config)
        while True:
            error: Exception | None = None
            try:
                request = self._stream_request(run_id, resume.last)
                with self._http.stream("GET", **request) as response:
                    if not response.is_success:
                        response.read()
                        self._check(response)
                    decoder = SseDecoder()
                    for line in response.iter_lines():
                        if (event := decoder.feed(line)) is not None:
                            yield event
                            if resume.seen(event):
                                return
            except (httpx.TransportError, ClientError) as exc:
                error = exc
            time.sleep(resume.dropped(error))

    def cancel(self, run_id: str) -> RunInfo:
        return RunInfo.model_validate_json(self._send("POST", f"/v1/runs/{run_id}/cancel").content)

    def resume(self, run_id: str) -> RunInfo:
        return RunInfo.model_validate_json(self._send("POST", f"/v1/runs/{run_id}/resume").content)

    def pin(self, run_id: str, pinned: bool) -> RunInfo:
        method = "PUT" if pinned else "DELETE"
        return RunInfo.model_validate_json(self._send(method, f"/v1/runs/{run_id}/pin").content)

    def read_artifact(self, key: str) -> bytes:
        return self._send("GET", f"/v1/artifacts/{key}").content

    def write_artifact(self, data: bytes, ext: str) -> str:
        return str(self._send("POST", "/v1/artifacts", **_upload_request(data, ext)).json()["key"])

    def schema(self) -> SpecSchema:
        return SpecSchema.model_validate_json(self._send("GET", "/v1/schema").content)

    def ping(self) -> None:
        self._send("GET", "/readyz")

    def close(self) -> None:
        self._http.close()


class AsyncHttpBackend(_HttpBase, AsyncBackend):
    """``AsyncClient.http(...)``'s back end: the same calls over ``httpx.AsyncClient``."""

    def __init__(self, config: HttpConfig) -> None:
        super().__init__(config)
        self._http = httpx.AsyncClient(**self._client_options())

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def once() -> httpx.Response:
            try:
                response = await self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                raise transport_error(exc, f"{method} {url}") from exc
            return self._check(response)

        return await AsyncRetrying(**self._retry_options())(once)

    async def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo:
        request = self._submit_request(spec, idempotency_key)
        response = await self._send("POST", "/v1/runs", **request)
        return RunInfo.model_validate_json(response.content)

    async def get(self, run_id: str) -> RunInfo:
        return RunInfo.model_validate_json((await self._send("GET", f"/v1/runs/{run_id}")).content)

    async def result(self, run_id: str) -> RunResult:
        response = await self._send("GET", f"/v1/runs/{run_id}/result")
        return RunResult.model_validate_json(response.content)

    async def runs(self, query: RunQuery) -> RunPage:
        response = await self._send("GET", "/v1/runs", params=_runs_params(query))
        return RunPage.model_validate_json(response.content)

    async def notify(self, notice: WebhookNotice) -> str:
        response = await self._send("POST", "/v1/webhooks", json=notice.model_dump(mode="json"))
        return str(response.json()["webhook_id"])

    async def wait(self, run_id: str, timeout: float | None = None,
                   poll: float = 0.05) -> RunInfo:
        """:meth:`HttpBackend.wait`, awaited."""
        waiting = WaitByLongPoll(run_id, timeout, poll)
        while True:
            asked = waiting.ask()
            request = self._wait_request(asked)
            response = await self._send("GET", f"/v1/runs/{run_id}", **request)
            info = RunInfo.model_validate_json(response.content)
            if (pause := waiting.pause(info, asked)) is None:
                return info
            if pause:
                await asyncio.sleep(pause)

    async def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        response = await self._send("POST", f"/v1/runs/{run_id}/refine",
                                    **_refine_request(answer))
        return RefineAnswer.model_validate_json(response.content)

    async def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        params = {"after": after, "limit": limit, "follow": "false"}
        response = await self._send("GET", f"/v1/runs/{run_id}/events", params=params)
        decoder = SseDecoder()
        return [e for line in response.text.splitlines() + [""] if (e := decoder.feed(line))]

    async def follow(self, run_id: str, after: int = 0, poll: float = 0.05) -> AsyncIterator[Event]:
        resume = StreamResume(run_id, after, self.config)
        while True:
            error: Exception | None = None
            try:
                request = self._stream_request(run_id, resume.last)
                async with self._http.stream("GET", **request) as response:
                    if not response.is_success:
                        await response.aread()
                        self._check(response)
                    decoder = SseDecoder()
                    async for line in response.aiter_lines():
                        if (event := decoder.feed(line)) is not None:
                            yield event
                            if resume.seen(event):
                                return
            except (httpx.TransportError, ClientError) as exc:
                error = exc
            await asyncio.sleep(resume.dropped(error))

    async def cancel(self, run_id: str) -> RunInfo:
        response = await self._send("POST", f"/v1/runs/{run_id}/cancel")
        return RunInfo.model_validate_json(response.content)

    async def pin(self, run_id: str, pinned: bool) -> RunInfo:
        response = await self._send("PUT" if pinned else "DELETE", f"/v1/runs/{run_id}/pin")
        return RunInfo.model_validate_json(response.content)

    async def resume(self, run_id: str) -> RunInfo:
        response = await self._send("POST", f"/v1/runs/{run_id}/resume")
        return RunInfo.model_validate_json(response.content)

    async def read_artifact(self, key: str) -> bytes:
        return (await self._send("GET", f"/v1/artifacts/{key}")).content

    async def write_artifact(self, data: bytes, ext: str) -> str:
        response = await self._send("POST", "/v1/artifacts", **_upload_request(data, ext))
        return str(response.json()["key"])

    async def schema(self) -> SpecSchema:
        return SpecSchema.model_validate_json((await self._send("GET", "/v1/schema")).content)

    async def aclose(self) -> None:
        await self._http.aclose()


def _runs_params(query: RunQuery) -> list[tuple[str, str]]:
    """``GET /v1/runs``'s query: ``status`` and ``label`` (``key=value``) repeat."""
    params = [("limit", str(query.limit))]
    params += [(name, str(value)) for name, value in
               (("cursor", query.cursor), ("since", query.since), ("until", query.until))
               if value is not None]
    params += [("status", s.value) for s in query.status or ()]
    params += [("label", f"{k}={v}") for k, v in query.labels.items()]
    return params


def _refine_request(answer: RefineAnswer) -> dict[str, Any]:
    return {"content": answer.model_dump_json(),
            "headers": {"Content-Type": "application/json"}}


def _upload_request(data: bytes, ext: str) -> dict[str, Any]:
    """An upload is content-addressed, so a retried POST stores nothing twice."""
    return {"content": data, "headers": {"Content-Type": UPLOAD_MEDIA[ext]}}
