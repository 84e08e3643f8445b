"""One SparkSession for the whole test run (starting one costs seconds); each test gets its own
clean-zone database in the shared warehouse, so tests never see each other's tables."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import replace

import pytest

_database_numbers = itertools.count(1)


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
