"""Content identity: the same bytes give the same fingerprint anywhere; changed bytes do not."""

from __future__ import annotations

import os

import pytest

from genloop.sdk import Permanent
from genloop.workers.models import fingerprint as fp


def _tree(root, files):
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_copies_in_different_places_with_different_mtimes_agree(tmp_path):
    files = {"model_index.json": b"{}", "unet/weights.bin": b"\x00" * 4096}
    a, b = _tree(tmp_path / "a", files), _tree(tmp_path / "checkout2" / "b", files)
    os.utime(b / "unet" / "weights.bin", (1, 1))

    assert fp.fingerprint(a) == fp.fingerprint(b)


def test_a_changed_file_or_a_renamed_file_changes_it(tmp_path):
    root = _tree(tmp_path / "m", {"w.bin": b"abc", "cfg.json": b"{}"})
    before = fp.fingerprint(root)

    (root / "w.bin").write_bytes(b"abd")
    changed = fp.fingerprint(root)
    (root / "w.bin").rename(root / "v.bin")

    assert len({before, changed, fp.fingerprint(root)}) == 3


def test_patterns_select_files_and_a_single_file_works(tmp_path):
    root = _tree(tmp_path / "m", {"w.safetensors": b"abc", "notes.txt": b"x"})
    only = fp.fingerprint(root, patterns=("*.safetensors",))
    (root / "notes.txt").write_bytes(b"y")

    assert fp.fingerprint(root, patterns=("*.safetensors",)) == only
    assert fp.fingerprint(root / "w.safetensors") == only  # a file enters under its own name


def test_unchanged_files_are_hashed_once(tmp_path, monkeypatch):
    root = _tree(tmp_path / "m", {"w.bin": b"abc"})
    fp.fingerprint(root)
    opened = []
    real_open = type(root).open

    def spy(self, mode="r", *args, **kwargs):
        if mode == "rb":
            opened.append(self)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(type(root), "open", spy)

    fp.fingerprint(root)
    (root / "w.bin").write_bytes(b"abcd")
    fp.fingerprint(root)

    assert opened == [root / "w.bin"]  # only the rewritten file was read again


def test_missing_weights_are_permanent(tmp_path):
    with pytest.raises(Permanent, match="not found"):
        fp.fingerprint(tmp_path / "nope")
