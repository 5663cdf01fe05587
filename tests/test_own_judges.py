"""An operator's own judges from the models config: an open_clip checkpoint on its
architecture, a transformers CLIP folder, a module that registers one; problems named when a
worker starts, and a judge that cannot load failing once, its name for the tenant and its path
only in the worker's log."""

from __future__ import annotations

import logging
from pathlib import Path

import open_clip
import pytest
import torch

from genloop.evaluators import EvaluatorRegistry
from genloop.evaluators.config import judge_problems
from genloop.evaluators.openclip import register_tiny_config
from genloop.evaluators.registry import register_builtins
from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.models_config import ModelsConfig, ModelsConfigError


def clip_checkpoint(folder: Path, architecture: str = "tiny-clip-v1") -> Path:
    """Random weights of an open_clip architecture, saved as a team saves its fine-tune."""
    register_tiny_config("tiny-clip-v1")
    path = folder / f"{architecture}.pt"
    torch.manual_seed(1)
    torch.save(open_clip.create_model(architecture, pretrained=None).state_dict(), path)
    return path


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def scored(evaluator: str) -> Graph:
    g = Graph()
    g.generate("a red circle", n=2, model="tiny", id="gen")
    g.score("gen", text="a red circle", evaluator=evaluator, id="score", max_retries=3)
    return g


def test_an_open_clip_checkpoint_serves_under_its_name_needing_nothing(tmp_path):
    # Given a config naming the checkpoint relative to itself
    clip_checkpoint(tmp_path)
    config = config_file(tmp_path, '[evaluators.house-clip]\nkind = "open_clip"\n'
                         'architecture = "tiny-clip-v1"\ncheckpoint = "./tiny-clip-v1.pt"\n'
                         'description = "our catalogue CLIP"\n')
    registry = register_builtins(EvaluatorRegistry())
    with Client.local(home=tmp_path / "home", threads=1, models=config,
                      evaluators=registry) as client:
        listed = {j.name: j for j in client.schema().served.evaluators}
        result = client.submit(scored("house-clip")).wait(timeout=120)
    # Then it is listed with its description and nothing a spec must give
    assert (listed["house-clip"].description, listed["house-clip"].needs) == (
        "our catalogue CLIP", [])
    # And it scores with the checkpoint's weights (its identity is the file's content)
    assert result.status == RunStatus.SUCCEEDED, result.failures
    assert registry.get("house-clip", "cpu").identity.startswith("clip:tiny-clip-v1/sha256:")


def test_every_judge_problem_is_named_with_its_path(tmp_path):
    # Given a checkpoint of another architecture, a missing folder, a module that registers
    # nothing under the name, and one that does not exist
    tiny = clip_checkpoint(tmp_path)
    config = ModelsConfig.load(config_file(
        tmp_path, '[evaluators.wrong]\nkind = "open_clip"\narchitecture = "ViT-S-32"\n'
        f'checkpoint = "{tiny}"\n\n[evaluators.gone]\nkind = "hf_clip"\npath = "./nowhere"\n\n'
        '[evaluators.silent]\nkind = "module"\nmodule = "json"\n\n'
        '[evaluators.missing]\nkind = "module"\nmodule = "no_such_judges"\n'))
    registry = register_builtins(EvaluatorRegistry())
    from genloop.evaluators.config import register_judges

    register_judges(registry, config.evaluators)
    problems = "\n".join(judge_problems(registry, config.evaluators))
    # Then each is said, the operator's way: with the path
    assert f"evaluators.wrong: checkpoint {tiny} does not load as ViT-S-32" in problems
    assert f"evaluators.gone: folder {tmp_path / 'nowhere'}" in problems
    assert "evaluators.silent: module 'json' registers no evaluator called 'silent'" in problems
    assert "evaluators.missing: No module named 'no_such_judges'" in problems


def test_a_worker_refuses_to_start_on_a_judge_of_the_wrong_architecture(tmp_path):
    from genloop.workers import worker_process
    from genloop.workers.resources import Resources

    config = config_file(tmp_path, '[evaluators.wrong]\nkind = "open_clip"\n'
                         f'architecture = "ViT-S-32"\ncheckpoint = "{clip_checkpoint(tmp_path)}"\n')
    resources = Resources(allowed=worker_process.worker_config(str(config), None),
                          evaluators=register_builtins(EvaluatorRegistry()))
    with pytest.raises(ModelsConfigError, match="evaluators.wrong: checkpoint .* ViT-S-32"):
        worker_process.refuse_bad_config(resources)


def test_a_judge_that_cannot_load_fails_once_naming_it_not_its_path(tmp_path, caplog):
    # Given Client.local (its start reads files, builds no judge) with a wrong checkpoint
    tiny = clip_checkpoint(tmp_path)
    config = config_file(tmp_path, '[evaluators.wrong]\nkind = "open_clip"\n'
                         f'architecture = "ViT-S-32"\ncheckpoint = "{tiny}"\n')
    with Client.local(home=tmp_path / "home", threads=1, models=config,
                      evaluators=register_builtins(EvaluatorRegistry())) as client:
        with caplog.at_level(logging.ERROR, logger="genloop.evaluators.config"):
            run = client.submit(scored("wrong"))
            result = run.wait(timeout=120)
        retries = [e for e in run.events(follow=False) if e.type == "instance.retry"]
    # Then the score failed at once (the AssertionError of open_clip was retried 4x)
    (failure,) = result.failures
    assert (failure.error_type, failure.attempts, retries) == ("Permanent", 1, [])
    assert "judge 'wrong' cannot be loaded" in failure.message
    assert str(tmp_path) not in failure.message
    assert str(tiny) in caplog.text


def test_trusted_codes_clip_on_a_checkpoint_of_another_architecture_is_permanent(tmp_path):
    from genloop.sdk import Permanent

    tiny = clip_checkpoint(tmp_path)
    with pytest.raises(Permanent, match="cannot load open_clip model 'ViT-S-32'"):
        register_builtins(EvaluatorRegistry()).get("clip", "cpu", model="ViT-S-32",
                                                   pretrained=str(tiny))
