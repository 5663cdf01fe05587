"""Formats drawn at their own shape by the engine (falling back to a crop where drawing fails),
brand colours scored inside each loop, and each pick decoded once."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from genloop.campaign import finish, parse_spec, run
from genloop.campaign.brand import subject_compliance
from genloop.campaign.manifest import VariantRecord
from genloop.campaign.reframe import generation_size
from genloop.campaign.runlog import RunLog
from genloop.campaign.spec import FormatSpec
from genloop.evaluators import evaluator
from genloop.evaluators.palette import palette_compliance, parse_colour
from genloop.sdk import Client, ScoredCandidate
from genloop.sdk.errors import Permanent

SPEC = {
    "name": "drawn",
    "axes": {"product": ["a red sneaker", "a blue ball"]},
    "template": "{product} on grass",
    "copy": {"axis": "product", "headlines": {"a red sneaker": "Run far.",
                                              "a blue ball": "Play on."}},
    "formats": [{"name": "1:1", "width": 64, "height": 64},
                {"name": "9:16", "width": 54, "height": 96}],
    "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 2, "steps": 2},
    "generate_formats": {"size": "format", "candidates": 2},
}
# Colours the tiny model's (noise) images hold some of.
PALETTE = ["#a86f7e", "#b04a6f"]


@pytest.fixture
def local(tmp_path, resources):
    with Client.local(home=tmp_path / "home", threads=4, resources=resources) as client:
        yield client


def decoded(client: Client, key: str) -> Image.Image:
    return Image.open(io.BytesIO(client.read_artifact(key))).convert("RGB")


def test_formats_are_drawn_at_their_own_size_and_a_rerun_draws_nothing(tmp_path, local):
    spec = parse_spec(SPEC)
    seen = []
    manifest = run(spec, local, out=tmp_path / "out", progress=seen.append)
    assert manifest.counts() == {"succeeded": 2}
    # The progress bar goes on while the formats are drawn.
    assert [(p.phase, p.done, p.total) for p in seen if p.done == 2] == [
        ("variants", 2, 2), ("formats", 2, 2)]
    # Each variant: 2 loop images + 2 formats x 2 candidates, all counted.
    assert manifest.spent_images == 2 * (2 + 2 * 2)
    for v in manifest.variants:
        for name, size, drawn_at in (("1:1", (64, 64), (64, 64)), ("9:16", (54, 96), (56, 96))):
            out = v.formats[name]
            assert out.method == "generate" and out.source != v.artifact and out.note is None
            assert decoded(local, out.source).size == drawn_at  # drawn there, not scaled up
            assert Image.open(tmp_path / "out/drawn" / out.file).size == size
    runs = RunLog(tmp_path / "out/drawn/format_runs.jsonl").current()
    assert len(runs) == 2
    artifacts = sorted(p for p in (tmp_path / "home/artifacts").rglob("*") if p.is_file())
    again = run(spec, local, out=tmp_path / "out")
    assert sorted(p for p in (tmp_path / "home/artifacts").rglob("*") if p.is_file()) \
        == artifacts
    assert RunLog(tmp_path / "out/drawn/format_runs.jsonl").current() == runs
    assert [v.formats for v in again.variants] == [v.formats for v in manifest.variants]


@evaluator("campaign-test-squares-only", needs_text=False)
def squares_only(images, text):
    if any(im.width != im.height for im in images):
        raise Permanent("only square pictures are judged here")
    return [1.0] * len(images)


def test_a_format_that_cannot_be_drawn_is_cropped_from_the_pick_and_says_why(tmp_path, local):
    spec = parse_spec(dict(SPEC, loop=dict(SPEC["loop"], evaluator="campaign-test-squares-only")))
    manifest = run(spec, local, out=tmp_path / "out")
    assert manifest.counts() == {"succeeded": 2}
    for v in manifest.variants:
        assert v.formats["1:1"].method == "generate"
        tall = v.formats["9:16"]
        assert tall.method in ("crop", "pad") and tall.source == v.artifact
        assert "only square pictures are judged here" in tall.note
        assert Image.open(tmp_path / "out/drawn" / tall.file).size == (54, 96)
    html = (tmp_path / "out/drawn/report.html").read_text()
    assert html.count("not drawn: only square pictures are judged here") == 2


def test_the_budget_counts_the_formats_drawn():
    with pytest.raises(Exception, match=r"budget.images: 5 is less than one variant costs "
                       r"\(1 rounds x 2 candidates \+ 2 formats x 2 drawn = 6\)"):
        parse_spec(dict(SPEC, budget={"images": 5}))


@pytest.mark.parametrize("fmt", [(1080, 1350), (1080, 1920), (1200, 628), (100, 100)])
def test_drawing_at_the_loops_area_keeps_the_formats_aspect(fmt):
    pick = ScoredCandidate(index=0, prompt="p", seed=0, model="tiny", artifact="a", width=512,
                           height=512, steps=1, score=0, evaluator="e")
    target = FormatSpec(name="f", width=fmt[0], height=fmt[1])
    width, height = generation_size(target, pick, "loop")
    assert width % 8 == 0 and height % 8 == 0
    assert abs(width * height / 512**2 - 1) < 0.05
    assert abs((width / height) / target.aspect - 1) < 0.03
    assert generation_size(target, pick, "format") == (round(fmt[0] / 8) * 8,
                                                        round(fmt[1] / 8) * 8)


def test_a_brand_weight_puts_the_brand_colours_into_each_loops_score(tmp_path, local,
                                                                     resources):
    spec = parse_spec(dict(SPEC, generate_formats=None, brand={"palette": PALETTE,
                                                               "weight": 40}))
    manifest = run(spec, local, out=tmp_path / "out")
    clip = resources.evaluator("clip")
    palette = [parse_colour(c) for c in PALETTE]
    for v in manifest.variants:
        scored = local.get(v.run_id).result().scored
        assert {c.evaluator for c in scored} == {"composite"}
        for c in scored:  # the loop's own scores: prompt match + 40 points x compliance
            image = decoded(local, c.artifact)
            expected = clip.score([image], v.prompt).values[0] + 40 * palette_compliance(
                image, palette)
            assert c.score == pytest.approx(expected, abs=1e-3)
        assert v.artifact == max(scored, key=lambda c: c.score).artifact
        assert v.brand_compliance == pytest.approx(
            subject_compliance(decoded(local, v.artifact), palette).share, abs=1e-4)


def test_a_brand_weight_needs_the_loops_evaluator_named():
    with pytest.raises(Exception, match="loop.evaluator: name it when brand.weight > 0"):
        parse_spec(dict(SPEC, loop=dict(SPEC["loop"], evaluator=None),
                        brand={"palette": PALETTE, "weight": 10}))


def test_a_pick_is_read_once_for_its_brand_and_all_its_formats(tmp_path, local):
    spec = parse_spec(dict(SPEC, generate_formats=None, brand={"palette": PALETTE}))
    manifest = run(spec, local, out=tmp_path / "out")
    first = manifest.variants[0]
    reads = []

    def read(key: str) -> bytes:
        reads.append(key)
        return local.read_artifact(key)

    record = VariantRecord(key=first.key, values=first.values, prompt=first.prompt,
                           headline=first.headline, artifact=first.artifact)
    source = finish.Source(read, first.artifact)
    folder = tmp_path / "again"
    finish.mark_brand(spec, record, source, None)
    finish.render_formats(spec, record, folder, source, None)
    assert reads == [first.artifact] and set(record.formats) == {"1:1", "9:16"}
    # Collected again from an earlier record of the same image: nothing is read at all.
    reads.clear()
    finish.mark_brand(spec, record, finish.Source(read, first.artifact), record)
    finish.render_formats(spec, record, folder, finish.Source(read, first.artifact), record)
    assert reads == []


def test_status_counts_the_format_runs_beside_the_loop_runs(tmp_path, local, capsys):
    from genloop.workers.cli.main import main

    # Given a campaign whose two variants each had a loop run and a format run
    run(parse_spec(SPEC), local, out=tmp_path / "out")
    capsys.readouterr()
    # When its status is asked for
    code = main(["campaign", "status", "drawn", "--local", str(tmp_path / "home"),
                 "--threads", "0", "--out", str(tmp_path / "out")])
    # Then both kinds of run are counted (the format runs used to be left out)
    assert code == 0
    assert capsys.readouterr().out.strip() == (
        "drawn: 2 variants; loop runs: 2 submitted, 2 succeeded; "
        "format runs: 2 submitted, 2 succeeded")
