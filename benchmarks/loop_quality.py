"""Does a genloop Loop find better images than best-of-N, at the same denoising-step budget?

    python benchmarks/loop_quality.py [--prompts 100] [--rounds 3] [--candidates 8]
        [--modes default,best-of-n,best-of-n-critic,best-of-n-drafts,target,target-drafts,draft,
                 critic-edit,seed-search,agent,best-of-n-vqa,best-of-n-drafts-vqa,target-vqa,
                 target-drafts-vqa,best-of-n-reader,best-of-n-drafts-reader,target-reader,
                 target-drafts-reader,best-of-n-drafts-ensemble,target-drafts-ensemble]
        [--draft-candidates N] [--target 50] [--ensemble FILE]
        [--prompt-set benchmark|calibration] [--json]

On held-out shapes prompts weighted to the hard ones (:func:`benchmark_prompts`: 60% two objects
with a relation, 20% one object of a colour-shape pair held out of training, 20% one small
object off the centre), with the shipped ``shapes`` generator at ``--steps``, every mode gets
the same budget of ``rounds x candidates x steps`` denoising steps:

- ``default``: ``Loop(prompt=..., model="shapes")`` and nothing else, which runs the model's
  recipe (``shapes.RECIPE``, its own budget: 480 steps, the default budget here);
- ``best-of-n``: one round of ``rounds x candidates`` images, the best by ``shapes-clip`` kept;
- ``best-of-n-critic``: the same images judged by ``shapes-critic`` (the clause critic);
- ``best-of-n-drafts``: one round of as many images at the draft refiner's draft steps as the
  budget buys, judged by ``shapes-critic``: what a user who simply lowered the steps would get;
- ``seed-search`` / ``draft`` / ``critic-edit``: Loops with that refiner and ``Loop.budget``
  set to the same budget (the critic refiners judge with ``shapes-critic``); ``draft`` and
  ``best-of-n-drafts`` draw ``--draft-candidates`` drafts when given (fewer steps than the
  budget: what fewer, cheaper candidates cost in quality and save in wall time), else as many
  as the budget buys;
- ``agent``: ``Loop(refiner="agent")`` judged by ``shapes-critic``, each refine answered by a
  :class:`ScriptedAgent` through ``run.refine`` with :func:`weakest_clause_policy`;
- ``target`` / ``target-drafts``: ``seed-search`` Loops of ``candidates`` images a round at
  ``--steps`` / at the draft steps, judged by ``shapes-critic`` with ``Loop.target`` at
  ``--target``, and as many rounds as the budget buys: the loop stops at the first round whose
  best image the critic finds likely right (its score is the chance, x100, that every clause
  holds), so hard prompts get more rounds and easy ones fewer;
- ``best-of-n-vqa`` / ``best-of-n-drafts-vqa`` / ``target-vqa`` / ``target-drafts-vqa``: those
  modes judged by ``shapes-vqa`` (per-clause questions to a model trained on the checker's
  verdicts) instead; its score is on the critic's scale, so ``--target`` means the same;
- ``...-reader``: the same four judged by ``shapes-reader`` (a model of the checker's reading,
  scoring the chance that it matches every clause), on the same scale;
- ``best-of-n-drafts-ensemble`` / ``target-drafts-ensemble``: judged by an ``ensemble`` whose
  options (``--ensemble FILE``) ``python -m genloop.shapes.training.fit_ensemble`` fitted, on
  the same scale.

The kept image of each prompt is graded by the pixel checker (``shapes.grade``, in the world of
the image's size), which no mode optimises: the all-correct rate with a 95% bootstrap interval
over prompts, per prompt set too, the paired difference against ``best-of-n`` (bootstrap over
prompts, same resamples), the steps each mode actually spent and its wall time. For ``draft``,
how often a finished image's verdict is its draft's (the method works as far as it is). Each
wrong kept image is counted under why (``misses``): no image the mode drew was right, with its
budget spent or after stopping on a wrong one at its target, or one was right and the judge
kept another. Each mode runs in a home of its own, so none reuses another's stored images.

``--prompt-set calibration`` draws as many prompts of the same mix from further on in the same
held-out streams, with other seeds: a setting (a recipe's target, say) is chosen there and
the benchmark's prompts then test it, so no figure quoted for it is the one it was chosen on.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image
from pydantic import BaseModel

from genloop import shapes
from genloop.sdk import Client, GenerationRequest, Loop, RefineRequest, Run, RunResult
from genloop.sdk.backend import TERMINAL_EVENTS
from genloop.sdk.ops import MAX_CANDIDATES_PER_NODE
from genloop.workers.metrics.prometheus import metrics

BASELINE = "best-of-n"
MODES = ("default", "best-of-n", "best-of-n-critic", "best-of-n-drafts", "target", "target-drafts",
         "draft", "critic-edit", "seed-search", "agent", "best-of-n-vqa",
         "best-of-n-drafts-vqa", "target-vqa", "target-drafts-vqa", "best-of-n-reader",
         "best-of-n-drafts-reader", "target-reader", "target-drafts-reader",
         "best-of-n-drafts-ensemble", "target-drafts-ensemble")
#: The judge a mode with one of these suffixes uses in place of the critic (or of shapes-clip
#: in best-of-n).
JUDGE_SUFFIXES = {"-vqa": "shapes-vqa", "-reader": "shapes-reader", "-ensemble": "ensemble"}
#: ``--target``'s default: stop once the critic finds an image more likely right than wrong.
CRITIC_TARGET = 50.0
#: Where ``--prompt-set calibration`` starts in each held-out stream: past what any ``--prompts``
#: up to 1,000 reads (the small set reads 20 x as far).
CALIBRATION_START = 20_000


class ModeReport(BaseModel):
    mode: str
    evaluator: str
    all_correct: float
    ci95: tuple[float, float]
    #: all-correct rate per prompt set (see :func:`benchmark_prompts`)
    by_set: dict[str, float]
    diff_vs_best_of_n: float | None = None
    diff_ci95: tuple[float, float] | None = None
    steps_per_prompt: float
    images_per_prompt: float
    wall_s: float
    #: ``draft``: finished images whose checker verdict is their draft's, and how many
    draft_agreement: tuple[float, int] | None = None
    #: per prompt, whether the kept image was all-correct (for paired comparisons)
    correct: list[bool]
    #: messages the sweeper re-sent during the mode, by reason (none is expected: nothing fails)
    resends: dict[str, int] = {}
    #: prompts whose kept image is wrong, by why (every image the mode drew graded):
    #: ``none_right``, no image it drew was right, with its budget spent or not
    #: (``..._spent`` / ``..._stopped``: it stopped on a wrong image its judge scored at target);
    #: ``right_not_kept``, one was right and the judge kept another
    misses: dict[str, int] = {}


def benchmark_prompts(n: int, calibration: bool = False) -> list[tuple[str, str]]:
    """``n`` held-out ``(set, caption)`` pairs: 60% ``two`` (two objects and a relation), 20%
    ``novel`` (one object of a held-out colour-shape pair), 20% ``small`` (one small object off
    the centre). ``calibration``: as many others, drawn from the same sets further on, for
    choosing a recipe's settings on prompts the benchmark's figures never see."""
    n_two, n_novel = round(0.6 * n), round(0.2 * n)
    start = CALIBRATION_START if calibration else 0
    small = [a for a in shapes.heldout_prompts(20 * n, start=start)
             if a.size == "small" and a.position != "centre"]
    sets = {"two": shapes.heldout_prompts(n_two, start=start, objects=2),
            "novel": shapes.novel_prompts(n_novel, objects=1, start=1000 + start),
            "small": small[:n - n_two - n_novel]}
    return [(name, scene.caption()) for name, scenes in sets.items() for scene in scenes]


def loop_for(mode: str, prompt: str, rounds: int, candidates: int, steps: int,
             draft_candidates: int | None = None, target: float = CRITIC_TARGET,
             seed: int = 0) -> Loop:
    budget = rounds * candidates * steps
    suffix = next((k for k in JUDGE_SUFFIXES if mode.endswith(k)), "")
    judge = JUDGE_SUFFIXES.get(suffix, "shapes-critic")
    mode = mode.removesuffix(suffix)
    if mode == "default":  # what a user gets who names nothing: the back end's recipe
        return Loop(prompt=prompt, seed=seed, model=shapes.PIPELINE_NAME)
    common = dict(prompt=prompt, seed=seed, model=shapes.PIPELINE_NAME, steps=steps)
    draft_steps = Loop(prompt=prompt, steps=steps, refiner="draft").draft_steps
    assert draft_steps is not None
    if mode.startswith("target"):
        each = draft_steps if mode == "target-drafts" else steps
        # seed-search asks for `candidates` a round, so these rounds are the budget exactly
        return Loop(rounds=budget // (candidates * each), candidates=candidates,
                    evaluator=judge, target=target, **{**common, "steps": each})
    if mode == "best-of-n-drafts":
        n = draft_candidates or min(budget // draft_steps, MAX_CANDIDATES_PER_NODE)
        return Loop(rounds=1, candidates=n, evaluator=judge,
                    **{**common, "steps": draft_steps})
    if mode.startswith("best-of-n"):
        evaluator = judge if mode == "best-of-n-critic" or suffix else (
            shapes.CLIP_MODEL_NAME)
        return Loop(rounds=1, candidates=rounds * candidates, evaluator=evaluator, **common)
    evaluator = shapes.CLIP_MODEL_NAME if mode == "seed-search" else "shapes-critic"
    if mode == "agent":  # the scripted agent answers; the timeout only guards a stuck benchmark
        common.update(refine_timeout=3000.0)
    if mode == "draft" and draft_candidates is not None:
        common.update(draft_candidates=draft_candidates)
    return Loop(rounds=rounds, candidates=candidates, refiner=mode, evaluator=evaluator,
                budget=budget, **common)


def weakest_clause_policy(request: RefineRequest) -> list[GenerationRequest]:
    """A scripted agent's answer, from what any agent sees: the critic's weakest clause of the
    best image so far, repeated at the end of the prompt ("..., gray background, triangle"),
    over fresh seeds. Chosen from benchmarks/refine_study.py: on the shipped model
    an img2img edit of a wrong image is right less often than a fresh seed, and nearly every
    miss is a wrong shape, which emphasis in the prompt helps draw."""
    best = min(request.scored, key=lambda c: (-c.score, c.round, c.index))
    tried = {c.seed for c in request.scored}
    rng = random.Random(f"{request.prompt}:{request.round}")
    prompt, reason = request.prompt, "fresh seed (no critique)"
    if best.details is not None and best.details.weakest is not None:
        weak = next(c for c in best.details.clauses if c.clause == best.details.weakest)
        prompt = f"{request.prompt}, {weak.text}"
        reason = (f"fresh seed, {weak.clause} {weak.text!r} emphasised: the critic's weakest "
                  f"clause of seed {best.seed} ({weak.score:.0f}/100)")
    answer = []
    while len(answer) < request.candidates:
        seed = rng.randrange(2**31)
        if seed not in tried:
            tried.add(seed)
            answer.append(GenerationRequest(prompt=prompt, seed=seed, round=request.round + 1,
                                            reason=reason))
    return answer


class ScriptedAgent:
    """An agent outside genloop, scripted: it follows the runs it is given and answers each
    ``refine.requested`` with ``policy(request)`` through ``run.refine``. It sees what a real
    agent would (the :class:`RefineRequest`: scores, critiques, artifact keys), never the
    checker. One thread polls every run, as an agent serving many loops would."""

    def __init__(self, policy: Callable[[RefineRequest], list[GenerationRequest]],
                 poll: float = 0.2) -> None:
        self.policy, self.poll = policy, poll
        self.answered = 0
        self._runs: dict[str, tuple[Run, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="scripted-agent", daemon=True)

    def watch(self, run: Run) -> None:
        with self._lock:
            self._runs[run.id] = (run, 0)

    def __enter__(self) -> ScriptedAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _serve(self) -> None:
        while not self._stop.wait(self.poll):
            with self._lock:
                watched = list(self._runs.values())
            for run, after in watched:
                ended = False
                for event in run.events(after, follow=False):
                    after = event.id
                    if event.type == "refine.requested" and event.message:
                        request = RefineRequest.model_validate_json(event.message)
                        run.refine(self.policy(request), node_id=request.node_id)
                        self.answered += 1
                    ended = ended or event.type in TERMINAL_EVENTS
                with self._lock:
                    if ended:
                        del self._runs[run.id]
                    else:
                        self._runs[run.id] = (run, after)


def _all_correct(client: Client, artifact: str, prompt: str) -> bool:
    image = Image.open(io.BytesIO(client.read_artifact(artifact)))
    return shapes.grade(shapes.parse_caption(prompt), image,
                        shapes.world_of(image.width)).all_correct


def run_mode(client: Client, mode: str, prompts: list[tuple[str, str]], rounds: int,
             candidates: int, steps: int, draft_candidates: int | None = None,
             target: float = CRITIC_TARGET, ensemble: dict | None = None,
             seed: int = 0) -> ModeReport:
    began, resent = time.monotonic(), _resends()
    loops = [loop_for(mode, p, rounds, candidates, steps, draft_candidates, target, seed)
             for _, p in prompts]
    if mode.endswith("-ensemble"):
        loops = [loop.model_copy(update={"evaluator_options": ensemble}) for loop in loops]
    with ScriptedAgent(weakest_clause_policy) as agent:
        runs = [client.submit(loop) for loop in loops]
        for run in runs if mode == "agent" else ():
            agent.watch(run)
        results = [run.wait(timeout=3600) for run in runs]
    wall = time.monotonic() - began
    recipes = client.schema().served.recipes
    report = _report(client, mode, [loop.with_recipe(recipes.get(loop.model or ""))
                                     for loop in loops], prompts, results, wall)
    report.resends = {k: n - resent[k] for k, n in _resends().items() if n > resent[k]}
    return report


def _resends() -> dict[str, int]:
    """This process's sweeper re-sends so far, by reason (``genloop_sweeper_resends_total``)."""
    registry = metrics().registry
    return {reason: int(registry.get_sample_value("genloop_sweeper_resends_total",
                                                  {"reason": reason}) or 0)
            for reason in ("outbox", "lease_ended", "message_lost")}


def _report(client: Client, mode: str, loops: list[Loop], prompts: list[tuple[str, str]],
            results: list[RunResult], wall: float) -> ModeReport:
    correct, spent, images = [], 0, 0
    agree: list[bool] = []
    misses: dict[str, int] = {}
    for (_, prompt), result, loop in zip(prompts, results, loops, strict=True):
        if result.best is None:
            raise RuntimeError(f"run {result.run_id} for {prompt!r} has no best: {result.error}")
        correct.append(_all_correct(client, result.best.artifact, prompt))
        if not correct[-1]:
            why = _miss(client, result, prompt, loop)
            misses[why] = misses.get(why, 0) + 1
        spent += result.compute.steps
        images += result.compute.images
        if mode == "draft":
            agree += _draft_agreement(client, result, prompt)
    by_set: dict[str, list[bool]] = {}
    for (name, _), ok in zip(prompts, correct, strict=True):
        by_set.setdefault(name, []).append(ok)
    return ModeReport(mode=mode, evaluator=loops[0].evaluator or "(recipe)",
                      all_correct=sum(correct) / len(correct), ci95=bootstrap(correct),
                      by_set={k: sum(v) / len(v) for k, v in by_set.items()},
                      steps_per_prompt=spent / len(prompts),
                      images_per_prompt=images / len(prompts), wall_s=wall,
                      draft_agreement=(sum(agree) / len(agree), len(agree)) if agree else None,
                      correct=correct, misses=misses)


def _miss(client: Client, result: RunResult, prompt: str, loop: Loop) -> str:
    """Why a run kept a wrong image (see :attr:`ModeReport.misses`)."""
    if any(_all_correct(client, c.artifact, prompt) for c in result.scored):
        return "right_not_kept"
    budget = loop.budget if loop.budget is not None else loop.rounds * loop.candidates * (
        loop.steps or 0)
    stopped = loop.target is not None and result.compute.steps < budget
    return "none_right_stopped" if stopped else "none_right_spent"


def _draft_agreement(client: Client, result: RunResult, prompt: str) -> list[bool]:
    """Per finished image of a draft run: is its checker verdict its draft's?"""
    drafts = {c.seed: c for c in result.scored if c.strength is None}
    return [_all_correct(client, c.artifact, prompt)
            == _all_correct(client, drafts[c.seed].artifact, prompt)
            for c in result.scored if c.strength is not None and c.seed in drafts]


def bootstrap(values: list[bool], base: list[bool] | None = None, samples: int = 10000,
              seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean (of ``values - base`` when paired), over prompts."""
    rng = random.Random(seed)
    n = len(values)
    diffs = [v - (base[i] if base is not None else 0) for i, v in enumerate(values)]
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    return means[int(0.025 * samples)], means[int(0.975 * samples) - 1]


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--steps", type=int, default=shapes.DEFAULT_STEPS)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--draft-candidates", type=int, default=None,
                        help="drafts of draft and best-of-n-drafts (default: what the budget "
                        "buys)")
    parser.add_argument("--target", type=float, default=CRITIC_TARGET,
                        help="the critic score at which target and target-drafts stop")
    parser.add_argument("--ensemble", type=Path, default=None,
                        help="the ...-ensemble modes' options, as fit_ensemble --out writes them")
    parser.add_argument("--prompt-set", choices=("benchmark", "calibration"),
                        default="benchmark", help="calibration: other prompts and seeds, for "
                        "choosing settings that the benchmark's figures then test")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--workers", type=int, default=2, help="worker threads")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    if any(m.endswith("-ensemble") for m in modes) and args.ensemble is None:
        parser.error("the -ensemble modes need --ensemble FILE (python -m "
                     "genloop.shapes.training.fit_ensemble --out FILE)")
    ensemble = json.loads(args.ensemble.read_text()) if args.ensemble else None
    calibration = args.prompt_set == "calibration"
    prompts = benchmark_prompts(args.prompts, calibration)
    reports: list[ModeReport] = []
    with tempfile.TemporaryDirectory() as home:
        for mode in modes:
            with Client.local(home=Path(home) / mode, threads=args.workers) as client:
                report = run_mode(client, mode, prompts, args.rounds, args.candidates,
                                  args.steps, args.draft_candidates, args.target, ensemble,
                                  seed=1 if calibration else 0)
            base = next((r for r in reports if r.mode == BASELINE), None)
            if base is not None:
                report.diff_vs_best_of_n = report.all_correct - base.all_correct
                report.diff_ci95 = bootstrap(report.correct, base.correct)
            reports.append(report)
            # one line per mode as it ends, so a long run shows its progress
            print(_line(report, base), flush=True, file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"prompts": args.prompts, "prompt_set": args.prompt_set,
                          "rounds": args.rounds,
                          "candidates": args.candidates, "steps": args.steps,
                          "draft_candidates": args.draft_candidates, "target": args.target,
                          "modes": [r.model_dump() for r in reports]}))


def _line(r: ModeReport, base: ModeReport | None) -> str:
    diff = ("" if r.diff_ci95 is None else
            f" vs best-of-n {r.diff_vs_best_of_n:+.3f} "
            f"[{r.diff_ci95[0]:+.3f}, {r.diff_ci95[1]:+.3f}]")
    ratio = f" ({r.wall_s / base.wall_s:.2f}x)" if base is not None else ""
    sets = " ".join(f"{k}={v:.2f}" for k, v in r.by_set.items())
    agreement = ("" if r.draft_agreement is None else
                 f" draft/finish verdicts agree {r.draft_agreement[0]:.2f} "
                 f"(n={r.draft_agreement[1]})")
    return (f"{r.mode:17s} {r.evaluator:13s} all-correct={r.all_correct:.3f} "
            f"[{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]{diff} ({sets}) "
            f"steps/prompt={r.steps_per_prompt:.0f} images/prompt={r.images_per_prompt:.1f} "
            f"wall={r.wall_s:.1f}s{ratio}{agreement} "
            f"re-sends={sum(r.resends.values())}{r.resends or ''} misses={r.misses}")

if __name__ == "__main__":
    main()
