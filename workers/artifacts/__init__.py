"""Artifact stores: where generated images live."""

import os
from urllib import parse as _parse

from genloop.sdk.errors import GenloopError

from .base import ArtifactStore, artifact_key
from .local import LocalArtifactStore


def open_artifact_store(uri: str) -> ArtifactStore:
    """``file:///shared/dir`` (or a plain path) or ``s3://bucket/prefix``.

    For S3-compatible servers other than AWS, set ``AWS_ENDPOINT_URL`` (boto3 reads it).
    """
    parsed = _parse.urlparse(uri)
    if parsed.scheme in ("", "file"):
        return LocalArtifactStore(parsed.path if parsed.scheme else uri)
    if parsed.scheme == "s3":
        from .s3 import S3ArtifactStore

        return S3ArtifactStore(parsed.netloc, parsed.path,
                               endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
    raise GenloopError(f"unsupported artifact store {uri!r}: use file:///dir or s3://bucket/prefix")


__all__ = ["ArtifactStore", "LocalArtifactStore", "artifact_key", "open_artifact_store"]
