"""Running a campaign: one loop per variant, submitted so that nothing is ever paid for twice.

Before anything is submitted, every name the spec uses is checked against the back end
(:mod:`.names`). Each variant's loop is submitted with an idempotency key derived from the loop's
content, and its run id is logged in ``runs.jsonl`` (:mod:`.runlog`) as soon as it exists.
Running the same spec again therefore finds every run it already has: finished ones are only
collected (their images are stored), runs a crash left unfinished are resumed (stored results are
reused), and only variants that never started are submitted. The budget is applied before
anything is submitted, in variant order, so a re-run makes the same choice. One variant's failure
is recorded with its error and never stops the others; ``retry_failed`` gives failed variants a
fresh run (a new idempotency key per attempt), the failure kept in the variant's history.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from genloop.sdk import Client, Loop, Run, RunResult, RunStatus, ScoredCandidate

from . import finish, reframe
from .keys import LOOP_KEYED, key_fields
from .manifest import Manifest, VariantRecord, read_manifest, write_atomic, write_manifest
from .names import check_names
from .notice import notify_end
from .report import write_report
from .reviews import read_reviews
from .runlog import RunLog
from .spec import CampaignSpec, CampaignSpecError

#: Seconds between two status sweeps over the unfinished runs, growing to POLL_MAX while
#: nothing finishes.
POLL, POLL_MAX = 0.2, 1.0
#: A sweep stops after this many runs still going; every FULL_SWEEP seconds it looks at all.
WINDOW, FULL_SWEEP = 16, 5.0


@dataclass(frozen=True)
class Progress:
    """Where a campaign stands, for progress bars."""

    total: int
    done: int
    failed: int
    skipped: int
    images: int
    elapsed: float
    phase: str = "variants"  # then "formats", while formats are drawn (generate_formats)

    @property
    def eta(self) -> float | None:
        finished = self.done + self.failed
        remaining = self.total - self.skipped - finished
        if not finished or remaining <= 0:
            return None if remaining > 0 else 0.0
        return self.elapsed / finished * remaining


def loop_key(loop: Loop) -> str:
    """The idempotency key of a variant's loop: a hash of everything that decides its images.
    Its labels, webhook and lane do not, nor fields added to Loop later while left at their
    defaults (so keys made before they existed stay the same). Nor does ``reuse``, which
    campaigns turn on: it changes how far an image is drawn from its own noise, not which
    variant it is, and a campaign stored before it existed keeps its keys and its reviews (the
    images' own result keys do tell reuse apart)."""
    fields = key_fields(loop, LOOP_KEYED)
    fields.pop("reuse", None)
    canonical = json.dumps(fields, sort_keys=True)
    return "campaign:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def campaign_folder(spec: CampaignSpec, out: str | Path = "out/campaigns") -> Path:
    return Path(out) / spec.name


def plan(spec: CampaignSpec) -> list[VariantRecord]:
    """Every variant, with those past the budget marked ``skipped``."""
    per_images = spec.images_per_variant
    per_steps = per_images * spec.loop.steps if spec.loop.steps else None
    records, images, steps = [], 0, 0
    for values in spec.variants():
        loop = spec.loop_for(values)
        record = VariantRecord(key=loop_key(loop)[9:25], values=values, prompt=loop.prompt,
                               headline=spec.headline(values))
        over = (spec.budget.images is not None and images + per_images > spec.budget.images) or (
            spec.budget.steps is not None and per_steps is not None
            and steps + per_steps > spec.budget.steps)
        if over:
            record.status = "skipped"
            planned = f"{images} images" + (f" ({steps} steps)" if spec.budget.steps else "")
            record.error = (f"over budget: {planned} already planned, and this variant may "
                            f"cost {per_images} more")
        else:
            images += per_images
            steps += per_steps or 0
        records.append(record)
    return records


#: The log of the variants' loop runs, in the campaign folder.
RUNS_FILE = "runs.jsonl"


def submit(spec: CampaignSpec, client: Client, records: list[VariantRecord], folder: Path,
           retry_failed: bool = False,
           previous: dict[str, VariantRecord] | None = None) -> dict[str, Run]:
    """Start (or find, or resume) the run of every planned variant; log run ids as they come.

    With ``retry_failed`` a variant whose run failed or was cancelled (or that ``previous``, the
    last manifest's records, marked failed) gets a fresh run."""
    log = RunLog(folder / RUNS_FILE)
    previous = previous or {}
    runs: dict[str, Run] = {}
    for record in records:
        if record.status == "skipped":
            continue
        run_id = log.run_id(record.key)
        run = client.get(run_id) if run_id is not None else _submit(spec, client, record, log)
        # A run found by its key may be an earlier failure whose log line was lost: loop on.
        while retry_failed and _ended_badly(run, previous.get(record.key)):
            old = previous.get(record.key)
            error = old.error if old is not None and old.run_id == run.id else run.info.error
            log.record(record.key, run.id, status=run.info.status.value, error=error)
            run = _submit(spec, client, record, log)
        if run.id == run_id and not run.info.status.terminal:
            run = client.resume(run_id)  # a crash may have left it with nobody driving it
        record.run_id = run.id
        record.history = log.history(record.key)
        runs[record.key] = run
    return runs


def _submit(spec: CampaignSpec, client: Client, record: VariantRecord, log: RunLog) -> Run:
    """The variant's run for its next attempt: each attempt has its own idempotency key."""
    loop = spec.loop_for(record.values)
    attempt = log.attempts(record.key)
    run = client.submit(loop, idempotency_key=loop_key(loop) + (f":retry{attempt}"
                                                                 if attempt else ""))
    if log.run_id(record.key) != run.id:
        log.record(record.key, run.id)
    return run


def _ended_badly(run: Run, previous: VariantRecord | None) -> bool:
    if run.info.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        return True
    # A run can succeed with nothing scored (every candidate failed); its manifest said failed.
    return (run.info.status.terminal and previous is not None and previous.run_id == run.id
            and previous.status == "failed")


def wait_all(records: list[VariantRecord], runs: dict[str, Run],
             progress: Callable[[Progress], None] | None = None,
             timeout: float | None = None, phase: str = "variants") -> dict[str, RunResult]:
    """Wait until every run ends; returns their results by variant key.

    Runs are served about in the order they were submitted, so a sweep asks for the status of
    the oldest unfinished runs only until ``WINDOW`` of them are still going, and all of them
    every ``FULL_SWEEP`` s: asking for a thousand statuses five times a second would take the
    workers' CPU and the store's time from the runs themselves.
    """
    start = last_full = time.monotonic()
    pending = dict(runs)
    results: dict[str, RunResult] = {}
    skipped = sum(r.status == "skipped" for r in records)
    images, delay = 0, POLL
    while True:
        full, going, finished = time.monotonic() - last_full >= FULL_SWEEP, 0, False
        last_full = time.monotonic() if full else last_full
        for key, run in list(pending.items()):
            # A run found finished when it was looked up (a re-run) needs no second look.
            if not (run.info.status.terminal or run.status().status.terminal):
                going += 1
                if going >= WINDOW and not full:
                    break
                continue
            results[key] = run.result()
            images += generated(results[key])[0]
            del pending[key]
            finished = True
        if progress is not None:
            failed = sum(r.status != "succeeded" for r in results.values())
            progress(Progress(total=len(records), done=len(results) - failed, failed=failed,
                              skipped=skipped, images=images,
                              elapsed=time.monotonic() - start, phase=phase))
        if not pending:
            return results
        if timeout is not None and time.monotonic() - start > timeout:
            raise TimeoutError(f"{len(pending)} variants still running after {timeout:g} s")
        delay = POLL if finished else min(delay * 1.5, POLL_MAX)
        time.sleep(delay)


def generated(result: RunResult) -> tuple[int, int]:
    """Images and denoising steps a run's generate nodes produced."""
    items = [item for out in result.outputs.values() if out.op == "generate"
             for item in out.items]
    return len(items), sum(int(steps) for item in items if isinstance(item, dict)
                           and isinstance(steps := item.get("steps", 0), int | float))


def record_result(record: VariantRecord, result: RunResult) -> None:
    """The run's status, spend and error on the record (its pick is made by the caller)."""
    record.status = result.status.value
    record.images, record.steps = generated(result)
    record.error = None
    if result.best is None:
        record.error = result.error or "; ".join(
            f"{f.node_id}: {f.message}" for f in result.failures[:3]) or "no image was scored"
        if record.status == "succeeded":
            record.status = "failed"


def _draw_formats(spec: CampaignSpec, client: Client, records: list[VariantRecord],
                  picks: dict[str, ScoredCandidate], folder: Path, start: bool,
                  progress: Callable[[Progress], None] | None,
                  timeout: float | None) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Each picked variant's formats drawn at their own shape (see :mod:`.reframe`), with the
    images and steps they cost added to its record."""
    if spec.generate_formats is None:
        return {}
    runs = reframe.submit(spec, client, records, picks, folder, start=start)
    drawing = [r for r in records if r.key in runs]
    results = wait_all(drawing, {key: run for key, (run, _) in runs.items()}, progress, timeout,
                       phase="formats")
    drawn = {}
    by_key = {r.key: r for r in records}
    for key, result in results.items():
        drawn[key] = reframe.generated_formats(spec, runs[key][1], result)
        images, steps = generated(result)
        by_key[key].images += images
        by_key[key].steps += steps
    return drawn


def new_manifest(spec: CampaignSpec, records: list[VariantRecord]) -> Manifest:
    manifest = Manifest(
        name=spec.name, axes=spec.axes, formats=[f.name for f in spec.formats],
        budget_images=spec.budget.images, budget_steps=spec.budget.steps,
        spent_images=sum(r.images for r in records), spent_steps=sum(r.steps for r in records),
        variants=records,
    )
    if spec.brand is not None:
        manifest.brand_palette = spec.brand.palette
        manifest.brand_min_compliance = spec.brand.min_compliance
        manifest.brand_max_distance = spec.brand.max_distance
    return manifest


def run(spec: CampaignSpec, client: Client, *, out: str | Path = "out/campaigns",
        progress: Callable[[Progress], None] | None = None,
        timeout: float | None = None, retry_failed: bool = False) -> Manifest:
    """Run (or finish, or just collect) every variant of ``spec``; write the campaign folder.

    Raises :class:`~.spec.CampaignSpecError`, having submitted nothing, when the spec names a
    model, evaluator or refiner the back end does not serve. ``retry_failed``: variants whose
    run failed get a fresh one (their earlier runs stay in ``VariantRecord.history``). A spec's
    ``webhook`` is told of the end once the folder is written (:mod:`.notice`)."""
    check_names(spec, client)
    if spec.webhook is not None and not client.backend.delivers_webhooks:
        raise CampaignSpecError(["webhook: webhooks are delivered by a gateway (genloop "
                                 "serve): run the campaign through one, or leave it out"])
    folder = campaign_folder(spec, out)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "spec.json", spec.model_dump_json(indent=2, by_alias=True))
    previous = read_manifest(folder)
    records = plan(spec)
    runs = submit(spec, client, records, folder, retry_failed,
                  {v.key: v for v in previous.variants} if previous else None)
    manifest = _collect(spec, client, records, runs, folder, previous, progress, timeout)
    notify_end(spec, client, manifest)
    return manifest


def report(spec: CampaignSpec, client: Client, *, out: str | Path = "out/campaigns",
           progress: Callable[[Progress], None] | None = None,
           timeout: float | None = None) -> Manifest:
    """Rebuild the campaign folder from the runs already recorded; submits nothing."""
    folder = campaign_folder(spec, out)
    log = RunLog(folder / RUNS_FILE)
    records = plan(spec)
    runs = {}
    for record in records:
        run_id = log.run_id(record.key)
        if run_id is not None:
            record.run_id, record.history = run_id, log.history(record.key)
            runs[record.key] = client.get(run_id)
    return _collect(spec, client, records, runs, folder, read_manifest(folder), progress,
                    timeout, start=False)


def _collect(spec: CampaignSpec, client: Client, records: list[VariantRecord],
             runs: dict[str, Run], folder: Path, previous_manifest: Manifest | None,
             progress: Callable[[Progress], None] | None, timeout: float | None,
             start: bool = True) -> Manifest:
    previous = {v.key: v for v in previous_manifest.variants} if previous_manifest else {}
    began = time.monotonic()
    results = wait_all(records, runs, progress, timeout)
    picks: dict[str, ScoredCandidate] = {}
    for record in records:
        if record.key not in results:
            continue
        record_result(record, results[record.key])
        best = results[record.key].best  # brand colours, if weighted, are in its score
        if best is not None:
            picks[record.key] = best
            record.seed, record.round, record.score = best.seed, best.round, best.score
            record.artifact = best.artifact
    drawn = _draw_formats(spec, client, records, picks, folder, start, progress,
                          None if timeout is None else timeout - (time.monotonic() - began))
    for record in records:
        if record.key not in picks:
            continue
        source = finish.Source(client.read_artifact, record.artifact)  # type: ignore[arg-type]
        made, errors = drawn.get(record.key, ({}, {}))
        try:
            finish.mark_brand(spec, record, source, previous.get(record.key))
            finish.render_formats(spec, record, folder, source, previous.get(record.key),
                                  made, errors)
        except OSError as exc:  # an unreadable image fails this variant, never the campaign
            record.status, record.error = "failed", f"could not make its formats: {exc}"
    finish.mark_finalists(spec, records, picks)
    reviews = read_reviews(folder)
    for record in records:
        record.review = reviews.get(record.key)
    manifest = new_manifest(spec, records)
    manifest.sheets = finish.contact_sheets(
        manifest, spec, folder, client.read_artifact,
        previous_manifest.sheets if previous_manifest else {})
    write_manifest(manifest, folder)
    write_report(manifest, folder)
    return manifest
