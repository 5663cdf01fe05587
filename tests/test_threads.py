"""A worker process's torch threads fit its cores (genloop.workers.threads)."""

from __future__ import annotations

import pytest

from genloop.workers.threads import MODEL_THREADS, fit_torch_threads, torch_threads


@pytest.fixture
def torch_default():
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_the_model_threads_together_never_ask_for_more_cores_than_there_are():
    for cores in range(MODEL_THREADS, 65):
        assert 1 <= MODEL_THREADS * torch_threads(cores) <= cores
    assert torch_threads(1) == 1 and torch_threads(16) == 8


def test_resources_fit_torch_threads_when_models_are_first_used(monkeypatch, torch_default):
    from genloop.workers.resources import Resources

    torch_default.set_num_threads(3)
    monkeypatch.setenv("GENLOOP_TORCH_THREADS", "")
    res = Resources(device="cpu")
    assert torch_default.get_num_threads() == 3  # nothing happens before a model is needed

    res.models  # noqa: B018  (first use)

    assert res.torch_threads == torch_threads() == torch_default.get_num_threads()


def test_an_explicit_setting_wins_and_zero_leaves_torch_alone(monkeypatch, torch_default):
    monkeypatch.setenv("GENLOOP_TORCH_THREADS", "1")
    assert fit_torch_threads() == 1 == torch_default.get_num_threads()
    assert fit_torch_threads(2) == 2 == torch_default.get_num_threads()
    monkeypatch.setenv("GENLOOP_TORCH_THREADS", "0")
    torch_default.set_num_threads(3)
    assert fit_torch_threads() is None and torch_default.get_num_threads() == 3
    with pytest.raises(ValueError):
        fit_torch_threads(-1)
