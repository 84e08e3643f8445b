"""The suite in parallel (`make test`: pytest-xdist, `--dist loadgroup`): what shares a server keeps to one
worker, each worker runs its local AWS on a port of its own, and the workers deploy one `sam build`."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from localaws import sam_app
from localaws.stack import StackConfig
from tests import conftest


@pytest.mark.parametrize(
    ("path", "fixtures", "group"),
    [
        ("integration/localaws/test_localaws_glue.py", ("aws",), "integration-localaws"),
        ("integration/localaws/test_localaws_drain_keys.py", ("wired",), "integration-localaws"),
        (
            "integration/pipeline/test_pipeline_end_to_end.py",
            ("make_pipeline",),
            "integration-test_pipeline_end_to_end.py",
        ),
        (
            "integration/pipeline/test_pipeline_reconcile.py",
            ("make_pipeline", "pipeline_endpoint"),
            "integration-test_pipeline_reconcile.py",
        ),
        ("unit/localaws/test_localaws_dms_postgres.py", ("postgres_socket_dir",), "shared-postgres"),
        ("unit/spark/test_reconcile_cost.py", ("spark", "pg", "tmp_path"), "shared-postgres"),
        ("unit/spark/test_cdc_rules.py", ("spark", "lake_config"), None),
        ("unit/functions/test_lease.py", (), None),
    ],
)
def test_tests_that_share_a_server_share_a_worker_and_the_rest_go_one_by_one(path, fixtures, group) -> None:
    """Given a test's path under tests/ and its fixtures,
    Then the local AWS's own tests form one group, each other integration module one of its own, the tests of
    an embedded PostgreSQL one, and every other test none (any worker)."""
    assert conftest.parallel_group(path, fixtures) == group


def test_a_worker_runs_its_local_aws_on_a_port_of_its_own_and_deploys_the_runs_build(monkeypatch) -> None:
    """Given LOCALAWS_PORT=4720,
    When pytest configures worker gw2, and then a process that is no worker,
    Then the worker's local AWS listens on 4723 (state in var/localstack-4723) and builds into the folder of
    the run's port 4720; outside a worker nothing changes."""
    monkeypatch.setenv("LOCALAWS_PORT", "4720")
    monkeypatch.delenv("LOCALAWS_SAM_BUILD_DIR", raising=False)

    conftest.pytest_configure(SimpleNamespace(workerinput={"workerid": "gw2"}))

    assert StackConfig().port == 4723
    assert StackConfig().state_dir.name == "localstack-4723"
    assert sam_app.build_dir("http://127.0.0.1:4723") == sam_app.BUILD_DIR.with_name("build-4720")

    monkeypatch.setenv("LOCALAWS_PORT", "4720")
    monkeypatch.delenv("LOCALAWS_SAM_BUILD_DIR")
    conftest.pytest_configure(SimpleNamespace())
    assert StackConfig().port == 4720
    assert sam_app.build_dir("http://127.0.0.1:4720") == sam_app.BUILD_DIR.with_name("build-4720")
    assert sam_app.build_dir("http://127.0.0.1:4566") == sam_app.BUILD_DIR


def _fake_build(log: Path, fail: bool = False):
    def build(endpoint_url: str, timeout: float = 600) -> None:
        with log.open("a") as out:
            out.write(f"start {endpoint_url}\n")
        time.sleep(0.5)  # long enough for the other processes to be at the lock
        if fail:
            raise sam_app.DeployError("sam build failed")
        with log.open("a") as out:
            out.write(f"end {endpoint_url}\n")

    return build


def _worker(endpoint_url: str, run: str, results) -> None:
    built = sam_app.build_once(endpoint_url, run)
    target = sam_app.build_dir(endpoint_url)
    # whoever returns finds the build done: the run's mark is written after the build only
    results.put((built, target.with_name(f"{target.name}.run").read_text()))


def test_workers_of_one_run_build_once_and_a_new_run_or_a_failed_build_builds_again(
    tmp_path, monkeypatch
) -> None:
    """Given three processes of one run building at once into one shared folder,
    Then exactly one builds (the others wait at the lock and find the build done), a second call of the
    same run builds nothing, a new run builds again, and a build that failed is built again."""
    log = tmp_path / "builds.log"
    monkeypatch.setenv("LOCALAWS_SAM_BUILD_DIR", str(tmp_path / ".aws-sam" / "build-4720"))
    monkeypatch.setattr(sam_app, "build", _fake_build(log))
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [
        context.Process(target=_worker, args=(f"http://127.0.0.1:{port}", "run-1", results))
        for port in (4721, 4722, 4723)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    outcomes = sorted(results.get(timeout=5) for _ in workers)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert outcomes == [(False, "run-1"), (False, "run-1"), (True, "run-1")]
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("start ") and lines[1] == lines[0].replace("start", "end")

    assert sam_app.build_once("http://127.0.0.1:4721", "run-1") is False
    assert sam_app.build_once("http://127.0.0.1:4721", "run-2") is True
    assert len(log.read_text().splitlines()) == 4

    monkeypatch.setattr(sam_app, "build", _fake_build(log, fail=True))
    with pytest.raises(sam_app.DeployError):
        sam_app.build_once("http://127.0.0.1:4721", "run-3")
    monkeypatch.setattr(sam_app, "build", _fake_build(log))
    assert sam_app.build_once("http://127.0.0.1:4721", "run-3") is True
    assert sam_app.build_once("http://127.0.0.1:4722", "run-3") is False
