"""Running a Spark job's entry script on the host, as the local Glue and the local EMR Serverless both do:
its files downloaded from the local S3, the project's Python, the job's arguments with the local overrides,
its own process group (a stop or a timeout kills the script and its Spark JVM), stdout and stderr kept.

No LocalStack import here: the pure parts are unit-tested with the project's Python.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from localaws_plugin import settings

ERROR_MESSAGE_LINES = 12


def local_overrides(arguments: dict[str, str] | set[str]) -> dict[str, str]:
    """The arguments every local run gets over the deployed ones: a hadoop catalog in the local warehouse
    (the Glue Data Catalog is not emulated) and S3 inputs staged through the local S3."""
    overrides = {
        "--catalog_type": "hadoop",
        "--warehouse": settings.warehouse(),
        "--s3_endpoint_url": settings.endpoint_url(),
    }
    if "--refined_location" in arguments:  # the hadoop catalog rejects a custom table location
        overrides["--refined_location"] = ""  # empty: the refine job's catalog default
    return overrides


def error_message_from_stderr(stderr_text: str, returncode: int) -> str:
    lines = [line for line in stderr_text.splitlines() if line.strip()]
    tail = "\n".join(lines[-ERROR_MESSAGE_LINES:])
    return tail[-4000:] or f"script exited with status {returncode}"


def s3_client(region: str, account_id: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint_url(),
        region_name=region,
        aws_access_key_id=account_id,
        aws_secret_access_key="test",
    )


def download(s3: Any, uri: str, target_dir: Path) -> Path:
    """A script or library named by an s3:// URI, fetched into `target_dir` (a local path is used as is)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path)
    if parsed.scheme not in ("s3", "s3a"):
        raise ValueError(f"unsupported script location {uri}")
    target = target_dir / Path(parsed.path).name
    s3.download_file(parsed.netloc, parsed.path.lstrip("/"), str(target))
    return target


def script_environment(
    region: str, account_id: str, python_path: list[str], extra: dict[str, str]
) -> dict[str, str]:
    """The environment of a job script: the local AWS as its endpoint, its libraries on PYTHONPATH."""
    env = settings.host_process_base_env()
    env.update(
        {
            "AWS_ENDPOINT_URL": settings.endpoint_url(),
            "AWS_ACCESS_KEY_ID": account_id,
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
            "PYTHONPATH": ":".join(python_path),
            "PYSPARK_PYTHON": settings.host_python(),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def start_script(command: list[str], run_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start `command` in its own session (process group), stdout and stderr into `run_dir`."""
    with (run_dir / "stdout.log").open("wb") as out, (run_dir / "stderr.log").open("wb") as err:
        return subprocess.Popen(
            command,
            cwd=run_dir,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def signal_group(process: subprocess.Popen, signal_number: int = signal.SIGKILL) -> None:
    """Signal the script and its Spark JVM (the process group start_script made), if still there."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal_number)


def kill_group(process: subprocess.Popen) -> None:
    signal_group(process)
    process.wait()


def stderr_message(run_dir: Path, returncode: int) -> str:
    return error_message_from_stderr((run_dir / "stderr.log").read_text(errors="replace"), returncode)
