"""The batch manifest the drain Lambda writes and the CDC job applies (docs/CONTRACTS.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ManifestFile:
    uri: str
    size: int = 0


@dataclass(frozen=True)
class Manifest:
    run_id: str
    files: tuple[ManifestFile, ...]

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Manifest:
        version = document.get("version", 1)
        if version != 1:
            raise ValueError(f"manifest version {version} is not supported (expected 1)")
        files = tuple(ManifestFile(f["uri"], int(f.get("size", 0))) for f in document.get("files", []))
        return cls(str(document.get("run_id") or "manual"), files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "run_id": self.run_id,
            "files": [{"uri": f.uri, "size": f.size} for f in self.files],
        }
