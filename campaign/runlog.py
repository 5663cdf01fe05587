"""The runs a campaign started: one JSON line per event, appended the moment it happens.

A line is written as soon as a variant's run exists, so a crash never loses a run id (a re-run
finds the run instead of paying for it again). Appending keeps this linear: rewriting a JSON map
after every submit cost O(n^2), minutes at 10,000 variants. A line a crash cut short is skipped.

A variant's last run is its current one. When a failed run is retried (``--retry-failed``) a line
first records how it ended, then the new run's line follows, so the earlier failure stays in the
variant's history.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError


class Attempt(BaseModel):
    """One run of a variant; ``status`` and ``error`` say how it ended, once it was replaced."""

    run_id: str
    status: str | None = None
    error: str | None = None


class _Line(Attempt):
    key: str


class RunLog:
    """The append-only log at ``path`` (``runs.jsonl``), read once when opened."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._attempts: dict[str, list[Attempt]] = {}
        text = path.read_text() if path.exists() else ""
        self._torn = bool(text) and not text.endswith("\n")
        for raw in text.splitlines():
            try:
                line = _Line.model_validate_json(raw)
            except ValidationError:  # a line a crash cut short
                continue
            self._remember(line)

    def _remember(self, line: _Line) -> None:
        runs = self._attempts.setdefault(line.key, [])
        attempt = Attempt(run_id=line.run_id, status=line.status, error=line.error)
        if runs and runs[-1].run_id == line.run_id:
            runs[-1] = attempt  # how the current run ended
        else:
            runs.append(attempt)

    def current(self) -> dict[str, str]:
        """Each variant's current run id."""
        return {key: runs[-1].run_id for key, runs in self._attempts.items()}

    def run_id(self, key: str) -> str | None:
        runs = self._attempts.get(key)
        return runs[-1].run_id if runs else None

    def history(self, key: str) -> list[Attempt]:
        """The runs ``key`` had before its current one, oldest first."""
        return self._attempts.get(key, [])[:-1]

    def attempts(self, key: str) -> int:
        return len(self._attempts.get(key, []))

    def record(self, key: str, run_id: str, status: str | None = None,
               error: str | None = None) -> None:
        """Append a line: a new run of ``key``, or (with ``status``) how its current one ended."""
        line = _Line(key=key, run_id=run_id, status=status, error=error)
        with self.path.open("a") as f:
            f.write(("\n" if self._torn else "") + line.model_dump_json(exclude_none=True) + "\n")
        self._torn = False
        self._remember(line)
