"""The suite in parallel (`make test`: pytest-xdist, `--dist loadscope`): what shares a server keeps to one
worker, each worker runs its local AWS on a port of its own, and the workers deploy one `sam build`."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from localaws import sam_app
from localaws.stack import StackConfig
from tests import conftest


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/integration/localaws/test_localaws_glue.py::test_a", "tests/integration/localaws/"),
        ("tests/integration/localaws/test_localaws_drain_keys.py::test_b", "tests/integration/localaws/"),
        (
            "tests/integration/pipeline/test_pipeline_end_to_end.py::test_rollover",
            "tests/integration/pipeline/test_pipeline_end_to_end.py::test_rollover",
        ),
        ("tests/unit/spark/test_reconcile.py::test_x[a::b]", "tests/unit/spark/test_reconcile.py"),
        ("tests/unit/functions/test_lease.py::test_y", "tests/unit/functions/test_lease.py"),
    ],
)
def test_a_worker_takes_the_local_aws_tests_together_a_pipeline_test_alone_and_other_modules_whole(
    nodeid, scope
) -> None:
    """Given a test's node id,
    Then its unit of work is the local AWS's own tests together, a pipeline test alone, or else its module."""
    assert conftest.parallel_scope(nodeid) == scope


@pytest.mark.parametrize(
    ("path", "fixtures", "rank"),
    [
        ("integration/pipeline/test_pipeline_reconcile.py", ("make_pipeline",), 0),
        ("integration/localaws/test_localaws_glue.py", ("aws",), 0),
        ("unit/spark/test_cdc_rules.py", ("spark", "lake_config"), 1),
        ("unit/localaws/test_localaws_dms_postgres.py", ("postgres_socket_dir",), 1),
        ("unit/spark/test_reconcile_cost.py", ("pg", "tmp_path"), 1),
        ("unit/functions/test_queue_drain_hardening.py", ("queues", "drain_app"), 1),
        ("unit/template/test_template.py", ("template",), 2),
        ("unit/docs/test_docs_resolve.py", (), 2),
    ],
)
def test_the_long_kinds_of_test_go_first(path, fixtures, rank) -> None:
    """Given a test's path under tests/ and its fixtures,
    Then integration tests rank first, Spark and PostgreSQL tests and the Lambda tests (they wait on moto's
    long polls) next, the other pure tests last."""
    assert conftest.parallel_rank(path, fixtures) == rank


def test_the_waiting_lambda_tests_are_spread_among_the_computing_ones() -> None:
    """Given the rank-1 modules in collection order, the Lambda tests (they wait on moto's long polls) first,
    Then the queue spreads them evenly among the Spark modules, each kind in its own order, none lost; with
    nothing to spread among, the order stays."""
    lambdas = [f"unit/functions/test_{n}.py" for n in ("a", "b")]
    spark = [f"unit/spark/test_{n}.py" for n in ("c", "d", "e", "f")]
    assert conftest.spread_waiting(lambdas + spark) == [
        spark[0],
        lambdas[0],
        spark[1],
        spark[2],
        lambdas[1],
        spark[3],
    ]
    assert conftest.spread_waiting(lambdas[:1] + spark) == [*spark[:2], lambdas[0], *spark[2:]]
    assert conftest.spread_waiting(lambdas) == lambdas
    assert conftest.spread_waiting(spark) == spark


# What `make test` passes (Makefile, PYTEST_PARALLEL).
MAKE_TEST_OPTIONS = ("-n", "3", "--dist", "loadscope", "--no-loadscope-reorder")

SCOPE_TEST = """
import os
from pathlib import Path


def test_{name}():
    with (Path(os.environ["RECORD"]) / "{name}").open("w") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_pytest_xdist_schedules_by_parallel_scope(tmp_path) -> None:
    """Given a test tree with two modules of local AWS tests and two other modules of three tests each, and a
    conftest that takes the repository's scheduler hook,
    When pytest runs it as `make test` does (3 workers, --dist loadscope --no-loadscope-reorder),
    Then the local AWS tests ran on one worker and each other module's tests on one worker."""
    modules = {
        "tests/integration/localaws/test_one.py": ["l1"],
        "tests/integration/localaws/test_two.py": ["l2"],
        "tests/unit/test_first.py": ["a1", "a2", "a3"],
        "tests/unit/test_second.py": ["b1", "b2", "b3"],
    }
    for module, names in modules.items():
        path = tmp_path / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(SCOPE_TEST.format(name=name) for name in names))
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('repo_conftest', {str(Path(conftest.__file__))!r})\n"
        "repo = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(repo)\n"
        "pytest_xdist_make_scheduler = repo.pytest_xdist_make_scheduler\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    record = tmp_path / "record"
    record.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *MAKE_TEST_OPTIONS],
        cwd=tmp_path,
        env=os.environ | {"RECORD": str(record)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    makefile = (Path(conftest.__file__).parents[1] / "Makefile").read_text()
    assert " ".join(MAKE_TEST_OPTIONS[2:]) in makefile  # the options this run used are make test's
    worker = {path.name: path.read_text() for path in record.iterdir()}
    assert sorted(worker) == ["a1", "a2", "a3", "b1", "b2", "b3", "l1", "l2"]
    assert worker["l1"] == worker["l2"]
    assert worker["a1"] == worker["a2"] == worker["a3"]
    assert worker["b1"] == worker["b2"] == worker["b3"]


def test_a_worker_runs_its_local_aws_on_a_port_of_its_own_and_deploys_the_runs_build(monkeypatch) -> None:
    """Given LOCALAWS_PORT=4720,
    When pytest configures worker gw2, and then a process that is no worker,
    Then the worker's local AWS listens on 4723 (state in var/localstack-4723) and builds into the folder of
    the run's port 4720; outside a worker nothing changes; a worker of a run on the default port 4566 builds
    into build-4566, not the user's .aws-sam/build."""
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

    # on the default port too, the workers' shared build is not .aws-sam/build: that folder is the user's
    # `sam build`'s, which the test deploying as a user (make deploy's command) writes meanwhile
    monkeypatch.setenv("LOCALAWS_PORT", "4566")
    monkeypatch.delenv("LOCALAWS_SAM_BUILD_DIR", raising=False)
    conftest.pytest_configure(SimpleNamespace(workerinput={"workerid": "gw0"}))
    assert sam_app.build_dir("http://127.0.0.1:4567") == sam_app.BUILD_DIR.with_name("build-4566")


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


def test_the_multi_jvm_tests_subset_runs_once_in_its_local_cluster_run():
    """Given collected items that hold the multi-JVM test (its module's SUBSET: itself, a test that runs only
    in its run, and two other modules' tests),
    When the run decides where each test runs,
    Then the other modules' tests of the subset run only in the multi-JVM test's run, nothing else is moved;
    without the multi-JVM test among the items (a module run alone), nothing is."""
    module = SimpleNamespace(
        SUBSET=(
            "tests/unit/spark/test_multi_jvm.py::test_the_executors_are_other_jvms",
            "tests/unit/spark/test_cdc_rules.py::test_schema_evolution",
            "tests/unit/refine/test_refine.py::test_refine_builds",
        )
    )
    multi_jvm = SimpleNamespace(nodeid=conftest.MULTI_JVM_TEST, module=module)
    others = [
        SimpleNamespace(nodeid=n, module=None)
        for n in (
            "tests/unit/spark/test_cdc_rules.py::test_schema_evolution",
            "tests/unit/spark/test_x.py::t",
        )
    ]

    assert conftest.run_in_the_multi_jvm_test([*others, multi_jvm]) == {
        "tests/unit/spark/test_cdc_rules.py::test_schema_evolution",
        "tests/unit/refine/test_refine.py::test_refine_builds",
    }
    assert conftest.run_in_the_multi_jvm_test(others) == set()


def test_a_run_says_how_much_disk_was_free_once_for_each_file_system(tmp_path: Path) -> None:
    """Given two folders on one file system, When the run's header and summary line is made,
    Then it names that file system once, with its free space in GB (a run that ran out of disk says so)."""
    (tmp_path / "var").mkdir()

    line = conftest.free_disk((tmp_path, tmp_path / "var"))

    assert line.startswith(f"free disk: {tmp_path} ") and line.endswith(" GB")
    assert line.count(" GB") == 1
