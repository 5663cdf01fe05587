"""Artifact stores: where generated images live."""

from .base import ArtifactStore, artifact_key
from .local import LocalArtifactStore

__all__ = ["ArtifactStore", "LocalArtifactStore", "artifact_key"]
