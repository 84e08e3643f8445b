"""The knobs of one local pipeline run (`localaws.pipeline_run.LocalPipeline`), shared by its parts: the source
servers, the local DMS task, the deployed stack and the checks all read the same `RunSettings` object, so a
change made to it after the pipeline was made (a test's `execution_input`, its `replication`) reaches them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localaws import replication

SOURCE_KINDS = ("postgresql", "mysql", "sqlite")


@dataclass
class RunSettings:
    """Knobs of one run (defaults: the demo's)."""

    name: str = "demo"
    scale: float = 0.3
    seed: int = 42
    workdir: Path = Path("var/demo")
    parameters: dict[str, str] = field(default_factory=dict)
    replication: replication.ReplicationSettings | None = None
    execution_input: dict[str, Any] = field(default_factory=dict)
    source: str = "postgresql"  # the source database: postgresql (an embedded server), mysql (a local MariaDB
    # server, localaws/mariadb.py) or sqlite (a file)
