"""A pool under bursty agents beside a campaign: routing on beside routing off (today), one run.

    python benchmarks/pool.py [--workers 8] [--threads 2] [--agents 6] [--loops 2] [--rounds 3]
                              [--variants 250] [--variant-images 16] [--load 3] [--fits 2]
                              [--sides off,on] [--quick] [--json]

Each side starts a pool of its own on one Redis the benchmark starts (``redis-server`` on a free
port, no persistence, shut down at the end): ``--workers`` real ``genloop worker`` processes
(one process, ``--threads`` threads each, on the CPU) serving three simulated models
(``workers/engine/simulated.py``: a load sleeps ``--load`` s, an image step 30 ms alone and 15 ms
from a batch of 8 on, 10 steps of 64 x 64; each model's ``resident_bytes`` is sized so a
worker's memory budget holds ``--fits`` of them), so the workers sleep instead of computing and
8 of them fit on 2 cores. Models are used 60/30/10 (``sim-a``/``sim-b``/``sim-c``), in exact
proportions, shuffled the same way on both sides. The traffic, the same on both sides:

1. warm-up: one 1 x 8 loop per model, at once (every model measured by some worker);
2. idle pool: ``--agents`` agents at once, each ``--loops`` loops (``--rounds`` rounds x 8
   candidates, interactive lane, scored by ``brand-palette``) one after another, 0-0.5 s apart;
3. beside the batch: a campaign of ``--variants`` runs of ``--variant-images`` images each
   (batch lane, 4 images an instance: by default 1,000 instances, the queued batch of #39's
   goal, about 14 times the loops' images; the loops take a share of the pool's time, so the
   batch beside them can keep at most ``campaign / (campaign + loops)`` of its rate alone,
   ``batch_bound`` in ``--json``) is submitted, the pool's status is read, and the agents run
   their loops again while it drains;
4. batch alone: the same campaign with fresh seeds on the pool with no loops beside it.

Figures per side:

- ``loads``: model loads summed over the workers (their presence records, read before they
  stop); ``reloads``: loads of a model a worker had loaded before (it was evicted in between);
  ``min_loads``: what the traffic needs at least, ``max(models, workers)``: every model loaded
  once, and every worker that is to be busy loading one.
- loop latency (submit to ``wait()`` returning, as the agent sees it), p50 and p95, on the idle
  pool and beside the batch;
- batch throughput alone, and beside the loops over alone (the issue's goal: within 10%);
- batch throughput: the campaign's images over the time from its first submit to its last run's
  end;
- utilisation: of the workers' presence records written while the campaign was unfinished, the
  share whose engine was generating (running a batch of a resident model), and the share
  loading one;
- backlog-estimate error: the pool status's seconds of work (summed over the models) right after
  the campaign is submitted, plus the loops then sent beside it at the rates the status
  measured (an autoscaler cannot know them; the benchmark does), over the workers, against the
  time the pool took from that read until the campaign and those loops had ended. Loads are in
  the time, not the estimate. ``--json`` adds each live worker's measured seconds per image step
  at that read (``backlog_step_seconds``), what the estimate rests on.

``GENLOOP_ROUTING`` (``on``/``off``) is set for each side in this process (the sender) and in
the workers. ``--quick`` is a smoke run of under a minute (2 workers, 2 agents of one 2-round
loop, a campaign of 4 x 8); its figures show that every part runs, not how a pool behaves.
Timings on a shared machine move: compare the two sides within one run. ``--sides on`` runs one
side alone (for trying a change; a report gives both).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

import redis

from genloop.sdk import Client, Graph, Loop, RunStatus
from genloop.workers.pool import pool_status as pool
from genloop.workers.stores.redis import RedisStateStore

MODELS = ("sim-a", "sim-b", "sim-c")
POPULARITY = (0.6, 0.3, 0.1)
PREFIX = "genloop"
STEPS, SIZE = 10, 64
#: Seconds per image step by batch size (the simulated models' ``step_seconds``).
STEP_SECONDS = {1: 0.03, 8: 0.015}
PALETTE = {"palette": ["#e4002b"]}
SIDES = ("off", "on")


def wait_until(done: Callable[[], bool], timeout: float, failed: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(failed)
        time.sleep(0.05)


@contextmanager
def redis_server(home: Path, appendonly: bool = False) -> Iterator[int]:
    """A Redis of the benchmark's own, without snapshots (an append-only file if asked, in
    ``home``); its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(["redis-server", "--port", str(port), "--daemonize", "yes", "--save", "",
                    "--appendonly", "yes" if appendonly else "no", "--dir", str(home),
                    "--logfile", str(home / "redis.log")], check=True)
    client = redis.Redis(port=port)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(up, 10, f"redis-server did not start; see {home / 'redis.log'}")
        yield port
    finally:
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:  # the server closes the connection as it goes
            pass


def worker_budget() -> int:
    """A CPU worker's memory budget, half the host's RAM (``residency.default_budget("cpu")``,
    which a test holds this to), read without importing torch: seconds of a smoke run."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def models_config(home: Path, args: argparse.Namespace) -> Path:
    """Three simulated models, each ``1 / fits`` of a worker's memory budget (a bit less)."""
    resident = int(worker_budget() / args.fits * 0.95)
    steps = ", ".join(f"{b} = {s}" for b, s in STEP_SECONDS.items())
    path = home / "models.toml"
    path.write_text("".join(
        f"[models.{m}]\nsteps = {STEPS}\nwidth = {SIZE}\nheight = {SIZE}\n\n"
        f"[models.{m}.simulated]\nload_seconds = {args.load}\nstep_seconds = {{ {steps} }}\n"
        f"resident_bytes = {resident}\n\n" for m in MODELS))
    return path


@contextmanager
def worker_pool(url: str, home: Path, config: Path, routing: str,
                args: argparse.Namespace) -> Iterator[None]:
    """``--workers`` ``genloop worker`` processes on ``url``, until all have said they live."""
    env = {**os.environ, "GENLOOP_ROUTING": routing, "CUDA_VISIBLE_DEVICES": ""}
    logs = home / f"workers-{routing}.log"
    with logs.open("w") as log:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "genloop.workers.cli.main", "worker", "--redis", url,
             "--artifacts", f"file://{home / 'artifacts'}", "--models", str(config),
             "--queues", "gpu,cpu", "--processes", "1", "--threads", str(args.threads),
             "--grace", "5"],
            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)
            for _ in range(args.workers)]
    client = redis.Redis.from_url(url)

    def up() -> bool:
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a worker exited; see {logs}")
        return len(pool.live_workers(client, PREFIX)) >= args.workers

    try:
        wait_until(up, 120, f"the workers did not start; see {logs}")
        yield
    finally:
        client.close()
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def proportional(n: int, rng: random.Random) -> list[str]:
    """``n`` model names in the popularity's proportions (each at least once where ``n`` is
    at least the models), shuffled."""
    counts = [round(n * share) for share in POPULARITY]
    if n >= len(MODELS):
        counts = [max(1, c) for c in counts]
    counts[0] += n - sum(counts)
    names = [m for m, c in zip(MODELS, counts, strict=True) for _ in range(c)]
    rng.shuffle(names)
    return names


def loop(model: str, seed: int, rounds: int) -> Loop:
    return Loop(prompt=f"an agent's picture {seed}", model=model, candidates=8, rounds=rounds,
                evaluator="brand-palette", evaluator_options=PALETTE, seed=seed,
                priority="interactive")


def run_agents(url: str, plans: Sequence[Sequence[tuple[Loop, float]]],
               loops: list[dict] | None = None) -> tuple[list[float], float]:
    """Each plan in a thread of its own (an agent): think, submit a loop, wait. The latencies,
    and when the last loop ended (epoch seconds). ``loops``: gets each loop's agent, model,
    start (seconds from the first agent's start) and latency."""
    latencies: list[float] = []
    ends: list[float] = []
    failed: list[str] = []
    began_all = time.perf_counter()

    def agent(number: int, plan: Sequence[tuple[Loop, float]]) -> None:
        with Client.connect(url) as client:
            for spec, think in plan:
                time.sleep(think)
                began = time.perf_counter()
                result = client.submit(spec).wait(timeout=900)
                latencies.append(time.perf_counter() - began)
                if loops is not None:
                    loops.append({"agent": number, "model": spec.model,
                                  "started_s": round(began - began_all, 2),
                                  "s": round(latencies[-1], 2)})
                ends.append(result.finished_at or time.time())
                if result.status != RunStatus.SUCCEEDED:
                    failed.append(f"{spec.prompt}: {result.error or result.failures[:1]}")

    threads = [threading.Thread(target=agent, args=(n, p)) for n, p in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise SystemExit(f"{len(failed)} loops failed, e.g. {failed[0]}")
    return latencies, max(ends)


def agent_plans(args: argparse.Namespace, phase: int) -> list[list[tuple[Loop, float]]]:
    rng = random.Random(phase)
    models = proportional(args.agents * args.loops, rng)
    return [[(loop(models[a * args.loops + i], 1_000_000 * phase + 1000 * a + 10 * i,
                   args.rounds), rng.uniform(0, 0.5)) for i in range(args.loops)]
            for a in range(args.agents)]


def campaign(args: argparse.Namespace, first_seed: int = 0) -> list[Graph]:
    runs = []
    for v, model in enumerate(proportional(args.variants, random.Random(7))):
        g = Graph(priority="batch")
        g.generate(f"campaign variant {v}", model=model, n=args.variant_images,
                   seed=first_seed + v, shard_size=4)
        runs.append(g)
    return runs


class Presence:
    """Every worker presence record written while sampling: ``(worker, seen) -> state``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client, self.records = client, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Presence:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            for w in pool.live_workers(self.client, PREFIX):
                self.records[(w.id, w.seen)] = w

    def shares(self, since: float, until: float) -> tuple[float | None, float | None]:
        """Of the records written in ``[since, until]``: the share generating, and loading."""
        held = [w for w in self.records.values() if since <= w.seen <= until]
        if not held:
            return None, None
        generating = sum(w.running is not None and w.running[0] in w.resident for w in held)
        loading = sum(w.running is not None and w.running[0] not in w.resident for w in held)
        return generating / len(held), loading / len(held)


def presence_after(client: redis.Redis, moment: float, workers: int) -> list[pool.WorkerState]:
    """Every worker's first presence record written after ``moment`` (it counts every load
    made before): a beat or two."""
    states: list[pool.WorkerState] = []

    def fresh() -> bool:
        states[:] = pool.live_workers(client, PREFIX)
        return len(states) >= workers and all(w.seen > moment for w in states)

    wait_until(fresh, 3 * pool.HEARTBEAT, "a worker stopped publishing its presence")
    return states


def p(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_side(port: int, db: int, home: Path, config: Path, routing: str,
             args: argparse.Namespace) -> dict[str, Any]:
    url = f"redis://127.0.0.1:{port}/{db}"
    os.environ["GENLOOP_ROUTING"] = routing  # this process sends too
    client = redis.Redis.from_url(url)
    marks = [time.time()]
    with worker_pool(url, home, config, routing, args), Presence(client) as presence:
        marks.append(time.time())
        run_agents(url, [[(loop(m, 7_000_000 + i, rounds=1), 0.0)]
                         for i, m in enumerate(MODELS)])
        marks.append(time.time())
        idle, _ = run_agents(url, agent_plans(args, 1))
        marks.append(time.time())
        with Client.connect(url) as sender:
            runs = [sender.submit(g) for g in campaign(args)]
            status = pool.pool_status(client, PREFIX, RedisStateStore(client=client, prefix=PREFIX))
            read_at = time.time()
            beside_loops: list[dict] = []
            beside, loops_end = run_agents(url, agent_plans(args, 2), beside_loops)
            results = [r.wait(timeout=1800) for r in runs]
            ended = max(r.finished_at or time.time() for r in results)
            marks.append(time.time())
            alone = [sender.submit(g) for g in campaign(args, first_seed=1_000_000)]
            results += [r.wait(timeout=1800) for r in alone]
            alone_ended = max(r.finished_at or time.time() for r in results[len(runs):])
        marks.append(time.time())
        workers = presence_after(client, marks[-1], args.workers)
    marks.append(time.time())
    client.close()
    if bad := [r for r in results if r.status != RunStatus.SUCCEEDED]:
        raise SystemExit(f"{len(bad)} campaign runs failed, e.g. {bad[0].failures[:1]}")
    began, took = marks[3], max(ended, loops_end) - read_at
    alone_rate = args.variants * args.variant_images / (alone_ended - marks[4])
    generating, loading = presence.shares(began, ended)
    estimate = backlog_estimate(status, agent_plans(args, 2), args.workers)
    return {
        **load_figures(workers),
        "loop_idle_p50_s": p(idle, 0.5), "loop_idle_p95_s": p(idle, 0.95),
        "loop_beside_batch_p50_s": p(beside, 0.5), "loop_beside_batch_p95_s": p(beside, 0.95),
        "batch_images_per_s": args.variants * args.variant_images / (ended - began),
        "batch_s": ended - began,
        "batch_alone_images_per_s": alone_rate,
        "batch_beside_vs_alone": args.variants * args.variant_images / (ended - began) / alone_rate,
        "batch_bound": batch_bound(args),
        "utilisation": generating, "loading_share": loading,
        "backlog_estimate_s": estimate, "backlog_actual_s": took,
        "backlog_error": None if estimate is None else estimate / took - 1,
        "backlog_step_seconds": [w.step_seconds for w in status.workers],
        "loops_idle_s": idle, "loops_beside_batch_s": beside,
        "loops_beside_batch": sorted(beside_loops, key=lambda r: r["started_s"]),
        "phases_s": dict(zip(("start", "warm-up", "idle pool", "beside the batch",
                              "batch alone", "stop"),
                             (b - a for a, b in zip(marks, marks[1:], strict=False)),
                             strict=True)),
    }


def backlog_estimate(status: pool.PoolStatus, beside: Sequence[Sequence[tuple[Loop, float]]],
                     workers: int) -> float | None:
    """Seconds the pool should take for the campaign and the loops beside it: the status's
    seconds of work (the campaign, just submitted) plus the loops' images at the rates it
    measured, over the workers; ``None`` while a model has no measured rate."""
    rates = {m.model: m.seconds / (m.images * STEPS) for m in status.models if m.seconds}
    loops = [spec for plan in beside for spec, _ in plan]
    if len(rates) < len(status.models) or any(spec.model not in rates for spec in loops):
        return None
    images = sum(rates[spec.model] * spec.candidates * spec.rounds * STEPS for spec in loops)
    return (sum(m.seconds or 0.0 for m in status.models) + images) / workers


def batch_bound(args: argparse.Namespace) -> float:
    """The most of its rate alone the batch can keep beside the loops: their images take the
    pool's time too (a loop's images cost what the campaign's do, at the same batch size)."""
    images = args.variants * args.variant_images
    loops = args.agents * args.loops * args.rounds * 8
    return images / (images + loops)


def load_figures(workers: Sequence[pool.WorkerState]) -> dict[str, Any]:
    loads = sum(sum(w.loads.values()) for w in workers)
    return {"loads": loads, "reloads": loads - sum(len(w.loads) for w in workers),
            "min_loads": max(len(MODELS), len(workers)),
            "loads_by_worker": [w.loads for w in workers]}


#: The table's rows: label, figure, format.
ROWS = (
    ("model loads", "loads", "{:.0f}"), ("  reloads (after an eviction)", "reloads", "{:.0f}"),
    ("  minimum the traffic needs", "min_loads", "{:.0f}"),
    ("loop p50, idle pool (s)", "loop_idle_p50_s", "{:.2f}"),
    ("loop p95, idle pool (s)", "loop_idle_p95_s", "{:.2f}"),
    ("loop p50, beside the batch (s)", "loop_beside_batch_p50_s", "{:.2f}"),
    ("loop p95, beside the batch (s)", "loop_beside_batch_p95_s", "{:.2f}"),
    ("batch throughput (images/s)", "batch_images_per_s", "{:.1f}"),
    ("batch throughput alone (images/s)", "batch_alone_images_per_s", "{:.1f}"),
    ("  beside the loops / alone", "batch_beside_vs_alone", "{:.2f}"),
    ("  at most (the loops' share)", "batch_bound", "{:.2f}"),
    ("utilisation while backlog", "utilisation", "{:.0%}"),
    ("  loading while backlog", "loading_share", "{:.0%}"),
    ("backlog estimate (s)", "backlog_estimate_s", "{:.1f}"),
    ("backlog actual (s)", "backlog_actual_s", "{:.1f}"),
    ("backlog-estimate error", "backlog_error", "{:+.0%}"),
)


def table(sides: dict[str, dict[str, Any]]) -> str:
    def cell(value: Any, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)

    both = len(sides) == 2
    lines = [f"{'':34s}" + "".join(f"{'routing ' + side:>12s}" for side in sides)
             + (f"{'on / off':>10s}" if both else "")]
    for label, key, fmt in ROWS:
        line = f"{label:34s}" + "".join(f"{cell(s[key], fmt):>12s}" for s in sides.values())
        if both:
            off, on = sides["off"][key], sides["on"][key]
            line += f"{on / off:.2f}x".rjust(10) if off and on is not None else f"{'-':>10s}"
        lines.append(line)
    return "\n".join(lines)


def sides_arg(text: str) -> tuple[str, ...]:
    chosen = tuple(t.strip() for t in text.split(",") if t.strip())
    if not chosen or any(t not in SIDES for t in chosen):
        raise argparse.ArgumentTypeError(f"sides are {', '.join(SIDES)}: got {text!r}")
    return tuple(t for t in SIDES if t in chosen)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="threads per worker")
    parser.add_argument("--agents", type=int, default=6, help="agents looping at once")
    parser.add_argument("--loops", type=int, default=2, help="loops per agent and phase")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 8 images per loop")
    parser.add_argument("--variants", type=int, default=250, help="the campaign's runs")
    parser.add_argument("--variant-images", type=int, default=16, help="images per variant")
    parser.add_argument("--load", type=float, default=3.0, help="seconds a model load takes")
    parser.add_argument("--fits", type=int, default=2, help="models a worker's memory holds")
    parser.add_argument("--sides", type=sides_arg, default=SIDES,
                        help="routing off, on or both (off,on), in that order")
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.agents, args.loops, args.rounds = 2, 2, 1, 2
        args.variants, args.variant_images, args.load = 4, 8, 0.5
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    # Each side sets GENLOOP_ROUTING here (this process sends); the caller's comes back after.
    with tempfile.TemporaryDirectory(prefix="genloop-bench-pool-") as tmp, \
            patch.dict(os.environ), redis_server(Path(tmp)) as port:
        config = models_config(Path(tmp), args)
        sides = {side: run_side(port, db, Path(tmp), config, side, args)
                 for db, side in enumerate(SIDES, start=1) if side in args.sides}
    report = {"settings": {**vars(args), "models": dict(zip(MODELS, POPULARITY, strict=True)),
                           "steps": STEPS, "step_seconds": STEP_SECONDS},
              "sides": sides,
              "on_vs_off": {key: sides["on"][key] / sides["off"][key] for _, key, _ in ROWS
                            if len(sides) == 2 and sides["off"][key]
                            and sides["on"][key] is not None}}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.workers} workers x {args.threads} threads; models "
          + ", ".join(f"{m} {p:.0%}" for m, p in zip(MODELS, POPULARITY, strict=True))
          + f" (load {args.load:g} s, {args.fits} fit a worker); {args.agents} agents x "
          f"{args.loops} loops of {args.rounds} x 8 per phase; a campaign of {args.variants} x "
          f"{args.variant_images} images")
    print(table(sides))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
