"""One SparkSession for the whole test run (starting one costs seconds); each test gets its own
clean-zone database in the shared warehouse, so tests never see each other's tables.

In parallel (pytest-xdist, as `make test` runs: `-n N --dist loadgroup`) every worker is a pytest process of
its own: its own SparkSession, its own local AWS on a port of its own (LOCALAWS_PORT + 1 + the worker's number),
and `parallel_group` keeps together what shares a server (see there)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

_database_numbers = itertools.count(1)

# Tests of an embedded PostgreSQL server keep to one worker (one server started, not one per worker): the run's
# (postgres_socket_dir) and the reconcile tests' module server on TCP (tests/unit/spark/test_reconcile.py: pg).
SHARED_SERVER_FIXTURES = ("postgres_socket_dir", "pg")


def parallel_group(path: str, fixturenames: tuple[str, ...] = ()) -> str | None:
    """The pytest-xdist group (`--dist loadgroup`: a group runs on one worker) of a test, by its path relative to
    tests/ ("integration/pipeline/test_x.py") and its fixtures; None: any worker, test by test.

    - the local AWS's own tests (integration/localaws/): one group, so one LocalStack serves them all;
    - another integration module (a pipeline test module): a group of its own, so that modules run side by
      side on different workers (each with its LocalStack), while a module's tests share theirs;
    - a test of a shared server (the embedded PostgreSQL): one group, one server."""
    parts = path.split("/")
    if parts[0] == "integration":
        return "integration-localaws" if parts[1:2] == ["localaws"] else f"integration-{parts[-1]}"
    if any(name in SHARED_SERVER_FIXTURES for name in fixturenames):
        return "shared-postgres"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker (`gw0`, `gw1`, …) runs its local AWS on LOCALAWS_PORT (4566 when unset) + 1 + its
    number, so workers never share one; `sam build` output stays shared (LOCALAWS_SAM_BUILD_DIR: the build
    folder of the run's own port; tests/integration/pipeline/conftest.py builds it once per run)."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    if not worker:
        return
    from localaws import sam_app
    from localaws.stack import DEFAULT_PORT

    base = int(os.environ.get("LOCALAWS_PORT", DEFAULT_PORT))
    os.environ.setdefault("LOCALAWS_SAM_BUILD_DIR", str(sam_app.build_dir(f"http://127.0.0.1:{base}")))
    os.environ["LOCALAWS_PORT"] = str(base + 1 + int(worker.removeprefix("gw")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its `parallel_group` (only where pytest-xdist is installed: the mark is its own)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        try:
            path = item.path.resolve().relative_to(tests_dir).as_posix()
        except ValueError:
            continue
        group = parallel_group(path, tuple(getattr(item, "fixturenames", ())))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def warehouse_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="session")
def base_config(warehouse_dir: str, tmp_path_factory: pytest.TempPathFactory):
    from lakehouse.config import LakeConfig

    return LakeConfig(
        warehouse=warehouse_dir,
        staging_dir=str(tmp_path_factory.mktemp("staging")),
        shuffle_partitions=2,
    )


@pytest.fixture(scope="session")
def spark(base_config) -> Iterator:
    # LAKE_SPARK_MASTER=local-cluster[2,1,1024] (tests/unit/spark/test_multi_jvm.py): the executors are
    # other JVMs with their own memory, so the driver needs less.
    multi_jvm = os.environ.get("LAKE_SPARK_MASTER", "").startswith("local-cluster")
    os.environ.setdefault("LAKE_SPARK_DRIVER_MEMORY", "1g" if multi_jvm else "3g")
    from lakehouse.session import build_session

    session = build_session(base_config, "lakehouse-tests")
    yield session
    session.stop()


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
