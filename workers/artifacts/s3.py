"""Artifacts in S3-compatible object storage (AWS S3, MinIO, Ceph, moto in tests), via boto3.

An object is written once under its content key, so there is nothing to lock: two workers
writing the same image write the same bytes. boto3's own retry policy handles throttling and
dropped connections (standard mode, a few attempts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from genloop.sdk.errors import NotFound, StoreError

from .base import ARTIFACT_KEY, ArtifactStore, StoredArtifact, check_key, content_type


class S3ArtifactStore(ArtifactStore):
    """``s3://bucket/prefix``; ``endpoint_url`` for non-AWS servers."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 client=None) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = client or boto3.client(
            "s3", endpoint_url=endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 5}),
        )
        self._errors = self._client.exceptions

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def get(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except self._errors.NoSuchKey:
            raise NotFound(f"no artifact {key!r}") from None
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"s3 get {key!r}: {exc}") from exc

    def exists(self, key: str) -> bool:
        name = self._key(key)
        return self._present("head", key, lambda: self._client.head_object(
            Bucket=self.bucket, Key=name))

    def _present(self, what: str, key: str, call: Callable[[], object]) -> bool:
        """Make ``call`` on ``key``'s object: True if it went, False if there is no such
        object; any other failure is a ``StoreError``."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            call()
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise StoreError(f"s3 {what} {key!r}: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"s3 {what} {key!r}: {exc}") from exc

    def _write(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type(key),
            )
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"s3 put {key!r}: {exc}") from exc

    def _touch(self, key: str) -> bool:
        """A copy onto itself: S3 has no other way to renew an object's LastModified."""
        name = self._key(key)
        return self._present("copy", key, lambda: self._client.copy_object(
            Bucket=self.bucket, Key=name, CopySource={"Bucket": self.bucket, "Key": name},
            MetadataDirective="REPLACE", ContentType=content_type(key)))

    def stored(self) -> Iterator[StoredArtifact]:
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = f"{self.prefix}/" if self.prefix else ""
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(prefix):]
                    if ARTIFACT_KEY.match(key):
                        yield StoredArtifact(key, obj["Size"], obj["LastModified"].timestamp())
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"s3 list: {exc}") from exc

    def delete_if_older(self, key: str, cutoff: float) -> bool:
        name, head = self._key(key), {}
        if not self._present("head", key, lambda: head.update(self._client.head_object(
                Bucket=self.bucket, Key=name))) or head["LastModified"].timestamp() >= cutoff:
            return False
        return self._present("delete", key, lambda: self._client.delete_object(
            Bucket=self.bucket, Key=name))
