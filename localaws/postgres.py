"""An embedded PostgreSQL 16 server for the local pipeline's source, from the `pgserver` wheel (no apt, no Docker).

It listens on a Unix socket only (its directory is the DMS endpoint's ServerName), trusts local connections,
and runs with `wal_level = logical`, which the local DMS's replication slot needs. As root, pgserver runs the
server as its own system user. Started by `make demo` and the pipeline tests; stopped when they end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.source_db import SourceDatabase

log = logging.getLogger(__name__)

DATABASE = "postgres"
USER = "postgres"
# One task slot, one reload slot at a time, and room for a second task (a test's second run).
SETTINGS = {"wal_level": "logical", "max_replication_slots": "16", "max_wal_senders": "16"}


@dataclass(frozen=True)
class ServerAddress:
    socket_dir: str
    port: int

    @property
    def uri(self) -> str:
        return f"postgresql://{USER}@/{DATABASE}?host={self.socket_dir}&port={self.port}"

    @property
    def source(self) -> SourceDatabase:
        return SourceDatabase.postgresql(self.uri)


class LocalPostgres:
    """`start()` (idempotent: a server already running on `data_dir` is reused), `stop()`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server: Any = None

    def start(self, tcp_port: int | None = None) -> ServerAddress:
        """With `tcp_port`, the server also listens on 127.0.0.1 at that port (JDBC drivers need TCP; the
        reconcile job's tests): a restart with its own options, the Unix socket staying in its directory."""
        import pgserver
        import psycopg

        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(self.data_dir, cleanup_mode=None)
        address = self.address()
        with psycopg.connect(address.uri, autocommit=True) as db:
            current = {}
            for name in SETTINGS:
                shown = db.execute(f"SHOW {name}").fetchone()
                assert shown is not None  # SHOW returns the setting's row
                current[name] = shown[0]
            stale = {name: value for name, value in SETTINGS.items() if current[name] != value}
            for name, value in stale.items():
                db.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        if stale:  # these settings take effect at a restart only
            self._pg_ctl("restart")
            address = self.address()
        if tcp_port is not None and address.port != tcp_port:
            # pgserver starts with `-h ""` (no TCP); a restart with -o replaces its options
            self._pg_ctl("restart", "-o", f"-h 127.0.0.1 -p {int(tcp_port)} -k {address.socket_dir}")
            address = self.address()
        log.info("PostgreSQL at %s (%.1fs)", address.socket_dir, time.monotonic() - started)
        return address

    def address(self) -> ServerAddress:
        from pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.data_dir)
        if info is None or info.socket_dir is None:
            raise RuntimeError(f"no PostgreSQL server runs on {self.data_dir}")
        return ServerAddress(str(info.socket_dir), info.port or 5432)

    def _pg_ctl(self, action: str, *options: str) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # made at import, one per binary

        user = self._server.system_user if self._server is not None else None
        if user is not None:
            # As root the server runs as its own user, which must traverse every folder above its data. pgserver
            # opened them at start, but a process may close one since: pytest makes /tmp/pytest-of-<user> 0700
            # each time one starts (an xdist worker, a nested run), and `pg_ctl stop` then cannot reach the data.
            from pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data_dir)
        pg_ctl(["-w", "-m", "fast", *options, action], pgdata=self.data_dir, user=user, timeout=60)

    def stop(self) -> None:
        """Stop the server if it runs (its data stays in `data_dir`)."""
        from pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.data_dir)
        if info is not None and info.is_running():
            if self._server is None:
                import pgserver

                self._server = pgserver.get_server(self.data_dir, cleanup_mode=None)
            self._pg_ctl("stop")
