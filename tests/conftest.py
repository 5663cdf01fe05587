"""Shared fixtures: an embedded client per test, one resident set of models per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

# Without a GPU the Triton kernels run on CPU tensors through Triton's interpreter, which must be
# chosen before any test module imports them; with one they are compiled (the interpreter is
# opt-in: tests/kernel_ops/conftest.py explains).
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, str(Path(__file__).parent))

import genloop_test_ops  # noqa: E402,F401  (registers the ops the tests use)
from worker_redis import use_own_redis  # noqa: E402

use_own_redis()  # before redis_util reads the port

from redis_util import PORT, orphaned_workers  # noqa: E402


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to start beside worker pools a killed test run left on the test Redis: they run
    old code and take this session's messages, and the tests they break point elsewhere."""
    if orphans := orphaned_workers(PORT):
        listed = ", ".join(f"{pid} (parent {parent})" for pid, parent in orphans)
        pytest.exit(
            f"genloop worker pools left by an earlier test run are attached to the test Redis "
            f"(port {PORT}): pids {listed}. Stop each pool's process group "
            f"(kill -- -PID) and run again.", returncode=3)


@pytest.fixture(scope="session")
def resources():
    """Models load once per test session, as they would once per worker process."""
    from genloop.workers.models.resources import Resources

    return Resources(device="cpu")


@pytest.fixture
def client(tmp_path, resources):
    from genloop.sdk import Client

    with Client.local(home=tmp_path / "home", threads=4, resources=resources,
                      lease_ttl=5.0) as c:
        yield c


@pytest.fixture
def runtime(client):
    return client.backend.runtime


# The built wheel and its venvs (tests/wheel_util.py): built once per session, only when a test
# asks for them.
@pytest.fixture(scope="session")
def built_dist(tmp_path_factory):
    from wheel_util import build

    return build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory, built_dist):
    """A fresh venv with only the wheel and its base dependencies (pydantic, httpx, tenacity)."""
    from wheel_util import make_venv

    path = tmp_path_factory.mktemp("venv") / "base"
    make_venv(path, built_dist.wheel)
    return path


@pytest.fixture(scope="session")
def workers_venv(tmp_path_factory, built_dist):
    """A fresh venv with ``genloop[workers]`` from the wheel (torch reused, see wheel_util)."""
    from wheel_util import make_venv

    path = tmp_path_factory.mktemp("venv") / "workers"
    make_venv(path, built_dist.wheel, extra="workers")
    return path
