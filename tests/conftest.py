"""One SparkSession for the whole test run (starting one costs seconds); each test gets its own
clean-zone database in the shared warehouse, so tests never see each other's tables.

In parallel (pytest-xdist, as `make test` runs: `-n N --dist loadscope`) every worker is a pytest process of
its own: its own SparkSession, its own local AWS on a port of its own (LOCALAWS_PORT + 1 + the worker's number),
and takes whole units of tests (`parallel_scope`)."""

from __future__ import annotations

import itertools
import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

_database_numbers = itertools.count(1)

# A test of an embedded PostgreSQL server (the run's, the reconcile tests' module server on TCP) or of Spark.
SERVER_FIXTURES = ("spark", "postgres_socket_dir", "pg")


def parallel_scope(nodeid: str) -> str:
    """The unit of work a pytest-xdist worker takes whole (`make test`: `--dist loadscope`, scheduled by
    `pytest_xdist_make_scheduler` below), from a test's node id ("tests/unit/spark/test_x.py::test_y[a]"):
    - the local AWS's own tests (tests/integration/localaws/): one unit, so one LocalStack serves them all;
    - a pipeline test (tests/integration/pipeline/): a unit of its own. Each deploys its own stack on its
      worker's LocalStack, and the end-to-end module's five tests in a row were the run's long pole (≈ 1,180 s
      on one worker while the CPU idled at the end, 2026-11-26);
    - any other module: a unit of its own, so that what it starts once (the reconcile tests' PostgreSQL)
      starts once."""
    module = nodeid.split("::", 1)[0]
    if module.startswith("tests/integration/localaws/"):
        return "tests/integration/localaws/"
    if module.startswith("tests/integration/pipeline/"):
        return nodeid
    return module


# Pure tests that mostly wait: the Lambda tests, on moto, whose every drain ends with a receive that long-polls
# the empty queue for its second (as SQS does). Queued with the Spark tests and spread among them
# (`spread_waiting`), they wait while the others compute. Last, they were the run's final minute at half the CPU
# (test_queue_drain_hardening: 57 drains, 66 s); all together, two workers waited at once for 100 s.
WAITING_PURE_TESTS = ("unit/functions/",)


def parallel_rank(path: str, fixturenames: tuple[str, ...] = ()) -> int:
    """Where a test goes in a parallel run's queue (`--no-loadscope-reorder`: the order the workers collected),
    the long kinds first so that quick ones fill the end: 0 integration (minutes of waiting on the local AWS),
    1 Spark or an embedded PostgreSQL, and the pure tests that wait (WAITING_PURE_TESTS), 2 the rest (pure
    tests: template, docs, tools). `path`: relative to tests/."""
    if path.startswith("integration/"):
        return 0
    if any(name in SERVER_FIXTURES for name in fixturenames) or path.startswith(WAITING_PURE_TESTS):
        return 1
    return 2


def spread_waiting(modules: list[str]) -> list[str]:
    """`modules` (paths relative to tests/, in queue order) with the waiting ones (WAITING_PURE_TESTS) spread
    evenly among the others, each keeping its order: a worker that takes one waits while the others compute."""
    waiting = [m for m in modules if m.startswith(WAITING_PURE_TESTS)]
    computing = [m for m in modules if not m.startswith(WAITING_PURE_TESTS)]
    if not waiting or not computing:
        return list(modules)
    step = len(computing) / len(waiting)
    placed = [(float(i), m) for i, m in enumerate(computing)]
    placed += [((j + 0.5) * step - 0.5, m) for j, m in enumerate(waiting)]
    return [m for _, m in sorted(placed, key=lambda p: p[0])]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: ignored where it is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope` with `parallel_scope` as the scope (xdist's own `--dist loadgroup` marks are lost on
    pytest 9: it renames node ids through an attribute pytest no longer reads)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ParallelScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return parallel_scope(nodeid)

    return ParallelScopes(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker (`gw0`, `gw1`, …) runs its local AWS on LOCALAWS_PORT (4566 when unset) + 1 + its
    number, so workers never share one; `sam build` output stays shared (LOCALAWS_SAM_BUILD_DIR: the build
    folder of the run's own port, `.aws-sam/build-<port>`; tests/integration/pipeline/conftest.py builds it once per run). Every process
    of the run (and what it starts) compiles with C1 only and maps the JVM class archive when `make test` made
    it (`jvm_environment`). Its botocore sessions share one reading of AWS's service models, as a warm Spark
    worker's runs do (`share_service_models`): moto gives each test a new boto3 default session, and each read
    the models again (megabytes of JSON per service): the Lambda tests took 72.7 CPU-s instead of 27.8
    (bench/RESULTS.md, "A warm worker's heap, and AWS's service models read once")."""
    from localaws_plugin.spark_worker import share_service_models

    from localaws.jvm_archive import existing_archive_option

    os.environ.update(jvm_environment(os.environ, existing_archive_option()))
    share_service_models()
    worker = getattr(config, "workerinput", {}).get("workerid")
    if not worker:
        return
    from localaws import sam_app
    from localaws.stack import DEFAULT_PORT

    base = int(os.environ.get("LOCALAWS_PORT", DEFAULT_PORT))
    # never .aws-sam/build itself: that is the user's `sam build` folder, which the test that deploys as a user
    # does (`make deploy`'s command) builds while the other workers package the shared build
    os.environ.setdefault("LOCALAWS_SAM_BUILD_DIR", str(sam_app.BUILD_DIR.with_name(f"build-{base}")))
    os.environ["LOCALAWS_PORT"] = str(base + 1 + int(worker.removeprefix("gw")))


def free_disk(paths: tuple[Path, ...]) -> str:
    """The free space of the file systems the run writes to (the repository's var/ and .aws-sam/, the temporary
    folder), each once: a run that fails with ENOSPC says in its header and summary how much there was."""
    import shutil

    seen: dict[int, str] = {}
    for path in paths:
        seen.setdefault(path.stat().st_dev, f"{path} {shutil.disk_usage(path).free / 2**30:.1f} GB")
    return "free disk: " + ", ".join(seen.values())


def _run_paths() -> tuple[Path, ...]:
    import tempfile

    return (Path(__file__).resolve().parents[1], Path(tempfile.gettempdir()))


def pytest_report_header(config: pytest.Config) -> list[str]:
    from localaws.jvm_archive import archive_path

    archive = archive_path()
    said = (
        str(archive)
        if archive.is_file()
        else "none: its JVMs load their classes from the jars (make jvm-archive)"
    )
    return [free_disk(_run_paths()), f"JVM class archive: {said}"]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        terminalreporter.write_line(f"{free_disk(_run_paths())} (at the end)")


# The test that runs a chosen subset of the Spark tests in a pytest of its own, with executors in their own JVMs
# (tests/unit/spark/test_multi_jvm.py: its module's SUBSET).
MULTI_JVM_TEST = (
    "tests/unit/spark/test_multi_jvm.py::test_the_tests_that_matter_pass_with_executors_in_their_own_jvms"
)


def run_in_the_multi_jvm_test(items: list[pytest.Item]) -> set[str]:
    """The node ids among `items` that the multi-JVM test runs itself, when it is among them: there they run
    with the driver and the executors in separate JVMs, the harsher of the two settings, so running them in
    this process too would only repeat them (their local-cluster run must pass whole: that test asserts it)."""
    multi_jvm = next((item for item in items if item.nodeid == MULTI_JVM_TEST), None)
    if multi_jvm is None:
        return set()
    own_module = MULTI_JVM_TEST.split("::", 1)[0]
    return {nodeid for nodeid in multi_jvm.module.SUBSET if not nodeid.startswith(own_module)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each of the multi-JVM test's subset runs once, in that test's local-cluster run, not here too
    (`run_in_the_multi_jvm_test`; a run of a module alone still runs its tests here). In a pytest-xdist
    worker, the tests in `parallel_rank` order, the waiting ones of rank 1 spread among the others
    (`spread_waiting`; every worker sorts alike, as xdist needs)."""
    if not os.environ.get("LAKE_SPARK_MASTER", "").startswith("local-cluster"):
        elsewhere = run_in_the_multi_jvm_test(items)
        if elsewhere:
            config.hook.pytest_deselected(items=[item for item in items if item.nodeid in elsewhere])
            items[:] = [item for item in items if item.nodeid not in elsewhere]
    if not hasattr(config, "workerinput"):
        return
    tests_dir = Path(__file__).resolve().parent

    def path_of(item: pytest.Item) -> str | None:
        try:
            return item.path.resolve().relative_to(tests_dir).as_posix()
        except ValueError:
            return None

    paths = {item.nodeid: path_of(item) for item in items}  # each resolved once

    def rank(item: pytest.Item) -> int:
        path = paths[item.nodeid]
        return 2 if path is None else parallel_rank(path, tuple(getattr(item, "fixturenames", ())))

    ranks = {item.nodeid: rank(item) for item in items}
    second = spread_waiting(
        list(dict.fromkeys(p for i in items if ranks[i.nodeid] == 1 and (p := paths[i.nodeid])))
    )
    position = {module: number for number, module in enumerate(second)}
    # stable: collection order within a rank, and within a module
    items.sort(key=lambda item: (ranks[item.nodeid], position.get(paths[item.nodeid] or "", 0)))


@pytest.fixture(scope="session")
def warehouse_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="session")
def base_config(warehouse_dir: str, tmp_path_factory: pytest.TempPathFactory):
    from lakehouse.base.config import LakeConfig

    return LakeConfig(
        warehouse=warehouse_dir,
        staging_dir=str(tmp_path_factory.mktemp("staging")),
        shuffle_partitions=2,
    )


# The JIT of every JVM a test run starts (its SparkSessions, the local AWS's job runs): C1 only
# (-XX:TieredStopAtLevel=1). A test's tables are a few rows, so the JVM's CPU goes to compiling, not to running:
# C2 recompiles Spark's and Iceberg's hot paths at length for rows that never come. Measured (CPU seconds of the
# whole process tree, 2026-11-26): test_cdc_rules 128 -> 101, test_history_property 87 -> 61, test_hostile_names
# 145 -> 133, test_multi_jvm's local-cluster run 244 -> 152 (wall 267 -> 141 s), test_pipeline_fencing
# 151 -> 145. C1 only also shrinks the JVM's default code cache from 240 MB to 48 MB, which a session that runs
# queries for half an hour fills: the JVM then flushes and recompiles its hot code again and again ("CodeCache
# is full. Compiler has been disabled"): after a dozen applies a small apply costs up to 4.9 CPU-s in bursts,
# 2.49 on average against 2.25 (bench/RESULTS.md, "The code cache of a C1-only JVM"); the cache keeps the
# tiered default.
# Set for the whole process (pytest_configure): a process launches one JVM, at its first session,
# whichever test makes it (a pipeline test's check of the lake, before the `spark` fixture). Semantics are the
# JVM's either way; the product's sessions keep the JVM's default (lakehouse.io.session).
TEST_JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

# Spark settings of every session a test run starts: the tests' own and the local AWS's job runs, warm or not
# (PYSPARK_SUBMIT_ARGS, which the local AWS passes on to them: localaws_plugin.settings.host_process_base_env).
# Expressions are interpreted and operators run one after another instead of generated into Java and compiled
# per query: a test's tables are a few rows, so the generated code never paid back its compiling (Janino and
# the code's text were a third of a warm worker's CPU in a pipeline test's CDC runs, JFR samples). Spark
# computes the same rows either way (its own tests run each expression both ways); the product's sessions
# generate code (Glue, EMR, `make demo`, the benchmarks), and so do the oracle tests (PRODUCT_SPARK_CONF below). Measured one after the other on a loaded machine
# (bench/RESULTS.md, "The suite's Spark without generated code"): a CDC run of the pipeline tests' six tables
# on a warm worker 13.1 -> 8.6 CPU-s, test_hostile_names' session 65 -> 59.
TEST_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
# Spark's own defaults, as the product runs: the oracle tests of the apply and of the history switch them back on
# for their own run (the `generated_code` fixture), so a row that generated code would compute otherwise than
# interpreted code fails a test here, not on Glue.
PRODUCT_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}


def jvm_environment(environ: Mapping[str, str], class_archive: str = "") -> dict[str, str]:
    """The environment variables that give the tests' session TEST_JIT_OPTIONS, over `environ` (set ones
    win): the local JVM options plus C1 only for the driver and, on a local-cluster master, for the
    executors too (spark-submit's arguments). `class_archive`: the option that maps the JVM class archive
    (localaws.jvm_archive), given to a local master's driver, whose class path is the archive's (a
    local-cluster driver's and executors' are Spark's jars alone, where it would be ignored)."""
    from lakehouse.io.session import LOCAL_JAVA_OPTIONS

    cluster = environ.get("LAKE_SPARK_MASTER", "").startswith("local-cluster")
    driver = f"{LOCAL_JAVA_OPTIONS} {TEST_JIT_OPTIONS}"
    if class_archive and not cluster:
        driver = f"{driver} {class_archive}"
    settings = TEST_SPARK_CONF | ({"spark.executor.extraJavaOptions": TEST_JIT_OPTIONS} if cluster else {})
    submit = " ".join(f"--conf {shlex.quote(f'{name}={value}')}" for name, value in settings.items())
    wanted = {"LAKE_SPARK_JAVA_OPTIONS": driver, "PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell"}
    return {name: environ.get(name, value) for name, value in wanted.items()}


@pytest.fixture(scope="session")
def spark(base_config) -> Iterator:
    # LAKE_SPARK_MASTER=local-cluster[2,1,1024] (tests/unit/spark/test_multi_jvm.py): the executors are
    # other JVMs with their own memory, so the driver needs less.
    multi_jvm = os.environ.get("LAKE_SPARK_MASTER", "").startswith("local-cluster")
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "1g" if multi_jvm else "3g")
    from lakehouse.io.session import build_session

    session = build_session(base_config, "lakehouse-tests")
    yield session
    session.stop()


@contextmanager
def session_settings(spark, settings: Mapping[str, str]) -> Iterator:
    """`settings` on a session while inside, then its own again."""
    before = {name: spark.conf.get(name) for name in settings}
    try:
        for name, value in settings.items():
            spark.conf.set(name, value)
        yield spark
    finally:
        for name, value in before.items():
            spark.conf.set(name, value)


@pytest.fixture
def generated_code(spark) -> Iterator:
    """The shared session with the product's code generation (PRODUCT_SPARK_CONF) for one test, then back."""
    with session_settings(spark, PRODUCT_SPARK_CONF) as session:
        yield session


@pytest.fixture
def lake_config(base_config, spark):
    """A LakeConfig whose clean and refined databases are new for this test."""
    number = next(_database_numbers)
    return replace(base_config, clean_database=f"clean_{number}", refined_database=f"refined_{number}")


@pytest.fixture(scope="session")
def postgres_socket_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One embedded PostgreSQL 16 server (pgserver, `wal_level=logical`, a Unix socket only) for the run."""
    from localaws.postgres import LocalPostgres

    server = LocalPostgres(tmp_path_factory.mktemp("postgres") / "data")
    address = server.start()
    yield address.socket_dir
    server.stop()
