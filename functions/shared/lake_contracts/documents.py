"""The documents of the artifacts bucket: the manifest (a CDC batch: the drain writes it, the CDC job applies
it) and the reload request. One model each, for the Lambdas and the Spark jobs alike. A document the drain
reads back that is not exactly one is corrupt (CorruptManifestError, CorruptReloadRequestError, naming why)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from lake_contracts.layout import RUN_ID
from lake_contracts.names import TABLE_NAME
from lake_contracts.times import parse_time


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


MANIFEST_VERSION = 1


@dataclass(frozen=True)
class ManifestFile:
    """One DMS file of a batch. `message`: what the drain noted of the queue message that named it
    (`sequence_number`, `message_id`), written beside the file and read by no one but people."""

    uri: str
    size: int = 0
    message: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "size": self.size, **self.message}

    @classmethod
    def from_dict(cls, entry: dict[str, Any]) -> ManifestFile:
        message = {k: v for k, v in entry.items() if k not in ("uri", "size")}
        return cls(entry["uri"], int(entry.get("size", 0)), message)


@dataclass
class Manifest:
    """A CDC batch: the files one CDC run applies, in the order the queue delivered them."""

    run_id: str
    files: list[ManifestFile] = field(default_factory=list)
    created_at: str = ""
    attempts: int = 1
    waited_for_reload: list[str] = field(default_factory=list)  # tables it was held for, files gone

    def __post_init__(self) -> None:
        self.files = list(self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def uris(self) -> set[str]:
        return {f.uri for f in self.files}

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "attempts": self.attempts,
            "files": [f.to_dict() for f in self.files],
        } | ({"waited_for_reload": self.waited_for_reload} if self.waited_for_reload else {})

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Manifest:
        """A manifest as the CDC job takes it: the drain's, or one written by hand (`run_id` may be left out:
        "manual"); only its version and its files' URIs are required."""
        version = document.get("version", MANIFEST_VERSION)
        if version != MANIFEST_VERSION:
            raise ValueError(f"manifest version {version} is not supported (expected {MANIFEST_VERSION})")
        files = [ManifestFile.from_dict(f) for f in document.get("files", [])]
        return cls(str(document.get("run_id") or "manual"), files)


class CorruptManifestError(ValueError):
    pass


def read_manifest(document: bytes, key: str) -> Manifest:
    """A pending manifest as the drain wrote it (stricter than `Manifest.from_dict`: its run id names its key,
    its sizes are counts); anything else is corrupt."""
    try:
        data = json.loads(document)
        run_id = data["run_id"]
        files = data["files"]
        if data.get("version", 1) != 1 or not isinstance(run_id, str) or not RUN_ID.match(run_id):
            raise ValueError(f"bad version or run_id {run_id!r}")
        if key.rsplit("/", 1)[-1] != f"{run_id}.json":
            raise ValueError(f"run_id {run_id} does not match the key")
        if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("uri"), str) and is_count(f.get("size", 0))
            for f in files
        ):
            raise ValueError("files is not a list of {uri, size (a byte count), …}")
        attempts = data.get("attempts", 1)
        if not is_count(attempts):
            raise ValueError(f"attempts {attempts!r} is not a count")
        created_at = data.get("created_at", "")
        if created_at:
            parse_time(str(created_at))  # ValueError: not ISO-8601
        waited = data.get("waited_for_reload", [])
        if not isinstance(waited, list) or not all(isinstance(t, str) for t in waited):
            raise ValueError(f"waited_for_reload {waited!r} is not a list of table names")
        entries = [ManifestFile.from_dict(f) for f in files]
        return Manifest(run_id, entries, str(created_at), attempts, waited)
    except Exception as error:
        raise CorruptManifestError(f"{type(error).__name__}: {error}") from None


class CorruptReloadRequestError(ValueError):
    pass


def check_reload_request(request: Any, key: str, table: str) -> dict[str, Any]:
    """A reload request as the drain writes it: a JSON object naming `table` (as its key does, a name of
    TABLE_NAME), `files` a list of URIs, ISO-8601 `first_seen`/`last_seen`/`last_attempt_at`, a count
    `attempts`; anything else raises CorruptReloadRequestError naming the object."""
    try:
        if not re.match(TABLE_NAME, table):
            raise ValueError(f"{table!r} is not a schema.table name")
        if not isinstance(request, dict):
            raise ValueError(f"a JSON {type(request).__name__}, not an object")
        if request.get("table", table) != table:
            raise ValueError(f"names table {request.get('table')!r}, its key {table!r}")
        files = request.get("files", [])
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValueError("files is not a list of URIs")
        for name in ("first_seen", "last_seen", "last_attempt_at"):
            value = request.get(name)
            if value is not None and (not isinstance(value, str) or parse_time(value) is None):
                raise ValueError(f"{name} {value!r} is not an ISO-8601 time")
        if not is_count(request.get("attempts", 0)):
            raise ValueError(f"attempts {request.get('attempts')!r} is not a count")
    except Exception as error:  # whatever is wrong with it, it is this document's fault
        raise CorruptReloadRequestError(f"reload request {key} is corrupt: {error}") from None
    return request


def read_reload_request(document: bytes, key: str, table: str) -> dict[str, Any]:
    """`check_reload_request` of a stored document (not JSON is corrupt too)."""
    try:
        request = json.loads(document)
    except ValueError as error:
        raise CorruptReloadRequestError(f"reload request {key} is corrupt: not JSON ({error})") from None
    return check_reload_request(request, key, table)
