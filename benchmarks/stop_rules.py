"""When should a draft loop stop? Stopping rules replayed from loops run to their whole budget.

    python benchmarks/stop_rules.py [--prompts 100] [--calibration-prompts N] [--drafts N]
        [--record-dir DIR] [--json]

A ``seed-search`` loop's rounds do not depend on when it stops: round k+1's seeds come from the
best of rounds 1..k, so a loop run to its whole budget holds, as its first rounds, exactly what
the same loop stopped earlier would have drawn and scored. One recording per prompt set replays
any stopping rule without running it. The recording: the ``shapes`` recipe with no target
(``shapes.RECIPE``: rounds of 8 four-step drafts judged by ``shapes-reader``, 15 rounds) on
``loop_quality``'s calibration prompts and on its benchmark prompts, every draft graded by the
pixel checker, which no rule sees. A rule:

- ``target`` T: stop after the first round whose best score reaches T (``Loop.target``);
- ``rounds`` R: at most R rounds (``Loop.rounds``);
- ``give up`` (K, F): stop after round K while no score has reached F (``Loop.give_up``).

The rule a recipe should use is chosen on the calibration prompts: the best all-correct rate of
the kept image within ``--drafts`` drafts a prompt (default: what the recipe spends there),
fewer drafts breaking ties; more ``--calibration-prompts`` than the benchmark's make that
choice among this many rules less the calibration prompts' own. It is then tested on the
benchmark's prompts beside the recipe's rule (95% bootstrap interval over prompts, and the
paired difference), with the best rule found on the benchmark's prompts themselves shown as
what hindsight would pick (not a claim: it is chosen on the prompts it is measured on).
Drafts a prompt stand in for wall time: the loops here are compute-bound (docs/judges.md).
``--record-dir`` keeps the recordings (JSON, one file a prompt set) and replays them instead of
recording again when they are there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from loop_quality import _all_correct, benchmark_prompts, bootstrap  # noqa: E402

from genloop import shapes  # noqa: E402
from genloop.sdk import Client, Loop, RunResult  # noqa: E402

#: The rules replayed: every combination of these (give-up rounds with each floor, or none).
TARGETS = (50.0, 70.0, 80.0, 90.0, 95.0, 97.0, 99.0)
MAX_ROUNDS = (3, 4, 6, 8, 10, 15)
GIVE_UPS = ((None, None),) + tuple(itertools.product((2, 3, 4, 6), (5.0, 20.0, 50.0)))


@dataclass(frozen=True)
class Draft:
    round: int
    index: int
    score: float
    right: bool


@dataclass(frozen=True)
class Recording:
    """One prompt's loop run to its whole budget, every draft graded."""

    set: str
    prompt: str
    drafts: list[Draft]


@dataclass(frozen=True)
class Rule:
    target: float | None = None
    rounds: int | None = None
    give_up_after: int | None = None
    give_up_below: float = 0.0

    def __str__(self) -> str:
        parts = [f"target {self.target:g}" if self.target is not None else "no target"]
        if self.rounds is not None:
            parts.append(f"{self.rounds} rounds")
        if self.give_up_after is not None:
            parts.append(f"give up after {self.give_up_after} below {self.give_up_below:g}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Outcome:
    rule: Rule
    all_correct: float
    drafts: float
    #: per prompt, whether the kept draft is right (for intervals and paired differences)
    right: list[bool]


#: The recipe's fields that decide when its loop stops: a recording leaves them out.
STOPPING = ("target", "give_up")


def recipe_rule() -> Rule:
    """The rule the shapes recipe stops by."""
    give_up = shapes.RECIPE.get("give_up") or {}
    return Rule(target=shapes.RECIPE.get("target"), rounds=shapes.RECIPE["rounds"],
                give_up_after=give_up.get("rounds"), give_up_below=give_up.get("below", 0.0))


def unstopped_loop(prompt: str, seed: int) -> Loop:
    """The recipe's loop with its stopping rule taken away: it runs every round of its
    budget."""
    recipe = {k: v for k, v in shapes.RECIPE.items() if k not in STOPPING}
    return Loop(prompt=prompt, seed=seed, model=shapes.PIPELINE_NAME, **recipe)


def recording(client: Client, set_name: str, prompt: str, result: RunResult) -> Recording:
    return Recording(set_name, prompt, [
        Draft(c.round, c.index, c.score, _all_correct(client, c.artifact, prompt))
        for c in result.scored])


def record(client: Client, prompts: list[tuple[str, str]], seed: int) -> list[Recording]:
    runs = [client.submit(unstopped_loop(p, seed)) for _, p in prompts]
    results = [run.wait(timeout=7200) for run in runs]
    return [recording(client, name, p, r) for (name, p), r in zip(prompts, results, strict=True)]


def replay(rec: Recording, rule: Rule) -> tuple[Draft, int]:
    """The draft ``rule`` keeps for ``rec``'s prompt, and how many drafts it draws: the loop's
    own choice, the highest score, the earliest among equals."""
    by_round: dict[int, list[Draft]] = {}
    for d in rec.drafts:
        by_round.setdefault(d.round, []).append(d)
    seen: list[Draft] = []
    for n, r in enumerate(sorted(by_round), start=1):
        seen += by_round[r]
        best = min(seen, key=lambda d: (-d.score, d.round, d.index))
        if ((rule.target is not None and best.score >= rule.target)
                or (rule.rounds is not None and n >= rule.rounds)
                or (rule.give_up_after is not None and n >= rule.give_up_after
                    and best.score < rule.give_up_below)):
            break
    return best, len(seen)


def outcome(recordings: list[Recording], rule: Rule) -> Outcome:
    kept = [replay(rec, rule) for rec in recordings]
    right = [d.right for d, _ in kept]
    return Outcome(rule, sum(right) / len(right), sum(n for _, n in kept) / len(kept), right)


def rules() -> list[Rule]:
    return [Rule(t, r, k, f or 0.0) for t, r, (k, f) in itertools.product(TARGETS, MAX_ROUNDS,
                                                                             GIVE_UPS)]


def best_within(recordings: list[Recording], drafts: float) -> Outcome:
    """The rule with the best all-correct rate within ``drafts`` drafts a prompt (fewer drafts
    break ties)."""
    fitting = [o for o in (outcome(recordings, r) for r in rules()) if o.drafts <= drafts]
    return max(fitting, key=lambda o: (o.all_correct, -o.drafts))


def load_or_record(folder: Path | None, name: str, n: int) -> list[Recording]:
    path = folder / f"stop-rules-{name}-{n}.json" if folder is not None else None
    if path is not None and path.exists():
        return [Recording(r["set"], r["prompt"], [Draft(**d) for d in r["drafts"]])
                for r in json.loads(path.read_text())]
    calibration = name == "calibration"
    with tempfile.TemporaryDirectory() as home, Client.local(home=home, threads=2) as client:
        recordings = record(client, benchmark_prompts(n, calibration), seed=int(calibration))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([asdict(r) for r in recordings]))
    return recordings


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--calibration-prompts", type=int, default=None,
                        help="calibration prompts (default: --prompts)")
    parser.add_argument("--drafts", type=float, default=None,
                        help="drafts a prompt a chosen rule may spend on the calibration "
                        "prompts (default: what the recipe's rule spends there)")
    parser.add_argument("--record-dir", type=Path, default=None,
                        help="keep the recordings here, and replay them when they are there")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    calibration = load_or_record(args.record_dir, "calibration",
                                 args.calibration_prompts or args.prompts)
    benchmark = load_or_record(args.record_dir, "benchmark", args.prompts)
    recipe_cal, recipe = outcome(calibration, recipe_rule()), outcome(benchmark, recipe_rule())
    chosen = best_within(calibration, args.drafts or recipe_cal.drafts)
    tested = outcome(benchmark, chosen.rule)
    hindsight = best_within(benchmark, recipe.drafts)
    rows = {"recipe": (recipe_cal, recipe), "chosen on calibration": (chosen, tested),
            "hindsight on benchmark": (outcome(calibration, hindsight.rule), hindsight),
            "whole budget": (outcome(calibration, Rule()), outcome(benchmark, Rule()))}
    oracle = [any(d.right for d in rec.drafts) for rec in benchmark]
    report = {name: {"rule": str(cal.rule), "calibration": [cal.all_correct, cal.drafts],
                     "benchmark": [bench.all_correct, bench.drafts],
                     "ci95": bootstrap(bench.right),
                     "diff_vs_recipe": bench.all_correct - recipe.all_correct,
                     "diff_ci95": bootstrap(bench.right, recipe.right)}
              for name, (cal, bench) in rows.items()}
    if args.json:
        print(json.dumps({"prompts": args.prompts, "calibration_prompts": len(calibration),
                          "rules": len(rules()), "oracle": sum(oracle) / len(oracle),
                          "rows": report}))
        return
    print(f"{len(rules())} rules replayed on {len(calibration)} calibration and {args.prompts} "
          f"benchmark prompts; any right draft in the whole budget (benchmark): "
          f"{sum(oracle) / len(oracle):.2f}")
    for name, (cal, bench) in rows.items():
        lo, hi = bootstrap(bench.right)
        dlo, dhi = bootstrap(bench.right, recipe.right)
        print(f"{name:24s} {cal.rule!s:45s} calibration {cal.all_correct:.2f} at "
              f"{cal.drafts:5.1f} drafts; benchmark {bench.all_correct:.2f} [{lo:.2f}, {hi:.2f}] "
              f"at {bench.drafts:5.1f} drafts, {bench.all_correct - recipe.all_correct:+.2f} "
              f"[{dlo:+.2f}, {dhi:+.2f}] against the recipe")

if __name__ == "__main__":
    main()
