"""docs/own-models.md stays true: its configs are valid, and its models.toml section shows
every field an entry has."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from genloop.workers.models.models_config import ModelEntry, ModelsConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "own-models.md"


def blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.S)


def test_every_config_in_the_doc_is_valid():
    configs = [ModelsConfig.model_validate(tomllib.loads(block)) for block in blocks()]
    assert {"house-sdxl", "house-flux"} <= set(configs[0].models)
    assert {"house-clip", "pick", "house-style"} <= set(configs[1].evaluators)


def test_the_examples_and_the_table_show_every_field():
    shown = set(re.findall(r"^(\w+) =", blocks()[0], flags=re.M))
    first_cells = re.findall(r"^\| ((?:`\w+`,? ?)+)\|", DOC.read_text(), flags=re.M)
    tabled = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    # every field in the examples (a load test's simulated model aside) and in the table
    assert set(ModelEntry.model_fields) - {"simulated"} <= shown
    assert set(ModelEntry.model_fields) <= tabled
    assert "memory_budget_gib" in shown


def test_the_readmes_config_is_valid():
    readme = DOC.parents[1] / "README.md"
    (block,) = re.findall(r"```toml\n(.*?)```", readme.read_text(), flags=re.S)
    config = ModelsConfig.model_validate(tomllib.loads(block))
    assert set(config.models) == {"house-sdxl", "house-flux"}
    assert set(config.evaluators) == {"house-clip"}
