"""What an operator's pipeline folder says about itself, read from its JSON files alone.

A folder saved with diffusers' ``save_pretrained`` holds ``model_index.json`` (the pipeline's
class and its components) and one subfolder per component. Reading those files, without
importing torch or diffusers, tells a worker at start what would otherwise fail at the first
request (a missing folder or component) and tells the gateway, which costs specs without
torch, the size a model draws when a request gives none.

The native size is the pipeline's own default: its denoiser's ``sample_size`` (latent pixels)
times the VAE's scale factor, ``2 ** (len(block_out_channels) - 1)``, as diffusers' pipelines
compute it. Flux's transformer config has no sample size; ``FluxPipeline`` draws 128 latent
pixels a side, so a folder whose denoiser says none is taken to do the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Component subfolders that hold the denoising network, in the order pipelines name them.
DENOISERS = ("unet", "transformer", "prior")
#: Latent pixels a side when the denoiser's config gives none (``FluxPipeline``'s default).
UNSTATED_SAMPLE_SIZE = 128


class FolderProblem(Exception):
    """A pipeline folder cannot be served: ``str()`` says why for the operator (with the
    path); :attr:`public` says it without the path, for a tenant."""

    def __init__(self, message: str, public: str) -> None:
        super().__init__(message)
        self.public = public


@dataclass(frozen=True)
class PipelineFolder:
    """A pipeline folder's index, read and checked."""

    path: Path
    index: dict[str, Any]

    @property
    def class_name(self) -> str | None:
        """The pipeline class ``save_pretrained`` wrote, if any."""
        return self.index.get("_class_name")

    def components(self) -> list[str]:
        """Subfolders the index names (those whose entry is not null)."""
        return [name for name, value in self.index.items()
                if not name.startswith("_") and isinstance(value, list) and value[0] is not None]

    def native_size(self) -> tuple[int, int]:
        """(width, height) the pipeline draws when a call gives none."""
        denoiser = next((d for d in DENOISERS if d in self.components()), None)
        if denoiser is None or "vae" not in self.components():
            raise FolderProblem(
                f"{self.path}: no denoiser ({', '.join(DENOISERS)}) and vae to read the "
                "native size from; set width and height",
                "its native size cannot be read; the operator must set width and height")
        sample = self._config(denoiser).get("sample_size") or UNSTATED_SAMPLE_SIZE
        blocks = self._config("vae").get("block_out_channels") or []
        scale = 2 ** (len(blocks) - 1) if blocks else 8
        height, width = (sample, sample) if isinstance(sample, int) else sample
        return width * scale, height * scale

    def _config(self, component: str) -> dict[str, Any]:
        return _read_json(self.path / component / "config.json", f"component {component!r}")


def read_folder(path: str | Path) -> PipelineFolder:
    """The folder at ``path``, checked: it exists, has an index, and every component the
    index names has a non-empty subfolder. Raises :class:`FolderProblem` naming each missing
    subfolder at once."""
    folder = Path(path)
    if not folder.is_dir():
        raise FolderProblem(f"{folder}: no such folder", "its configured folder does not exist")
    index = _read_json(folder / "model_index.json", "the pipeline index")
    found = PipelineFolder(folder, index)
    missing = [c for c in found.components()
               if not (folder / c).is_dir() or not any((folder / c).iterdir())]
    if missing:
        names = ", ".join(repr(c) for c in missing)
        raise FolderProblem(f"{folder}: component subfolder {names} missing or empty",
                            f"component subfolder {names} of its folder is missing")
    return found


def _read_json(file: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(file.read_text())
    except FileNotFoundError:
        raise FolderProblem(f"{file}: {what} is missing (not a diffusers pipeline folder?)",
                            f"{what} is missing from its folder") from None
    except (OSError, ValueError) as exc:
        raise FolderProblem(f"{file}: {what} cannot be read: {exc}",
                            f"{what} in its folder cannot be read") from exc
    if not isinstance(value, dict):
        raise FolderProblem(f"{file}: {what} is not a JSON object",
                            f"{what} in its folder is not a JSON object")
    return value
