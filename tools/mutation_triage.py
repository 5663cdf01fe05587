"""Check mutmut's survivors against tests its fast selection leaves out, a few seconds each.

``make mutation`` runs each mutant against the fast files that reach its function. A survivor
(or a mutant no fast test reaches) may still be killed by a slower file: running it against a
whole directory costs that directory's minutes per mutant. This runs it only against the tests
that ran the line it changes, from a coverage map (coverage's per-test contexts), in children
forked from one process that imported pytest, torch and the tests once (what mutmut does for
its own runs; mutmut has no way to take another selection for a list of mutants).

    python tools/mutation_triage.py map tests/gateway --ignore=tests/gateway/test_base_cli.py
    python tools/mutation_triage.py run --port 6386 NAME... (or --from FILE) [--past-fast]

``map`` writes ``out/mutation/coverage`` (run from the checkout root, with the test Redis
port set as for pytest). ``run`` works in ``out/mutation`` (a ``make mutation`` there first,
whose sources the map must match) and prints ``NAME EXIT SECONDS`` per mutant: 1 killed, 0
survived, 3 a refused session (a pool another run left on the port), 33 no test ran its
function, 124 timed out, 2/4/5 a bad selection; its tests' output goes to
``out/mutation/triage/NAME.log``. Lines that run while a session fixture starts (a
constructor) are credited to the test running then, or to none, not to the tests that use
what it built: give such a mutant its files with ``--tests``. Each lane needs a Redis port of
its own (``--port``): the gateway's Redis stack empties its database when it starts. A
mutant's tests run those that failed most often in the logs so far first (one function's
mutants tend to die in the same test), then the fast files; ``--past-fast`` leaves the fast
files out, for survivors of a ``make mutation`` run.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "mutation"
COVERAGE = OUT / "coverage"
SOURCES = OUT / "coverage.sources"
sys.path.insert(0, str(ROOT / "tests"))


def coverage_map(args: list[str]) -> None:
    """Run the tests once under coverage, recording which test ran each line."""
    COVERAGE.parent.mkdir(parents=True, exist_ok=True)
    rc = COVERAGE.with_suffix(".rc")
    # genloop's folders are the checkout's own (an editable install maps them): measured by path
    rc.write_text(f"[run]\ninclude = {ROOT}/*\nomit = {ROOT}/tests/*\n    {ROOT}/.venv/*\n"
                  f"dynamic_context = test_function\ndata_file = {COVERAGE}\n")
    subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest",
                    "-q", "-p", "no:cacheprovider", *args], cwd=ROOT, check=False)
    from coverage import CoverageData

    data = CoverageData(basename=str(COVERAGE))
    data.read()  # the sources as mapped: a later edit moves the lines the map names
    SOURCES.write_text(json.dumps({f: _digest(Path(f)) for f in data.measured_files()}))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _functions(source: Path) -> dict[str, tuple[int, int]]:
    """mutmut's mangled name of each function and method, with its first and last line."""
    tree = ast.parse(source.read_text())
    spans = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            spans[f"x_{node.name}"] = (node.lineno, node.end_lineno or node.lineno)
        elif isinstance(node, ast.ClassDef):
            for f in node.body:
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                    spans[f"x\u01c1{node.name}\u01c1{f.name}"] = (f.lineno,
                                                                  f.end_lineno or f.lineno)
    return spans


def covering_tests(name: str) -> list[str]:
    """The tests (pytest ids) that ran a line the mutant changes; if it changes a line no test
    is credited with (a default on the ``def`` line, the tail of a statement), those that ran
    any line of its function."""
    from mutmut.__main__ import find_mutant, get_diff_for_mutant

    mutant = find_mutant(name)
    lines, functions, by_line = _mapped(mutant.path)
    first, last = functions[name.rsplit(".", 1)[1].split("__mutmut_")[0]]
    removed = {line[1:].strip() for line in get_diff_for_mutant(name, path=mutant.path)
               .splitlines() if line.startswith("-") and not line.startswith("---")}
    changed = [i for i in range(first, last + 1) if lines[i - 1].strip() in removed]

    def tests(span) -> set[str]:
        return {c for i in span for c in by_line.get(i, []) if c}

    ids = {_pytest_id(c) for c in tests(changed) or tests(range(first, last + 1))}
    return sorted(ids - {None})


def ordered(selected: list[str], past_fast: bool) -> list[str]:
    """The tests that killed most of the mutants checked so far (by any lane) first, then
    mutmut's own fast files, where most mutants die in a second or two; without those files
    for a mutant that survived them."""
    kills = _kills()
    return sorted((t for t in selected if not (past_fast and _fast(t))),
                  key=lambda t: (-kills.get(_relative(t), 0), not _fast(t), t))


def _kills() -> dict[str, int]:
    """How many logs in ``out/mutation/triage`` name each test as the one that failed (in
    pytest's summary, at a log's end: read for every mutant, so only the tail)."""
    kills: dict[str, int] = {}
    for log in (OUT / "triage").glob("*.log"):
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            tail = f.read().decode(errors="replace")
        for line in tail.splitlines():
            if line.startswith("FAILED "):
                test = _relative(line.split()[1])
                kills[test] = kills.get(test, 0) + 1
    return kills


def _relative(test: str) -> str:
    """A test id from ``tests/`` on, however its path was written, without its parameters
    (the map's ids have none)."""
    return (test[test.index("tests/"):] if "tests/" in test else test).split("[")[0]


@functools.cache
def _fast_files() -> frozenset[Path]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    return frozenset((ROOT / f).resolve() for f in config["pytest_add_cli_args_test_selection"])


def _fast(test: str) -> bool:
    path = Path(test.split("::")[0])
    return any(path == f or f in path.parents for f in _fast_files())


@functools.cache
def _mapped(path: Path) -> tuple[list[str], dict[str, tuple[int, int]], dict[int, list[str]]]:
    """One mutated module's lines, functions and the tests the map credits each line with:
    read once for all of its mutants."""
    from coverage import CoverageData

    source = OUT / path  # the copy mutmut mutated
    data = CoverageData(basename=str(COVERAGE))
    data.read()
    inside = "/" + str(Path(*path.parts[1:]))  # genloop/ is no folder of the checkout
    measured = next(f for f in data.measured_files() if f.endswith(inside))
    if json.loads(SOURCES.read_text()).get(measured) != _digest(source):
        sys.exit(f"{source} is not the {measured} mapped: the coverage map is stale, map again")
    return source.read_text().splitlines(), _functions(source), data.contexts_by_lineno(measured)


def _pytest_id(context: str) -> str | None:
    """``test_module[.Class].test_function`` (coverage's context) as a pytest id, every
    parameter; a module name two test folders share is read as the first one's. None for a
    library's own function named like a test (hypothesis' ``ConjectureRunner.test_function``,
    jinja2's tests), which coverage credits in place of the test that called it."""
    module, *rest = context.split(".")
    paths = sorted(ROOT.glob(f"tests/**/{module}.py"))
    return "::".join([str(paths[0]), *rest]) if paths else None


def run(names: list[str], port: str, tests: list[str], past_fast: bool) -> None:
    """Fork a child per mutant that runs its tests with ``-x``; print each verdict."""
    tests = [str(Path(t).resolve()) if "::" not in t else t for t in tests]
    os.chdir(OUT)  # where mutmut finds its mutants
    selections = {name: tests or covering_tests(name) for name in names}
    os.chdir(OUT / "mutants")
    sys.path.insert(0, os.getcwd())
    os.environ.update(GENLOOP_TEST_REDIS_PORT=port, MUTANT_UNDER_TEST="")
    from redis_util import orphaned_workers  # after the port is set: it reads it on import
    logs = OUT / "triage"
    logs.mkdir(exist_ok=True)
    import torch  # noqa: F401  (imported once, here, not in every child)

    files = sorted({t.split("::")[0] for s in selections.values() for t in s})
    if files:  # the tests imported here, once (none given would collect every test)
        quiet, saved = os.open(os.devnull, os.O_WRONLY), os.dup(1)
        os.dup2(quiet, 1)
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *files])
        sys.stdout.flush()
        os.dup2(saved, 1)
    for name, covering in selections.items():
        started = time.monotonic()
        if not covering:
            print(f"{name} 33 0.0", flush=True)  # mutmut's "no tests"
            continue
        selected = covering if tests else ordered(covering, past_fast)
        if not selected:  # only fast files reach it, and it survived them
            print(f"{name} 0 0.0", flush=True)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.setpgid(0, 0)
                log = os.open(logs / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                              0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.environ["MUTANT_UNDER_TEST"] = name
                code = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", *selected],
                                       plugins=[InOrder(selected)]))
            finally:  # never back into the parent's loop; pytest leaves its summary buffered
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        code = _reap(pid, timeout=600)
        # this lane's pools: those its tests started (sessions of their own), then any a
        # child killed at its timeout left behind
        subprocess.run(["pkill", "-f", f"cli.main worker --redis redis://127.0.0.1:{port}"])
        for orphan, _ in orphaned_workers(int(port)):
            os.kill(orphan, signal.SIGKILL)
        print(f"{name} {code} {time.monotonic() - started:.1f}", flush=True)


class InOrder:
    """Runs the tests in the order selected: pytest collects the files of one folder in the
    order of their names, whatever the order they are given in."""

    def __init__(self, selected: list[str]) -> None:
        self.rank: dict[tuple[str, str], int] = {}
        for i, test in enumerate(selected):
            path, _, name = test.partition("::")
            self.rank.setdefault((str(Path(path).resolve()), name), i)

    @pytest.hookimpl(tryfirst=True)  # then pytest groups by session parameter (one stack)
    def pytest_collection_modifyitems(self, items: list) -> None:
        def rank(item) -> int:
            name = "::".join(item.nodeid.split("::")[1:]).split("[")[0]
            path = str(item.path)
            return self.rank.get((path, name), self.rank.get((path, ""), len(self.rank)))

        items.sort(key=rank)


def _reap(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return 124


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("map", help="pytest's arguments follow")
    checks = sub.add_parser("run")
    checks.add_argument("names", nargs="*")
    checks.add_argument("--from", dest="source", type=Path, help="a file of mutant names")
    checks.add_argument("--port", default=os.environ.get("GENLOOP_TEST_REDIS_PORT", "6379"),
                        help="this lane's Redis port (default: GENLOOP_TEST_REDIS_PORT, 6379)")
    checks.add_argument("--tests", action="append", default=[],
                        help="a test (file or id) for every name; repeat for more")
    checks.add_argument("--past-fast", action="store_true",
                        help="the names survived mutmut's fast files: leave them out "
                             "(not with --tests, whose tests run as given)")
    args, rest = parser.parse_known_args()
    if args.command == "map":
        coverage_map(rest)
    elif rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    else:
        names = args.names + (args.source.read_text().split() if args.source else [])
        run(names, args.port, args.tests, args.past_fast)


if __name__ == "__main__":
    main()
