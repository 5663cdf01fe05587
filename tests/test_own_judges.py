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
from genloop.workers.models.models_config import ModelsConfig, ModelsConfigError


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
    from genloop.workers.models.resources import Resources
    from genloop.workers.pool import worker_process

    config = config_file(tmp_path, '[evaluators.wrong]\nkind = "open_clip"\n'
                         f'architecture = "ViT-S-32"\ncheckpoint = "{clip_checkpoint(tmp_path)}"\n')
    resources = Resources(allowed=worker_process.worker_config(str(config), None),
                          evaluators=register_builtins(EvaluatorRegistry()))
    with pytest.raises(ModelsConfigError, match="evaluators.wrong: checkpoint .* ViT-S-32"):
        worker_process.refuse_bad_config(resources)


def test_client_local_refuses_a_judge_that_cannot_load_as_a_worker_does(tmp_path):
    # Given Client.local (it runs workers, and checks what a worker checks) with a wrong
    # checkpoint: each score failed at run time before, and open_clip's AssertionError was
    # retried 4x before that
    tiny = clip_checkpoint(tmp_path)
    config = config_file(tmp_path, '[evaluators.wrong]\nkind = "open_clip"\n'
                         f'architecture = "ViT-S-32"\ncheckpoint = "{tiny}"\n')
    with pytest.raises(ModelsConfigError, match="evaluators.wrong: checkpoint .* ViT-S-32"):
        Client.local(home=tmp_path / "home", threads=1, models=config,
                     evaluators=register_builtins(EvaluatorRegistry()))
    assert not (tmp_path / "home").exists()


def test_a_judge_whose_checkpoint_goes_after_start_fails_once_naming_it_not_its_path(
        tmp_path, caplog):
    from genloop.evaluators.config import register_judges
    from genloop.sdk import Permanent
    from genloop.workers.models.models_config import ModelsConfig

    # Given a judge whose checkpoint a worker checked at start, then removed
    tiny = clip_checkpoint(tmp_path)
    config = ModelsConfig.load(config_file(tmp_path, '[evaluators.gone]\nkind = "open_clip"\n'
                                           f'architecture = "ViT-S-32"\ncheckpoint = "{tiny}"\n'))
    registry = register_builtins(EvaluatorRegistry())
    register_judges(registry, config.evaluators)
    tiny.unlink()
    # When it is built for a device it was not built for, then it fails as Permanent naming
    # the judge (never retried), and only the operator's log has the path
    with caplog.at_level(logging.ERROR, logger="genloop.evaluators.config"):
        with pytest.raises(Permanent) as failed:
            registry.get("gone", device="meta")
    assert "judge 'gone' cannot be loaded" in str(failed.value)
    assert str(tmp_path) not in str(failed.value) and str(tiny) in caplog.text


def test_trusted_codes_clip_on_a_checkpoint_of_another_architecture_is_permanent(tmp_path):
    from genloop.sdk import Permanent

    tiny = clip_checkpoint(tmp_path)
    with pytest.raises(Permanent, match="cannot load open_clip model 'ViT-S-32'"):
        register_builtins(EvaluatorRegistry()).get("clip", "cpu", model="ViT-S-32",
                                                   pretrained=str(tiny))
