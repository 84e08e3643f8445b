"""A local MariaDB server for the pipeline's MySQL source, from Debian's `mariadb-server` (`make mariadb`).

It runs unprivileged in a directory of its own (as the `mysql` system user when started by root), listens on a
Unix socket in that directory and on 127.0.0.1 at the port given, and writes the binary log as AWS DMS needs it
on a MySQL source: `binlog_format=ROW`, `binlog_row_image=FULL`, a `server_id`, and `binlog_row_metadata=FULL`
(column names, signedness and ENUM/SET values in every table map, so a row event is decoded with the columns it
was written with, even after a later ALTER TABLE). Its time zone is UTC, its character set utf8mb4. Started by `make demo SOURCE=mysql`
and the MySQL tests; stopped when they end.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

USER = "root"
DATABASE = "mysql"
SERVER_ID = 1
BINLOG_BASENAME = "binlog"
MARIADBD = ("/usr/sbin/mariadbd", "/usr/sbin/mysqld")
INSTALL_DB = ("/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db")


class MariaDbNotInstalledError(RuntimeError):
    """Debian's mariadb-server is not installed: `make mariadb` installs it."""


@dataclass(frozen=True)
class MariaDbAddress:
    socket: str
    port: int
    user: str = USER

    def connect_kwargs(self, database: str | None = None) -> dict[str, object]:
        """pymysql.connect(**…) over the Unix socket."""
        kwargs: dict[str, object] = {
            "unix_socket": self.socket,
            "user": self.user,
            "autocommit": True,
            "charset": "utf8mb4",
        }
        if database:
            kwargs["database"] = database
        return kwargs


def _first(paths: tuple[str, ...]) -> str:
    for path in paths:
        if os.access(path, os.X_OK):
            return path
    raise MariaDbNotInstalledError(f"none of {paths} found: run `make mariadb` (Debian's mariadb-server)")


def installed() -> bool:
    try:
        _first(MARIADBD)
        _first(INSTALL_DB)
    except MariaDbNotInstalledError:
        return False
    return True


class LocalMariaDb:
    """`start(port)` (a server already running on `base_dir` is reused), `stop()`."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir.resolve()
        self.data_dir = self.base_dir / "data"
        self.socket = self.base_dir / "mariadb.sock"
        self.pid_file = self.base_dir / "mariadb.pid"
        self._process: subprocess.Popen[bytes] | None = None

    def _run_as(self) -> list[str]:
        return ["--user=mysql"] if os.geteuid() == 0 else []

    def _own(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.base_dir, "mysql", "mysql")
            for root, dirs, files in os.walk(self.base_dir):
                for name in dirs + files:
                    shutil.chown(os.path.join(root, name), "mysql", "mysql")

    def start(self, port: int) -> MariaDbAddress:
        """Install the data directory the first time, start the server, wait until it answers."""
        started = time.monotonic()
        address = MariaDbAddress(str(self.socket), port)
        if self.running():
            return address
        mariadbd = _first(MARIADBD)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if not (self.data_dir / "mysql").is_dir():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._own()
            subprocess.run(
                [
                    _first(INSTALL_DB),
                    "--no-defaults",
                    f"--datadir={self.data_dir}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    *self._run_as(),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
        self._own()
        self._process = subprocess.Popen(
            [
                mariadbd,
                "--no-defaults",
                *self._run_as(),
                f"--datadir={self.data_dir}",
                f"--socket={self.socket}",
                f"--pid-file={self.pid_file}",
                f"--port={int(port)}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                f"--log-bin={self.data_dir / BINLOG_BASENAME}",
                f"--server-id={SERVER_ID}",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
                "--default-time-zone=+00:00",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
                "--lower-case-table-names=0",  # table names case-sensitive, as on Linux
                "--innodb-buffer-pool-size=64M",
                "--performance-schema=OFF",
                "--max-connections=100",
                f"--log-error={self.base_dir / 'error.log'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_until_up(address)
        self._grant_tcp_root(address)
        log.info("MariaDB at %s, port %d (%.1fs)", self.socket, port, time.monotonic() - started)
        return address

    def _wait_until_up(self, address: MariaDbAddress, timeout: float = 60.0) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        while True:
            try:
                pymysql.connect(**address.connect_kwargs()).close()
                return
            except pymysql.err.OperationalError as error:
                if self._process is not None and self._process.poll() is not None:
                    raise RuntimeError(f"MariaDB exited: see {self.base_dir / 'error.log'}") from error
                if time.monotonic() > deadline:
                    raise RuntimeError(f"MariaDB did not answer in {timeout:.0f}s: {error}") from error
                time.sleep(0.2)

    def _grant_tcp_root(self, address: MariaDbAddress) -> None:
        """root without a password over 127.0.0.1 too (JDBC and the DMS endpoint's ServerName/Port)."""
        import pymysql

        with pymysql.connect(**address.connect_kwargs()) as db, db.cursor() as cursor:
            cursor.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
            cursor.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")

    def running(self) -> bool:
        pid = self._pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return self.socket.exists()

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the server if it runs (its data stays in `base_dir`)."""
        pid = self._pid()
        if pid is None or not self.running():
            return
        os.kill(pid, 15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if self._process is not None and self._process.poll() is not None:
                break
            time.sleep(0.1)
        if self._process is not None:
            self._process.wait(timeout=5)
