"""Settings of the plugins, read from the environment that `localaws.stack` gives LocalStack."""

from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[3]


def host_python() -> str:
    """The interpreter that runs Lambda handlers and Glue scripts (the project's Python 3.11 venv)."""
    return os.environ.get("LOCALAWS_HOST_PYTHON") or str(_REPO_ROOT / ".venv" / "bin" / "python")


def state_dir() -> Path:
    return Path(os.environ.get("LOCALAWS_STATE_DIR") or _REPO_ROOT / "var" / "localstack")


def warehouse() -> str:
    return os.environ.get("LOCALAWS_WAREHOUSE") or str(_REPO_ROOT / "var" / "warehouse" / "clean")


def endpoint_url() -> str:
    return os.environ.get("LOCALAWS_ENDPOINT_URL") or "http://127.0.0.1:4566"


def glue_max_parallel_runs() -> int:
    return int(os.environ.get("LOCALAWS_GLUE_MAX_PARALLEL_RUNS") or 2)


def dms_lenient() -> bool:
    """`LOCALAWS_DMS_LENIENT=1`: the local DMS also writes the changes AWS DMS drops (UPDATE and DELETE of a
    table without a primary key), as it did before; by default it drops them as AWS does, with a warning."""
    return os.environ.get("LOCALAWS_DMS_LENIENT", "").strip().lower() in ("1", "true", "yes", "on")


def host_process_base_env() -> dict[str, str]:
    """What a host process inherits from LocalStack's environment: paths and locale, not LocalStack's config;
    and the JVM options and submit arguments of local Spark sessions (LAKE_SPARK_JAVA_OPTIONS,
    lakehouse.io.session; PYSPARK_SUBMIT_ARGS, which pyspark reads when it launches a JVM), so a job run's JVM,
    warm or not, gets what the caller gave every local session (the tests: C1 only, no generated code)."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "JAVA_HOME", "SPARK_HOME", "TZ", "USER")
    spark = ("LAKE_SPARK_JAVA_OPTIONS", "PYSPARK_SUBMIT_ARGS")
    return {name: os.environ[name] for name in (*keep, *spark) if name in os.environ}


def warm_spark() -> bool:
    """`LOCALAWS_WARM_SPARK=0`: every Glue and EMR Serverless job run starts its own Python and Spark JVM, as
    before the warm workers (host_runs.WarmPool); by default the runs go to warm workers."""
    return os.environ.get("LOCALAWS_WARM_SPARK", "1").strip().lower() not in ("0", "false", "no", "off")


def warm_spark_workers() -> int:
    """Warm workers kept (busy and idle together; more start while more runs overlap, and end after them)."""
    return int(os.environ.get("LOCALAWS_WARM_SPARK_WORKERS") or glue_max_parallel_runs())


def warm_spark_runs_per_worker() -> int:
    """Runs a worker serves before it is replaced (a long-lived JVM keeps what each SparkContext leaves)."""
    return int(os.environ.get("LOCALAWS_WARM_SPARK_RUNS") or 25)


def spark_library() -> str:
    """The folder holding the lakehouse package a warm worker starts its JVM with (lakehouse.io.session's jars
    and JVM options) and warms up with; the runs themselves import the library their job names."""
    return os.environ.get("LOCALAWS_SPARK_LIBRARY") or str(_REPO_ROOT / "spark_jobs")
