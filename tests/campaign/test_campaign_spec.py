"""Campaign specs: every problem reported at once, naming its field; files in three formats."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from genloop.campaign import CampaignSpecError, load_spec, parse_spec

GOOD = {
    "name": "launch",
    "axes": {"product": ["a red sneaker", "a steel bottle"], "scene": ["on a trail", "in a city"]},
    "template": "{product} {scene}",
    "loop": {"rounds": 2, "candidates": 3, "steps": 4},
}


def test_a_good_spec_expands_to_every_combination():
    spec = parse_spec(GOOD)
    prompts = [spec.prompt(v) for v in spec.variants()]
    assert prompts == ["a red sneaker on a trail", "a red sneaker in a city",
                       "a steel bottle on a trail", "a steel bottle in a city"]
    loop = spec.loop_for(next(spec.variants()))
    assert (loop.rounds, loop.candidates, loop.steps) == (2, 3, 4)


def test_every_problem_is_listed_at_once_with_its_field():
    bad = dict(GOOD, template="{product} {place}", axes={"product": ["x"], "scene": []},
               formats=[{"name": "banner", "width": 1600, "height": 200}],
               brand={"palette": ["#e4002b", "not-a-colour"]},
               budget={"images": 5})
    with pytest.raises(CampaignSpecError) as info:
        parse_spec(bad)
    problems = info.value.problems
    assert any(p.startswith("template: {place} is not an axis") for p in problems)
    assert any(p.startswith("axes.scene: is empty") for p in problems)
    assert any(p.startswith("formats[0] (banner)") and "cropped" in p for p in problems)
    assert any(p.startswith("brand.palette[1]: 'not-a-colour'") for p in problems)
    assert any(p.startswith("budget.images: 5 is less than one variant") for p in problems)
    assert len(problems) == 5


def test_field_type_errors_name_their_path():
    with pytest.raises(CampaignSpecError) as info:
        parse_spec(dict(GOOD, loop={"rounds": 0}, formats=[{"name": "x", "width": 1}]))
    text = str(info.value)
    assert "loop.rounds" in text and "formats.0.width" in text and "formats.0.height" in text


def test_copy_must_cover_every_value_of_its_axis():
    with pytest.raises(CampaignSpecError) as info:
        parse_spec(dict(GOOD, copy={"axis": "product", "headlines": {"a red sneaker": "Run."}}))
    assert info.value.problems == ["copy.headlines: no headline for ['a steel bottle']"]


def test_budget_in_steps_needs_loop_steps():
    with pytest.raises(CampaignSpecError) as info:
        parse_spec(dict(GOOD, loop={"rounds": 1}, budget={"steps": 1000}))
    assert info.value.problems == ["budget.steps: set loop.steps too, so the cost of a variant "
                                   "is known"]


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_specs_load_from_yaml_toml_and_json(tmp_path, suffix):
    import yaml

    path = tmp_path / f"spec{suffix}"
    if suffix == ".yaml":
        path.write_text(yaml.safe_dump(GOOD))
    elif suffix == ".json":
        path.write_text(json.dumps(GOOD))
    else:
        path.write_text('name = "launch"\ntemplate = "{product} {scene}"\n'
                        '[axes]\nproduct = ["a red sneaker", "a steel bottle"]\n'
                        'scene = ["on a trail", "in a city"]\n'
                        '[loop]\nrounds = 2\ncandidates = 3\nsteps = 4\n')
    assert load_spec(path) == parse_spec(GOOD)


def test_the_cli_refuses_a_bad_spec_and_submits_nothing(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: launch\naxes: {product: []}\ntemplate: '{product}'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "genloop.workers.cli.main", "campaign", "run", str(path),
         "--local", str(tmp_path / "home"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "axes.product: is empty" in proc.stderr
    assert not (tmp_path / "home").exists() and not (tmp_path / "out").exists()


def test_a_brand_palette_longer_than_a_gateway_admits_is_refused_before_any_submit():
    from genloop.evaluators.options import MAX_PALETTE

    palette = [f"#{i:06x}" for i in range(MAX_PALETTE + 1)]
    with pytest.raises(CampaignSpecError) as info:
        parse_spec(dict(GOOD, brand={"palette": palette}))
    assert info.value.problems == [f"brand.palette: {MAX_PALETTE + 1} colours; at most "
                                   f"{MAX_PALETTE}"]
    assert parse_spec(dict(GOOD, brand={"palette": palette[:MAX_PALETTE]}))


def test_reuse_is_on_by_default_and_a_bare_yaml_off_turns_it_off(tmp_path):
    assert parse_spec(GOOD).loop_for(next(parse_spec(GOOD).variants())).reuse == "auto"
    path = tmp_path / "spec.yaml"
    text = "name: launch\ntemplate: '{product}'\naxes: {product: [a red sneaker]}\n"
    for written, meant in (("off", "off"), ("no", "off"), ('"off"', "off"), ("on", "auto"),
                           ("auto", "auto")):
        path.write_text(text + f"loop: {{rounds: 1, reuse: {written}}}\n")
        assert load_spec(path).loop.reuse == meant, written
    with pytest.raises(CampaignSpecError, match="loop.reuse"):
        parse_spec(dict(GOOD, loop={"reuse": "sometimes"}))
