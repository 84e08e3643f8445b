"""The warm Spark workers of the local Glue and EMR Serverless (localaws_plugin.host_runs.WarmPool): job scripts
run one after another in one long-lived Python and JVM, each as a fresh process would run it, and a stopped
run really stops (its worker and JVM are killed, the next run gets a new worker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from localaws_plugin import host_runs, settings

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[host_runs.WarmPool]:
    """One worker kept (as a pool of size 1), its JVM up before the first test (no Iceberg warm-up: the tests
    are about what a run gets, not how fast)."""
    env = settings.host_process_base_env() | {"PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    warm = host_runs.WarmPool(
        sys.executable,
        str(REPO_ROOT / "spark_jobs"),
        tmp_path_factory.mktemp("workers"),
        env,
        size=1,
        runs_per_worker=25,
        warm_up=False,
    )
    assert warm.wait_warm(300), "the worker did not warm up"
    yield warm
    warm.shutdown()


def run_script(
    pool: host_runs.WarmPool,
    run_dir: Path,
    source: str,
    argv: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    python_path: tuple[str, ...] = (),
) -> tuple[host_runs.WarmRun, Path]:
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / "job.py"
    script.write_text(textwrap.dedent(source))
    environment = {"PATH": os.environ.get("PATH", ""), **(env or {})}
    return pool.run(str(script), list(argv), run_dir, environment, list(python_path)), run_dir


def finished(run: host_runs.WarmRun, timeout: float = 180) -> int:
    return run.wait(timeout=timeout)


def test_runs_get_their_own_arguments_environment_exit_status_and_output(
    pool: host_runs.WarmPool, tmp_path: Path
) -> None:
    """Given two scripts run one after the other on the same worker,
    Then each sees its own argv, environment and working directory, its stdout and stderr land in its own
    files, and its sys.exit status (an int, or a message: status 1 with the message on stderr) is the run's."""
    first, first_dir = run_script(
        pool,
        tmp_path / "one",
        """
        import os, sys
        print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "job", os.environ.get("JOB"))
        os.environ["LEAKED"] = "yes"
        print("to stderr", file=sys.stderr)
        sys.exit(3)
        """,
        argv=("--a", "1"),
        env={"JOB": "first"},
    )
    assert finished(first) == 3
    second, second_dir = run_script(
        pool,
        tmp_path / "two",
        """
        import os, sys
        print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "job", os.environ.get("JOB"),
              "leaked", os.environ.get("LEAKED"))
        sys.exit("a message")
        """,
        env={"JOB": "second"},
    )
    assert finished(second) == 1
    assert first.pid == second.pid  # the same warm worker
    assert (first_dir / "stdout.log").read_text() == "argv ['--a', '1'] cwd one job first\n"
    assert (first_dir / "stderr.log").read_text() == "to stderr\n"
    assert (second_dir / "stdout.log").read_text() == "argv [] cwd two job second leaked None\n"
    assert (second_dir / "stderr.log").read_text() == "a message\n"


def test_an_uncaught_exception_fails_the_run_with_its_traceback_and_the_worker_serves_on(
    pool: host_runs.WarmPool, tmp_path: Path
) -> None:
    failed, failed_dir = run_script(pool, tmp_path / "fails", "raise ValueError('broken input')\n")
    assert finished(failed) == 1
    assert host_runs.stderr_message(failed_dir, 1).endswith("ValueError: broken input")
    ok, _ = run_script(pool, tmp_path / "ok", "print('fine')\n")
    assert finished(ok) == 0 and ok.pid == failed.pid


def library_zip(path: Path, version: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("joblib_under_test/__init__.py", f"VERSION = {version!r}\n")
    return path


def test_each_run_imports_the_library_it_names_not_an_earlier_runs(
    pool: host_runs.WarmPool, tmp_path: Path
) -> None:
    """Given two runs whose python path holds two versions of the same package (as two deploys of
    lakehouse.zip), Then each imports its own version: modules from outside the installed packages are
    forgotten after a run."""
    source = """
    import joblib_under_test
    print(joblib_under_test.VERSION)
    """
    outputs = []
    for version in ("1", "2"):
        run_dir = tmp_path / f"v{version}"
        run_dir.mkdir()
        archive = library_zip(run_dir / "lib.zip", version)
        run, _ = run_script(pool, run_dir, source, python_path=(str(archive),))
        assert finished(run) == 0
        outputs.append((run_dir / "stdout.log").read_text())
    assert outputs == ["1\n", "2\n"]


def test_each_run_gets_a_new_spark_session_in_the_warm_jvm(pool: host_runs.WarmPool, tmp_path: Path) -> None:
    """Given a run that makes a session (lakehouse.io.session, as the jobs do), sets a runtime setting and caches
    a view, and a second run that makes its session the same way,
    Then the second run's session is another SparkContext in the same JVM, without the first run's setting or
    view, and it still has the Iceberg extensions (it can MERGE into an Iceberg table)."""
    script = """
    import sys
    from lakehouse.base.config import LakeConfig
    from lakehouse.io.session import build_session
    spark = build_session(LakeConfig(catalog_name="t", warehouse=sys.argv[1]), "probe")
    jvm = spark.sparkContext._jvm
    print("jvm", jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getName().split("@")[0])
    print("context", spark.sparkContext.applicationId)
    print("setting", spark.conf.get("spark.probe.setting", "unset"))
    print("views", sorted(t.name for t in spark.catalog.listTables()))
    spark.conf.set("spark.probe.setting", "set by " + sys.argv[2])
    spark.range(3).createOrReplaceTempView("left_behind")
    spark.sql(f"CREATE TABLE IF NOT EXISTS t.db.{sys.argv[2]} (id BIGINT, v STRING) USING iceberg")
    spark.sql(f"INSERT INTO t.db.{sys.argv[2]} VALUES (1, 'a')")
    spark.createDataFrame([(1, "b"), (2, "c")], "id BIGINT, v STRING").createOrReplaceTempView("c")
    spark.sql(f"MERGE INTO t.db.{sys.argv[2]} t USING c ON t.id = c.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    print("rows", sorted(tuple(r) for r in spark.table(f"t.db.{sys.argv[2]}").collect()))
    """
    library = str(REPO_ROOT / "spark_jobs")
    warehouse = str(tmp_path / "warehouse")
    lines = []
    for name in ("first", "second"):
        run, run_dir = run_script(pool, tmp_path / name, script, (warehouse, name), python_path=(library,))
        assert finished(run) == 0, (run_dir / "stderr.log").read_text()[-3000:]
        lines.append(dict(line.split(" ", 1) for line in (run_dir / "stdout.log").read_text().splitlines()))
    first, second = lines
    assert first["jvm"] == second["jvm"] and first["context"] != second["context"]
    assert first["setting"] == second["setting"] == "unset"
    assert first["views"] == second["views"] == "[]"
    assert first["rows"] == second["rows"] == "[(1, 'b'), (2, 'c')]"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stopped_run_really_stops_with_its_jvm_and_the_next_run_gets_a_new_worker(
    pool: host_runs.WarmPool, tmp_path: Path
) -> None:
    """Given a run that is going (its Spark session up, then waiting forever),
    When it is stopped as the local Glue stops a run (terminate, then the process group killed),
    Then the run ends with the signal's status, the worker and its JVM are gone, a second signal is a no-op,
    and the next run goes to a new worker."""
    ready = tmp_path / "ready"
    source = f"""
    import os, time
    from lakehouse.base.config import LakeConfig
    from lakehouse.io.session import build_session
    spark = build_session(LakeConfig(warehouse={str(tmp_path / "w")!r}), "stopped")
    pid = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getName()
    open({str(ready)!r}, "w").write(pid.split("@")[0])
    while True:
        time.sleep(1)
    """
    run, _ = run_script(pool, tmp_path / "stopped", source, python_path=(str(REPO_ROOT / "spark_jobs"),))
    deadline = time.monotonic() + 180
    while not ready.exists() or not ready.read_text():
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    jvm_pid = int(ready.read_text())
    with pytest.raises(subprocess.TimeoutExpired):
        run.wait(timeout=0.5)
    run.terminate()
    host_runs.kill_group(run)
    assert run.poll() in (-signal.SIGTERM, -signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_alive(jvm_pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not pid_alive(run.pid) and not pid_alive(jvm_pid)
    host_runs.signal_group(run)  # the run is over: nothing left to signal, nothing raised
    # its successor is warming up, so a run now starts cold (None); on a quick machine the successor may be
    # warm already (the fresh clone's one failure): then the run is on it, never on the stopped worker
    successor = pool.run("unused.py", [], tmp_path, {}, [])
    if successor is not None:
        assert successor.pid not in (run.pid, jvm_pid)
        finished(successor)
    assert pool.wait_warm(300)
    after, _ = run_script(pool, tmp_path / "after", "print('ok')\n")
    assert finished(after) == 0 and after.pid != run.pid


def test_a_run_that_finished_is_not_signalled_through_its_reused_worker(
    pool: host_runs.WarmPool, tmp_path: Path
) -> None:
    """Given a run that finished (its worker back in the pool) and another run going on that worker,
    When the finished run is stopped late (a stop racing the run's end),
    Then the other run is untouched."""
    done, _ = run_script(pool, tmp_path / "done", "print('done')\n")
    assert finished(done) == 0
    going, going_dir = run_script(pool, tmp_path / "going", "import time\ntime.sleep(3)\nprint('survived')\n")
    assert going.pid == done.pid
    done.terminate()
    host_runs.kill_group(done)
    assert finished(going) == 0 and (going_dir / "stdout.log").read_text() == "survived\n"


def java_children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (its JVM)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_worker_whose_jvm_died_ends_and_runs_go_elsewhere(pool: host_runs.WarmPool, tmp_path: Path) -> None:
    """Given an idle warm worker whose JVM is killed (as the OOM killer does),
    Then the worker ends by itself (status 3) instead of failing every later run, and the next run goes to a
    new worker."""
    assert pool.wait_warm(300)
    probe, _ = run_script(pool, tmp_path / "probe", "print('x')\n")
    assert finished(probe) == 0
    (jvm,) = java_children(probe.pid)
    os.kill(jvm, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while probe.worker.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert probe.worker.process.returncode == 3
    assert pool.run("unused.py", [], tmp_path, {}, []) is None  # no warm worker: a run starts its own process
    assert pool.wait_warm(300)
    after, _ = run_script(pool, tmp_path / "after", "print('ok')\n")
    assert finished(after) == 0 and after.pid != probe.pid


def test_a_run_gets_the_credentials_of_its_environment_not_an_earlier_runs_boto3_session(
    pool: host_runs.WarmPool, tmp_path: Path
) -> None:
    """boto3 stays imported between runs (an installed package); its default session, which keeps the
    credentials it first read, does not. The service models it read stay (spark_worker.share_service_models):
    the next run's new session reads none of them again."""
    source = """
    import os
    import boto3
    key = boto3.client("s3", region_name="us-east-1")._request_signer._credentials.access_key
    loader = boto3.DEFAULT_SESSION._session.get_component("data_loader")
    print(key, getattr(loader, "first_read_by", "-"))
    loader.first_read_by = os.environ["AWS_ACCESS_KEY_ID"]
    """
    outputs = []
    for key in ("FIRSTKEY", "SECONDKEY"):
        run, run_dir = run_script(
            pool, tmp_path / key, source, env={"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "s"}
        )
        assert finished(run) == 0, (run_dir / "stderr.log").read_text()
        outputs.append((run_dir / "stdout.log").read_text().split())
    # the second run's loader is the first's: it carries the mark the first run left
    assert outputs == [["FIRSTKEY", "-"], ["SECONDKEY", "FIRSTKEY"]]
