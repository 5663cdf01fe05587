"""What the engine does with each denoiser architecture: the capability map.

A pipeline's architecture is read from its denoiser (the ``unet`` or ``transformer``
component's class; a UNet with SDXL's added time embedding is SDXL), so a team's own folder
needs no declaration. Each :class:`Architecture` says which step-cache modes run on it, what
``default`` resolves to, which edit pipelines diffusers derives from it, and which blocks
``torch.compile`` compiles one by one. The step cache (:mod:`..engine.step_cache`) and the compiler
(:mod:`..engine.compile`) read the map; ``docs/own-models.md`` prints it (:func:`capability_table`).

Why each cache choice, measured on diffusers 0.42:

* UNets (SD1.x/2.x, SDXL) run DeepCache (:mod:`..engine.deepcache`); diffusers' transformer
  caches need ``enable_cache``, which ``UNet2DConditionModel`` lacks.
* Flux runs diffusers' First-Block Cache and TaylorSeer through ``enable_cache``.
* SD3's ``SD3Transformer2DModel`` has no ``enable_cache``. TaylorSeer hooks attention modules
  and runs on it through ``apply_taylorseer_cache`` (what ``enable_cache`` calls); First-Block
  Cache does not: SD3's last ``JointTransformerBlock`` returns no text states, and the cache's
  tail residual subtracts them (``TypeError``). So SD3's ``default`` is TaylorSeer.
* Any other transformer with ``enable_cache`` gets First-Block Cache by default, as Flux does;
  anything else runs uncached, and says why once in the log.

Nothing here imports torch: the architecture of a pipeline folder is read from its JSON files
(:func:`folder_architecture`), so a back end refuses a mode a configured model cannot run at
submit (:func:`model_cache_modes`, published as ``Served.cache_modes``), before any load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .model_folder import FolderProblem, read_folder
from .models_config import ModelsConfig

#: ``default`` runs calls of fewer denoising steps than this without DeepCache.
MIN_DEFAULT_DEEPCACHE_STEPS = 8
#: Every cache mode a request may name (``sdk.ops.GenerateParams.cache``), parameters aside.
CACHE_MODES = ("default", "off", "deepcache", "fbcache", "taylorseer")
EDIT_KINDS = ("img2img", "inpaint")


@dataclass(frozen=True)
class Architecture:
    """One row of the capability map."""

    title: str
    #: Denoiser class names that make a pipeline this architecture.
    denoisers: tuple[str, ...]
    #: Step-cache modes that run, besides ``off`` (which always does).
    cache_modes: tuple[str, ...]
    #: What ``default`` resolves to for calls long enough to cache (see :mod:`..engine.step_cache`).
    default_cache: str
    #: Why each mode that does not run does not (mode -> reason).
    cache_refusals: tuple[tuple[str, str], ...] = ()
    #: Edit kinds diffusers derives from the text-to-image pipeline (``from_pipe``).
    edits: tuple[str, ...] = EDIT_KINDS
    #: Block classes compiled one by one beside the denoiser's own ``_repeated_blocks``.
    compile_regions: tuple[str, ...] = ()
    #: Whether requests of one size and settings share a pipeline call.
    batching: bool = True

    def allows(self, mode: str) -> bool:
        """Whether cache ``mode`` (``"fbcache:0.1"`` counts as ``fbcache``) runs here."""
        name = mode.partition(":")[0]
        return name in ("default", "off") or name in self.cache_modes

    def refusal(self, mode: str) -> str:
        """Why ``mode`` does not run here, naming the modes that do."""
        name = mode.partition(":")[0]
        reason = dict(self.cache_refusals).get(name, f"{self.title} has no {name} cache")
        return (f"cache mode {mode!r} cannot run on {self.title}: {reason}; use one of "
                f"{', '.join(('default', 'off', *self.cache_modes))}")


_UNET_REFUSALS = (
    ("fbcache", "diffusers' First-Block Cache needs enable_cache, which UNet2DConditionModel "
                "lacks"),
    ("taylorseer", "diffusers' TaylorSeer needs enable_cache, which UNet2DConditionModel "
                   "lacks"),
)

SD = Architecture(
    "UNet (SD1.x / SD2.x)", ("UNet2DConditionModel",), ("deepcache",), "deepcache",
    _UNET_REFUSALS, compile_regions=("ResnetBlock2D",))
SDXL = Architecture(
    "UNet (SDXL)", ("UNet2DConditionModel",), ("deepcache",), "deepcache",
    _UNET_REFUSALS, compile_regions=("ResnetBlock2D",))
SD3 = Architecture(
    "SD3 (MMDiT)", ("SD3Transformer2DModel",), ("taylorseer",), "taylorseer", (
        ("deepcache", "DeepCache needs a UNet's down/up blocks"),
        ("fbcache", "SD3's last JointTransformerBlock returns no text states, which "
                    "diffusers' First-Block Cache subtracts (TypeError in diffusers 0.42)"),
    ), compile_regions=("JointTransformerBlock",))
FLUX = Architecture(
    "Flux", ("FluxTransformer2DModel",), ("fbcache", "taylorseer"), "fbcache",
    (("deepcache", "DeepCache needs a UNet's down/up blocks"),))
#: A transformer diffusers can cache (``enable_cache``) that the map does not name.
CACHEABLE_TRANSFORMER = Architecture(
    "another transformer", (), ("fbcache", "taylorseer"), "fbcache",
    (("deepcache", "DeepCache needs a UNet's down/up blocks"),), edits=())
OTHER = Architecture(
    "anything else", (), (), "off",
    (("deepcache", "no UNet with down/up blocks"),
     ("fbcache", "no transformer with diffusers' enable_cache"),
     ("taylorseer", "no transformer with diffusers' enable_cache")), edits=())

#: The map, in the order the docs print it.
ARCHITECTURES = (SD, SDXL, SD3, FLUX, CACHEABLE_TRANSFORMER, OTHER)


def architecture_named(denoiser: str | None, sdxl: bool = False,
                       cacheable: bool = False) -> Architecture:
    """The architecture of a pipeline whose denoiser class is ``denoiser`` (``None``: no
    ``unet`` or ``transformer``); ``sdxl``: the UNet takes SDXL's added time embedding;
    ``cacheable``: an unnamed transformer has diffusers' ``enable_cache``."""
    if denoiser == "UNet2DConditionModel":
        return SDXL if sdxl else SD
    for arch in (SD3, FLUX):
        if denoiser in arch.denoisers:
            return arch
    return CACHEABLE_TRANSFORMER if cacheable else OTHER


def denoiser_of(pipe):
    """The pipeline's denoiser: its ``unet`` or ``transformer``, or ``None``."""
    unet = getattr(pipe, "unet", None)
    return unet if unet is not None else getattr(pipe, "transformer", None)


def architecture_of(pipe) -> Architecture:
    """The architecture of a live pipeline (anything with a ``unet`` or ``transformer``)."""
    model = denoiser_of(pipe)
    return OTHER if model is None else denoiser_architecture(model)


def denoiser_architecture(model) -> Architecture:
    """The architecture a denoiser (a ``unet`` or ``transformer``) makes its pipeline."""
    sdxl = getattr(getattr(model, "config", None), "addition_embed_type", None) == "text_time"
    return architecture_named(type(model).__name__, sdxl, hasattr(model, "enable_cache"))


def folder_architecture(path: str | Path) -> Architecture | None:
    """The architecture of a diffusers pipeline folder, from its ``model_index.json`` and
    denoiser config (nothing loaded); ``None`` if ``path`` holds no readable pipeline, or one
    whose denoiser the map does not name (whether that one can be cached is known only once
    it is loaded)."""
    try:
        folder = read_folder(path)
    except FolderProblem:
        return None
    for component in ("unet", "transformer"):
        entry = folder.index.get(component)
        if not (isinstance(entry, list) and len(entry) == 2 and entry[1]):
            continue
        sdxl = component == "unet" and _json(folder.path / "unet" / "config.json").get(
            "addition_embed_type") == "text_time"
        arch = architecture_named(entry[1], sdxl)
        return None if arch is OTHER else arch
    return None


def _json(file: Path) -> dict:
    try:
        value = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def model_cache_modes(config: ModelsConfig | None) -> dict[str, list[str]]:
    """The cache modes each configured model whose folder's architecture is known runs
    (``default`` and ``off`` included): what a spec may ask of it, checked at submit."""
    return {name: ["default", "off", *arch.cache_modes]
            for name, arch in _configured(config).items()}


def cache_problems(config: ModelsConfig | None) -> list[str]:
    """Configured models whose own ``cache`` (what their requests' ``default`` runs) their
    folder's architecture cannot run, one line each: a worker refuses to start on them, since
    every request would fail."""
    if config is None:
        return []
    return [f"models.{name}: {arch.refusal(entry.cache)}"
            for name, arch in _configured(config).items()
            if (entry := config.models[name]).cache and not arch.allows(entry.cache)]


def _configured(config: ModelsConfig | None) -> dict[str, Architecture]:
    """The architecture of each configured model whose folder tells it."""
    if config is None:
        return {}
    found = {name: folder_architecture(entry.folder) for name, entry in config.models.items()
             if entry.folder is not None}
    return {name: arch for name, arch in found.items() if arch is not None}


def capability_table() -> str:
    """The map as a Markdown table (what ``docs/own-models.md`` shows)."""
    rows = ["| architecture | detected by | step cache modes | `default` | edits | batching "
            "| compiled regions |", "|---|---|---|---|---|---|---|"]
    for arch in ARCHITECTURES:
        detected = ", ".join(f"`{d}`" for d in arch.denoisers) or (
            "any other denoiser with `enable_cache`" if arch is CACHEABLE_TRANSFORMER
            else "none of the above")
        if arch is SDXL:
            detected += " with `addition_embed_type = \"text_time\"`"
        modes = ", ".join(f"`{m}`" for m in ("off", *arch.cache_modes))
        default = f"`{arch.default_cache}`" + (
            f" (`off` below {MIN_DEFAULT_DEEPCACHE_STEPS} steps)"
            if arch.default_cache == "deepcache" else "")
        edits = ", ".join(arch.edits) or "where diffusers has a counterpart"
        regions = ", ".join(["`_repeated_blocks`", *(f"`{r}`" for r in arch.compile_regions)])
        rows.append(f"| {arch.title} | {detected} | {modes} | {default} | {edits} | "
                    f"{'yes' if arch.batching else 'no'} | {regions} |")
    return "\n".join(rows)


def refusal_notes() -> str:
    """Why each mode that an architecture does not run is missing, as a Markdown list."""
    return "\n".join(f"- {arch.title}, `{mode}`: {reason}"
                     for arch in ARCHITECTURES for mode, reason in arch.cache_refusals)


def capability_section() -> str:
    """What ``docs/own-models.md`` holds between its capability markers (a test keeps them
    equal, and prints this when they differ)."""
    return (f"{capability_table()}\n\nWhy a mode does not run (diffusers installed here):\n\n"
            f"{refusal_notes()}")
