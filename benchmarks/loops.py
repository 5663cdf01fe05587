"""Loops: genloop against the loop an agent would write by hand, on the shipped shapes models.

    python benchmarks/loops.py [--loops 1,8,32] [--repeats 3] [--rounds 3] [--candidates 8]
                               [--grid T:W,...] [--redis redis://localhost:6379/15] [--json]

- ``script``: the hand-written loop. For each prompt, one after another: per round one batched
  diffusers call for the round's images (the ``shapes`` pipeline loaded with diffusers alone,
  the model's steps and guidance, one seeded generator per image, no step cache), one batched
  open_clip scoring call (``shapes-clip``), keep the best, the next round's seeds from the same
  ``seed-search`` rule genloop uses, in a process of its own (as a user's script runs).
- ``genloop``: the same loops as :class:`~genloop.sdk.Loop` runs on ``Client.local()`` at its
  defaults, all submitted at once; with ``--redis URL`` on one ``genloop worker`` process
  instead (the benchmark flushes that database before each repetition). ``--grid 1:1,1:4,2:4``
  runs genloop's side at each thread setting (torch intra-op threads : worker threads) in turn,
  against the same script runs; the script runs at torch's own default thread count unless
  ``--script-threads`` says otherwise.

For each loop count it prints the median wall time of each side, the ratio script / genloop
(> 1: genloop is faster), the engine's batch-size histogram, the seconds spent inside model
calls (generation batches + scoring batches) vs the rest (orchestration), and how busy the
engine was (its share of the wall, and its seconds per image: a starved engine, or one slowed
by threads fighting over the cores, shows there). On Linux it also splits genloop's CPU time by
thread (the engine's, the scorer's, torch's own pool, everything else: orchestration) and says
how long the engine's thread was ready to run but waited for a core (the machine's other work,
or this process's own threads). Every repetition uses
a fresh store, so nothing is reused between repetitions. The machine this runs on may be shared:
compare medians, and rerun when the spread is large.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from genloop import shapes
from genloop.sdk import Client, Loop


class Setting(BaseModel):
    """One thread setting of genloop's side: torch intra-op threads x worker threads. Torch
    threads ``None``: genloop's default, each model call taking its share of the cores."""

    torch_threads: int | None
    worker_threads: int

    @property
    def label(self) -> str:
        torch = "shared" if self.torch_threads is None else self.torch_threads
        return f"torch {torch} x workers {self.worker_threads}"


@dataclass
class Measured:
    """One genloop repetition: wall seconds, seconds inside generation and scoring batches,
    and the sizes of those batches."""

    wall: float
    engine_s: float
    score_s: float
    batches: list[int]
    score_batches: list[int]
    #: CPU seconds by thread role (see :class:`ThreadClock`); empty where not measured.
    cpu: dict[str, float] = field(default_factory=dict)


class Side(BaseModel):
    wall_s: list[float]
    model_s: list[float]
    #: genloop only: seconds inside generation batches (the rest of model_s is scoring).
    engine_s: list[float] = []
    #: genloop only: CPU seconds by thread role, one dict per repetition (Linux).
    cpu_s: list[dict[str, float]] = []

    @property
    def median(self) -> float:
        return statistics.median(self.wall_s) if self.wall_s else float("nan")


class LoopsReport(BaseModel):
    loops: int
    setting: Setting
    script: Side
    genloop: Side
    ratio: float
    batch_sizes: dict[int, int]
    score_batch_images: dict[int, int]


# -- the hand-written script -------------------------------------------------------------------
class Script:
    """The loop written by hand with diffusers and open_clip, nothing from genloop's runtime."""

    def __init__(self, device: str) -> None:
        from diffusers import DiffusionPipeline

        from genloop.evaluators import get_evaluator

        self.pipe = DiffusionPipeline.from_pretrained(
            str(shapes.pipeline_path()), local_files_only=True).to(device)
        self.pipe.set_progress_bar_config(disable=True)
        self.judge = get_evaluator(shapes.CLIP_MODEL_NAME, device=device)
        self.device = device
        self.model_s = 0.0

    def loop(self, prompt: str, rounds: int, candidates: int, keep: int = 2) -> float:
        import torch

        from genloop.sdk.ops import RefineParams, ScoredCandidate
        from genloop.workers.ops.refine import seed_search

        size = self.pipe.unet.config.sample_size * self.pipe.vae_scale_factor
        requests = [(prompt, s) for s in range(candidates)]
        scored: list[ScoredCandidate] = []
        for r in range(1, rounds + 1):
            began = time.perf_counter()
            images = self.pipe(
                prompt=[p for p, _ in requests], num_inference_steps=shapes.DEFAULT_STEPS,
                guidance_scale=shapes.DEFAULT_GUIDANCE, width=size, height=size,
                generator=[torch.Generator("cpu").manual_seed(s) for _, s in requests],
            ).images
            values = self.judge.score(images, prompt).values
            self.model_s += time.perf_counter() - began
            scored += [
                ScoredCandidate(index=i, prompt=p, seed=s, round=r, model="shapes",
                                artifact="-", width=size, height=size,
                                steps=shapes.DEFAULT_STEPS, score=v, evaluator="shapes-clip")
                for i, ((p, s), v) in enumerate(zip(requests, values, strict=True))
            ]
            if r < rounds:
                nxt = seed_search(scored, RefineParams(prompt=prompt, candidates=candidates,
                                                       round=r, keep=keep))
                requests = [(q.prompt, q.seed) for q in nxt]
        return max(c.score for c in scored)

    def run(self, prompts: list[str], rounds: int, candidates: int) -> tuple[float, float]:
        self.model_s = 0.0
        began = time.perf_counter()
        for p in prompts:
            self.loop(p, rounds, candidates)
        return time.perf_counter() - began, self.model_s


class ScriptProcess:
    """The script in a process of its own, as a user's script is. In genloop's process it
    would share OpenMP with genloop's threads: teams of threads that together outnumber the
    cores make GNU OpenMP sleep at barriers, and the script's calls ran 2x slower there."""

    def __init__(self, device: str, threads: int | None) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_serve_script, args=(theirs, device, threads),
                                        daemon=True)
        self._process.start()
        self.threads = self._conn.recv()

    def run(self, prompts: list[str], rounds: int, candidates: int) -> tuple[float, float]:
        self._conn.send((prompts, rounds, candidates))
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(30)


def _serve_script(conn, device: str, threads: int | None) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)
    script = Script(device)
    conn.send(torch.get_num_threads())
    while (job := conn.recv()) is not None:
        conn.send(script.run(*job))


# -- genloop ---------------------------------------------------------------------------------
class ThreadClock:
    """CPU seconds of this process's threads between :meth:`start` and :meth:`stop`, by role.

    Roles: ``engine`` (the generation engine's batch thread), ``scorer`` (the score batcher's),
    ``torch pool`` (threads Python did not start: torch's intra-op workers), ``orchestration``
    (every other thread: Dramatiq's workers, completions, leases, sweeper, the waiting client),
    and ``engine waited`` (seconds the engine's thread was ready to run but had no core). Reads
    ``/proc/self/task`` (Linux); elsewhere it measures nothing. Call :meth:`stop` while the
    client's threads are still alive."""

    ROLES = {"genloop-generation-engine": "engine", "genloop-score-batcher": "scorer"}

    def __init__(self, engine_thread: threading.Thread | None) -> None:
        self.engine = engine_thread.native_id if engine_thread is not None else None
        self.began: dict[int, float] = {}
        self.waited = 0.0

    @staticmethod
    def _cpu() -> dict[int, float]:
        tick, out = os.sysconf("SC_CLK_TCK"), {}
        for tid in os.listdir("/proc/self/task"):
            try:
                fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        return out

    def _waited(self) -> float:
        if self.engine is None:
            return 0.0
        stat = Path(f"/proc/self/task/{self.engine}/schedstat")
        try:  # ns on a cpu, ns runnable but waiting for one, timeslices
            return int(stat.read_text().split()[1]) / 1e9
        except (FileNotFoundError, ProcessLookupError):
            return 0.0

    def start(self) -> None:
        if os.path.isdir("/proc/self/task"):
            self.began, self.waited = self._cpu(), self._waited()

    def stop(self) -> dict[str, float]:
        if not self.began:
            return {}
        python = {t.native_id: t.name for t in threading.enumerate()}
        roles: dict[str, float] = collections.defaultdict(float)
        for tid, seconds in self._cpu().items():
            name = python.get(tid)
            role = "torch pool" if name is None else self.ROLES.get(name, "orchestration")
            roles[role] += seconds - self.began.get(tid, 0.0)
        roles["engine waited"] = self._waited() - self.waited
        return dict(roles)


def _distinct_prompts(n: int) -> list[str]:
    """``n`` different held-out captions: two loops of one prompt are the same work, which
    genloop would run once for both and the script twice (32 held-out seeds repeat one)."""
    out: list[str] = []
    start = 0
    while len(out) < n:
        for scene in shapes.heldout_prompts(n, start=start):
            if (caption := scene.caption()) not in out and len(out) < n:
                out.append(caption)
        start += n
    return out


def _loops(prompts: list[str], rounds: int, candidates: int) -> list[Loop]:
    return [Loop(prompt=p, rounds=rounds, candidates=candidates, seed=0,
                 model=shapes.PIPELINE_NAME, evaluator=shapes.CLIP_MODEL_NAME) for p in prompts]


def _run_all(client: Client, loops: list[Loop]) -> float:
    """Seconds from the first submit to the last ``Run.wait`` returning with its result: what
    the user waits, as the script's wall is."""
    began = time.perf_counter()
    runs = [client.submit(loop) for loop in loops]
    for run in runs:
        result = run.wait(timeout=3600)
        if result.status != "succeeded":
            raise RuntimeError(f"run {run.id} ended {result.status}: {result.error}")
    return time.perf_counter() - began


class Local:
    """``Client.local()``; the models stay resident across repetitions and settings."""

    def __init__(self, root: Path) -> None:
        # One Resources (models loaded once) per torch setting: a pinned count is the
        # process's, set by its Resources, while the default shares the cores per call.
        self.root, self.n = root, 0
        self.resources: dict[int | None, Any] = {}

    def run(self, loops: list[Loop], setting: Setting) -> Measured:
        import torch

        self.n += 1
        resources = self.resources.get(setting.torch_threads)
        if resources is None:
            from genloop.workers.models.resources import Resources

            resources = self.resources[setting.torch_threads] = Resources(
                torch_threads=setting.torch_threads)
        if setting.torch_threads is not None:
            torch.set_num_threads(setting.torch_threads)
        batcher, scoring = resources.models.engine.batcher, resources.scoring
        gen, score = len(batcher.seconds), len(scoring.seconds)
        clock = ThreadClock(batcher._thread)
        with Client.local(home=self.root / f"rep{self.n}", resources=resources,
                          threads=setting.worker_threads) as client:
            clock.start()
            wall = _run_all(client, loops)
            cpu = clock.stop()
        return Measured(wall, sum(batcher.seconds[gen:]), sum(scoring.seconds[score:]),
                        batcher.batches[gen:], [n for _, n, _ in scoring.batches[score:]], cpu)

    def close(self) -> None:
        pass


class Pool:
    """One ``genloop worker`` process on a Redis database (flushed before each repetition).

    The batch log lives in the worker process, so only wall times come back."""

    def __init__(self, root: Path, url: str, setting: Setting) -> None:
        import redis

        self.url, self.redis, self.setting = url, redis.Redis.from_url(url), setting
        self.artifacts = f"file://{root / 'artifacts'}"
        self.redis.flushdb()
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "genloop.workers.cli.main", "worker", "--redis", url,
             "--artifacts", self.artifacts, "--threads", str(setting.worker_threads),
             "--preload", shapes.PIPELINE_NAME],
            env={**os.environ, "GENLOOP_TORCH_THREADS": str(setting.torch_threads or "")})
        deadline = time.monotonic() + 600
        while not self.redis.hexists("genloop:ops", "generate"):  # published last
            if self.worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the genloop worker did not start")
            time.sleep(0.2)
        # What the worker published at start (its ops, models, queues, artifacts): kept across
        # the flush that gives each repetition an empty store.
        self.catalogue = {k: self.redis.dump(k) for k in self.redis.keys("genloop:*")}

    def run(self, loops: list[Loop], setting: Setting) -> Measured:
        assert setting == self.setting, "one worker process, one setting"
        self.redis.flushdb()
        for key, value in self.catalogue.items():
            self.redis.restore(key, 0, value)
        with Client.connect(self.url, artifacts=self.artifacts) as client:
            return Measured(_run_all(client, loops), float("nan"), float("nan"), [], [])

    def close(self) -> None:
        self.worker.terminate()
        self.worker.wait(30)


def _settings(grid: str | None) -> list[Setting]:
    """``--grid 1:4,2:2`` (torch threads : worker threads); default genloop's own defaults."""
    if not grid:
        return [Setting(torch_threads=None, worker_threads=DEFAULT_WORKER_THREADS)]
    out = []
    for pair in grid.split(","):
        t, w = pair.split(":")
        out.append(Setting(torch_threads=int(t), worker_threads=int(w)))
    return out


#: ``Client.local()``'s default worker threads.
DEFAULT_WORKER_THREADS = inspect.signature(Client.local).parameters["threads"].default


def main(argv: list[str] | None = None) -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", default="1,8,32", help="concurrent loop counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--grid", default=None, metavar="T:W,...",
                        help="genloop thread settings to compare, torch intra-op threads : "
                        "worker threads (default: genloop's defaults)")
    parser.add_argument("--script-threads", type=int, default=None,
                        help="torch threads of the script (default: torch's own default)")
    parser.add_argument("--no-script", action="store_true",
                        help="genloop's side only (the script's time grows linearly with "
                        "the loops: scale a smaller run's)")
    parser.add_argument("--redis", default=None, help="run genloop on one `genloop worker` "
                        "against this Redis URL (its database is flushed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.loops.split(",")]
    settings = _settings(args.grid)
    if args.redis and len(settings) > 1:
        parser.error("--redis runs one worker process: give one --grid setting")
    prompts = _distinct_prompts(max(counts) + 1)
    warm, prompts = prompts[:1], prompts[1:]
    # The script runs in a process of its own, at torch's own default unless told otherwise.
    script = None if args.no_script else ScriptProcess(args.device, args.script_threads)
    script_threads = script.threads if script is not None else None
    # Warm-up at full size on both sides: model loads and first-call kernel choices.
    if script is not None:
        script.run(warm, args.rounds, args.candidates)
    reports = []
    with tempfile.TemporaryDirectory() as home:
        side = (Pool(Path(home), args.redis, settings[0]) if args.redis
                else Local(Path(home)))
        try:
            side.run(_loops(warm, args.rounds, args.candidates), settings[0])
            for n in counts:
                chosen = prompts[:n]
                loops = _loops(chosen, args.rounds, args.candidates)
                theirs = Side(wall_s=[], model_s=[])
                mine = {s.label: Side(wall_s=[], model_s=[]) for s in settings}
                gen: dict[str, list[int]] = {s.label: [] for s in settings}
                sc: dict[str, list[int]] = {s.label: [] for s in settings}
                for _ in range(args.repeats):
                    if script is not None:
                        wall, model = script.run(chosen, args.rounds, args.candidates)
                        theirs.wall_s.append(wall)
                        theirs.model_s.append(model)
                    for setting in settings:
                        m = side.run(loops, setting)
                        ours = mine[setting.label]
                        ours.wall_s.append(m.wall)
                        ours.model_s.append(m.engine_s + m.score_s)
                        ours.engine_s.append(m.engine_s)
                        if m.cpu:
                            ours.cpu_s.append(m.cpu)
                        gen[setting.label] += m.batches
                        sc[setting.label] += m.score_batches
                for setting in settings:
                    ours = mine[setting.label]
                    reports.append(LoopsReport(
                        loops=n, setting=setting, script=theirs, genloop=ours,
                        ratio=theirs.median / ours.median if theirs.wall_s else float("nan"),
                        batch_sizes=dict(sorted(collections.Counter(gen[setting.label]).items())),
                        score_batch_images=dict(
                            sorted(collections.Counter(sc[setting.label]).items())),
                    ))
                    if not args.json:
                        _print(reports[-1], len(settings) > 1)
        finally:
            side.close()
            if script is not None:
                script.close()
    if args.json:
        print(json.dumps({"device": args.device, "rounds": args.rounds,
                          "candidates": args.candidates, "redis": bool(args.redis),
                          "script_torch_threads": script_threads,
                          "load_average": os.getloadavg(),
                          "reports": [r.model_dump() for r in reports]}))


def _print(r: LoopsReport, labelled: bool) -> None:
    def share(side: Side) -> str:
        model = statistics.median(side.model_s) if side.model_s else float("nan")
        return "" if model != model else f", model calls {model:.1f}s ({model / side.median:.0%})"

    spread = ", ".join(f"{w:.1f}" for w in r.genloop.wall_s)
    label = f" [{r.setting.label}]" if labelled else ""
    ours = f"genloop {r.genloop.median:.1f}s{share(r.genloop)} [{spread}]"
    if r.script.wall_s:
        print(f"{r.loops:3d} loop(s){label}: script {r.script.median:.1f}s{share(r.script)}; "
              f"{ours}; ratio {r.ratio:.2f}x")
    else:  # --no-script
        print(f"{r.loops:3d} loop(s){label}: {ours}")
    if r.batch_sizes:
        gen = statistics.median([s for s, c in r.batch_sizes.items() for _ in range(c)])
        engine = statistics.median(r.genloop.engine_s)
        images = sum(s * c for s, c in r.batch_sizes.items()) / len(r.genloop.wall_s)
        print(f"           engine busy {engine / r.genloop.median:.0%} of the wall, "
              f"{1000 * engine / images:.0f} ms per image; batch sizes {r.batch_sizes} "
              f"(median {gen:g}); score batch images {r.score_batch_images}")
    if r.genloop.cpu_s:
        roles = {k: statistics.median(c.get(k, 0.0) for c in r.genloop.cpu_s)
                 for k in ("engine", "scorer", "torch pool", "orchestration", "engine waited")}
        total = sum(v for k, v in roles.items() if k != "engine waited")
        print("           CPU " + ", ".join(f"{k} {v:.1f}s" for k, v in roles.items()
                                            if k != "engine waited")
              + f" (orchestration {roles['orchestration'] / total:.0%} of the process's CPU); "
              f"the engine's thread waited {roles['engine waited']:.1f}s for a core")


if __name__ == "__main__":
    main()
