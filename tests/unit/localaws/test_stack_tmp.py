"""The local AWS keeps its temporary files (every Lambda function and layer it unzipped) in its own state folder,
and removes them when it stops: LocalStack itself never does, and a day of test runs filled a disk with them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from localaws.stack import StackConfig, stop


def _unzipped_function(config: StackConfig) -> Path:
    code = config.tmp_dir / "lambda" / "awslambda-us-east-1-tasks" / "lake-queue-drain-1" / "code"
    code.mkdir(parents=True)
    (code / "app.py").write_text("def handler(event, context): ...\n")
    return code


def test_localstack_unzips_into_the_state_folder(tmp_path: Path) -> None:
    """Given a local AWS whose state is in a folder, Then its processes' TMPDIR is a folder inside it."""
    config = StackConfig(port=4799, state_dir=tmp_path / "localstack-4799")

    assert config.environment()["TMPDIR"] == str(tmp_path / "localstack-4799" / "tmp")


def test_stopping_the_local_aws_removes_what_it_unzipped(tmp_path: Path) -> None:
    """Given a running local AWS (a process of its own session, as `start` makes) that unzipped a function,
    When it is stopped, Then the process is gone and so is its temporary folder."""
    config = StackConfig(port=4799, state_dir=tmp_path / "localstack-4799")
    code = _unzipped_function(config)
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    config.pid_file.write_text(str(process.pid))

    assert stop(config, timeout=5) is True

    assert process.wait(timeout=5) is not None
    assert not code.exists() and not config.tmp_dir.exists()


def test_stopping_a_local_aws_that_was_killed_removes_what_it_left(tmp_path: Path) -> None:
    """Given a local AWS killed without `stop` (its pid file names no process), When `stop` runs,
    Then it reports nothing running and removes the functions it left unzipped."""
    config = StackConfig(port=4799, state_dir=tmp_path / "localstack-4799")
    code = _unzipped_function(config)
    config.pid_file.write_text("999999999")

    assert stop(config, timeout=5) is False

    assert not code.exists() and not config.pid_file.exists()
