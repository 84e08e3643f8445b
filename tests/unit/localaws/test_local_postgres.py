"""The embedded PostgreSQL's lifecycle (localaws/postgres.py) where the machine works against it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from localaws.postgres import LocalPostgres


@pytest.mark.skipif(os.geteuid() != 0, reason="pgserver runs the server as its own user only under root")
def test_a_server_stops_after_a_folder_above_its_data_was_closed_to_other_users() -> None:
    """Given a server started under root (it runs as pgserver's own user), whose data sits in a folder that is
    then made 0700, as pytest does to /tmp/pytest-of-root whenever another pytest process starts,
    When it is stopped,
    Then the stop succeeds and the server no longer accepts connections (before the fix: pg_ctl could not
    reach its data, `Permission denied`, and the session's teardown failed)."""
    parent = Path(tempfile.mkdtemp(prefix="pg-closed-"))
    server = LocalPostgres(parent / "nested" / "data")
    address = server.start()
    parent.chmod(0o700)

    try:
        server.stop()

        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(address.uri, connect_timeout=3).close()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
