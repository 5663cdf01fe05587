"""An operator's transformers CLIP folder named in the models config: a judge a tenant names
without giving (or seeing) its path, scoring as ``hf-clip`` does with that path."""

from __future__ import annotations

from genloop.evaluators import EvaluatorRegistry
from genloop.evaluators.config import judge_problems, register_judges
from genloop.evaluators.registry import register_builtins
from genloop.workers.models.models_config import ModelsConfig


def test_an_hf_clip_folder_is_a_judge_that_needs_no_path(tmp_path, hf_clip_dir, images):
    # Given the folder named once, by the operator
    config = tmp_path / "models.toml"
    config.write_text(f'[evaluators.pick]\nkind = "hf_clip"\npath = "{hf_clip_dir}"\n')
    judges = ModelsConfig.load(config).evaluators
    registry = register_builtins(EvaluatorRegistry())
    register_judges(registry, judges)
    # Then it needs nothing from a spec (hf-clip needs the path), starts clean, and scores
    # exactly as hf-clip given the path
    assert (registry.needs("pick"), registry.needs("hf-clip")) == ([], ["path"])
    assert judge_problems(registry, judges) == []
    ours = registry.get("pick", "cpu").score(images, "a red circle")
    theirs = registry.get("hf-clip", "cpu", path=str(hf_clip_dir)).score(images, "a red circle")
    assert ours.values == theirs.values
