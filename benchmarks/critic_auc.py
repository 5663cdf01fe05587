"""Can a judge tell a checker-correct shapes image from a wrong one, at full steps and as a
draft? And does a seed's draft rank like the same seed drawn at full steps?

    python benchmarks/critic_auc.py [--prompts 60] [--seeds 8] [--draft-steps 4]
        [--judges shapes-clip,shapes-critic,shapes-vqa,shapes-reader] [--heldout-pairs] [--json]
        [--ensemble FILE] [--dump FILE]

For ``loop_quality``'s held-out prompt set (two objects, held-out colour-shape pairs, small
objects off the centre), ``--seeds`` images each at full steps and the same seeds as drafts at
``--draft-steps`` come from the shipped ``shapes`` model through ``Client.local``. The pixel
checker grades every image. ``--heldout-pairs`` takes held-out colour-shape pairs only
instead (half one object, set ``novel``; half two objects, set ``novel-two``). ``--dump`` writes
one JSON line per image (its checker verdict per clause, each judge's score and clause scores),
for diagnosing a judge after the run. ``--ensemble`` adds an ``ensemble`` judge with the
options ``python -m genloop.shapes.training.fit_ensemble --out FILE`` wrote. Per judge
(``--judges``; by default ``shapes-clip``, ``shapes-critic``, ``shapes-vqa``, ``shapes-reader``):

- mean within-prompt AUC: over prompts with both correct and wrong images, the chance that a
  correct image outscores a wrong one (ties count half); what selecting among one prompt's
  candidates depends on. The checker grades; no judge is optimised against it. Overall and per
  prompt set;
- pooled AUC: the same over every image of every prompt at once; what a fixed ``Loop.target``
  depends on, since one threshold stops the loops of every prompt;
- draft AUC: the same among the drafts, each graded itself (the ``draft`` refiner keeps a
  draft's composition when it finishes it, so this is the selection it makes);
- same-seed agreement: mean within-prompt Spearman correlation of draft and full-step scores of
  each seed, and how often the best draft's seed is the best at full steps. Low agreement is
  why the ``draft`` refiner finishes a draft from its own image rather than redrawing its seed.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

from PIL import Image
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).parent))

from loop_quality import benchmark_prompts  # noqa: E402

from genloop import shapes  # noqa: E402
from genloop.sdk import Client, Graph  # noqa: E402

JUDGES = ("shapes-clip", "shapes-critic", "shapes-vqa", "shapes-reader")


class JudgeReport(BaseModel):
    judge: str
    auc: float
    prompts_with_both: int
    auc_by_set: dict[str, float]
    pooled_auc: float
    draft_auc: float
    draft_spearman: float
    draft_top1_agreement: float


def auc(positive: list[float], negative: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    for r, i in enumerate(order):
        ranks[i] = float(r)
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 0.0


def mean_auc(scores: list[list[float]], correct: list[list[bool]]) -> tuple[float, int]:
    """Mean within-prompt AUC over prompts that have both correct and wrong images."""
    aucs = []
    for s, ok in zip(scores, correct, strict=True):
        pos = [v for v, c in zip(s, ok, strict=True) if c]
        neg = [v for v, c in zip(s, ok, strict=True) if not c]
        if pos and neg:
            aucs.append(auc(pos, neg))
    return (sum(aucs) / len(aucs) if aucs else float("nan")), len(aucs)


def _scores(result, node: str) -> list[float]:
    return [c.score for c in sorted(result.items(node), key=lambda c: c.index)]


def heldout_pair_prompts(n: int) -> list[tuple[str, str]]:
    """``n`` prompts with a held-out colour-shape pair: half one object, half two."""
    one, two = shapes.novel_prompts(n - n // 2, objects=1, start=1000), shapes.novel_prompts(
        n // 2, objects=2, start=1000)
    return [("novel", s.caption()) for s in one] + [("novel-two", s.caption()) for s in two]


def measure(client: Client, prompts: list[tuple[str, str]], seeds: int, steps: int,
            draft_steps: int, judges: tuple[str, ...] = JUDGES,
            dump: list[dict] | None = None,
            options: dict[str, dict] | None = None) -> list[JudgeReport]:
    """Every judge's report; per-image rows are appended to ``dump`` when given; ``options``
    are those of the judges that take some (an ``ensemble``'s weights)."""
    runs = []
    for _, p in prompts:
        g = Graph()
        fin = g.generate(p, n=seeds, model=shapes.PIPELINE_NAME, steps=steps, id="final")
        dra = g.generate(p, n=seeds, model=shapes.PIPELINE_NAME, steps=draft_steps, id="draft")
        for judge in judges:
            given = (options or {}).get(judge)
            g.score(fin, text=p, evaluator=judge, options=given, id=f"final/{judge}")
            g.score(dra, text=p, evaluator=judge, options=given, id=f"draft/{judge}")
        runs.append(client.submit(g))
    correct: list[list[bool]] = []
    draft_correct: list[list[bool]] = []
    finals: dict[str, list[list[float]]] = {j: [] for j in judges}
    drafts: dict[str, list[list[float]]] = {j: [] for j in judges}
    for (kind, p), run in zip(prompts, runs, strict=True):
        result = run.wait(timeout=3600)
        correct.append(_verdicts(client, result, "final", p))
        draft_correct.append(_verdicts(client, result, "draft", p))
        for j in judges:
            finals[j].append(_scores(result, f"final/{j}"))
            drafts[j].append(_scores(result, f"draft/{j}"))
        if dump is not None:
            dump += [{"set": kind, **r} for r in _rows(client, result, p, judges)]
    sets = sorted({name for name, _ in prompts})
    reports = []
    for j in judges:
        value, both = mean_auc(finals[j], correct)
        draft_value, _ = mean_auc(drafts[j], draft_correct)
        by_set = {}
        for name in sets:
            rows = [i for i, (n, _) in enumerate(prompts) if n == name]
            by_set[name] = mean_auc([finals[j][i] for i in rows], [correct[i] for i in rows])[0]
        pooled = auc(*_pooled(finals[j], correct))
        rho = [spearman(d, f) for d, f in zip(drafts[j], finals[j], strict=True)]
        top1 = [max(range(len(d)), key=d.__getitem__) == max(range(len(f)), key=f.__getitem__)
                for d, f in zip(drafts[j], finals[j], strict=True)]
        reports.append(JudgeReport(
            judge=j, auc=value, prompts_with_both=both, auc_by_set=by_set, pooled_auc=pooled,
            draft_auc=draft_value, draft_spearman=sum(rho) / len(rho),
            draft_top1_agreement=sum(top1) / len(top1),
        ))
    return reports


def _pooled(scores: list[list[float]],
            correct: list[list[bool]]) -> tuple[list[float], list[float]]:
    """Every correct image's score and every wrong one's, over all prompts."""
    pairs = [(v, c) for s, ok in zip(scores, correct, strict=True)
             for v, c in zip(s, ok, strict=True)]
    return [v for v, c in pairs if c], [v for v, c in pairs if not c]


def _rows(client: Client, result, prompt: str, judges: tuple[str, ...]) -> list[dict]:
    """One row per image of both nodes: the checker's clauses, each judge's score and
    clause scores."""
    wanted = shapes.parse_caption(prompt)
    rows = []
    for node in ("final", "draft"):
        scored = {j: {c.index: c for c in result.items(f"{node}/{j}")} for j in judges}
        for c in sorted(result.items(node), key=lambda c: c.index):
            image = Image.open(io.BytesIO(client.read_artifact(c.artifact)))
            clauses = shapes.grade(wanted, image, shapes.world_of(c.width)).clauses()
            mine = {j: scored[j][c.index] for j in judges}
            rows.append({"prompt": prompt, "node": node, "index": c.index,
                         "correct": all(clauses.values()), "clauses": clauses,
                         "scores": {j: s.score for j, s in mine.items()},
                         "details": {j: {k.clause: k.score for k in s.details.clauses}
                                     for j, s in mine.items() if s.details is not None}})
    return rows


def _verdicts(client: Client, result, node: str, prompt: str) -> list[bool]:
    wanted = shapes.parse_caption(prompt)
    images = sorted(result.items(node), key=lambda c: c.index)
    return [shapes.grade(wanted, Image.open(io.BytesIO(client.read_artifact(c.artifact))),
                         shapes.world_of(c.width)).all_correct for c in images]


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--prompts", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=shapes.DEFAULT_STEPS)
    parser.add_argument("--draft-steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--judges", default=",".join(JUDGES))
    parser.add_argument("--heldout-pairs", action="store_true",
                        help="prompts with held-out colour-shape pairs only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ensemble", type=Path, default=None,
                        help="also judge by an ensemble with these options (fit_ensemble --out)")
    parser.add_argument("--dump", type=Path, default=None,
                        help="write one JSON line per image here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    judges = tuple(args.judges.split(","))
    options = {}
    if args.ensemble is not None:
        judges += ("ensemble",)
        options["ensemble"] = json.loads(args.ensemble.read_text())
    prompts = (heldout_pair_prompts if args.heldout_pairs else benchmark_prompts)(args.prompts)
    with tempfile.TemporaryDirectory() as home, \
            Client.local(home=Path(home), threads=2) as client:
        rows: list[dict] | None = [] if args.dump else None
        reports = measure(client, prompts, args.seeds, args.steps, args.draft_steps, judges,
                          rows, options)
    if args.dump is not None and rows is not None:
        args.dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.json:
        print(json.dumps({"prompts": args.prompts, "seeds": args.seeds,
                          "draft_steps": args.draft_steps,
                          "judges": [r.model_dump() for r in reports]}))
        return
    for r in reports:
        sets = " ".join(f"{k}={v:.3f}" for k, v in r.auc_by_set.items())
        print(f"{r.judge:14s} AUC={r.auc:.3f} ({sets}; prompts with both: "
              f"{r.prompts_with_both}) pooled AUC={r.pooled_auc:.3f} draft AUC={r.draft_auc:.3f} "
              f"same-seed draft/full spearman={r.draft_spearman:.3f} "
              f"top-1 agreement={r.draft_top1_agreement:.3f}")


if __name__ == "__main__":
    main()
