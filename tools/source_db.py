"""The source database of the demo and the tests: a PostgreSQL server (the default) or an SQLite file.

One small DB-API facade over both, so the generator, the workload and the verifier write their SQL once:
`?` placeholders (turned into `%s` for psycopg), explicit transactions, and the few catalog questions they ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

SQLITE_SCHEMA = "main"
POSTGRES_SCHEMA = "public"


@dataclass(frozen=True)
class SourceDatabase:
    """Where the source is: `dialect` `sqlite` (`location` = the file) or `postgresql` (`location` = a libpq
    connection URI, e.g. `postgresql://postgres@/postgres?host=/tmp/pg`)."""

    dialect: str
    location: str

    @classmethod
    def sqlite(cls, path: str | Path) -> SourceDatabase:
        return cls("sqlite", str(Path(path).resolve()))

    @classmethod
    def postgresql(cls, uri: str) -> SourceDatabase:
        return cls("postgresql", uri)

    @classmethod
    def mysql(cls, uri: str) -> SourceDatabase:
        """`mysql://user[:password]@host[:port]/database[?unix_socket=/path]`: a MySQL or MariaDB server."""
        return cls("mysql", uri)

    @classmethod
    def of(cls, source: SourceDatabase | str | Path) -> SourceDatabase:
        """A `SourceDatabase` as is; a path or a plain file name as an SQLite file; a postgresql:// URI."""
        if isinstance(source, SourceDatabase):
            return source
        text = str(source)
        if text.startswith(("postgresql://", "postgres://")):
            return cls.postgresql(text)
        if text.startswith(("mysql://", "mariadb://")):
            return cls.mysql(text)
        return cls.sqlite(text)

    @property
    def schema(self) -> str:
        """The schema the tables live in (the DMS files' schema folder)."""
        if self.dialect == "mysql":  # MySQL's schema is its database
            return self._mysql_parts()["database"]
        return SQLITE_SCHEMA if self.dialect == "sqlite" else POSTGRES_SCHEMA

    def _mysql_parts(self) -> dict[str, Any]:
        from urllib.parse import parse_qs, unquote, urlsplit

        parts = urlsplit(self.location)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        return {
            "user": unquote(parts.username or "root"),
            "password": unquote(parts.password or ""),
            "host": parts.hostname or "localhost",
            "port": parts.port or 3306,
            "database": parts.path.lstrip("/"),
            "unix_socket": query.get("unix_socket"),
        }

    @property
    def sqlalchemy_url(self) -> str:
        if self.dialect == "sqlite":
            return f"sqlite:///{self.location}"
        if self.dialect == "mysql":
            return "mysql+pymysql://" + self.location.split("://", 1)[1]
        return "postgresql+psycopg://" + self.location.split("://", 1)[1]

    def connect(self) -> SourceConnection:
        if self.dialect == "sqlite":
            import sqlite3

            return SourceConnection(self, sqlite3.connect(self.location, isolation_level=None, timeout=120))
        if self.dialect == "mysql":
            return SourceConnection(self, _MysqlConnection(self._mysql_parts()))
        import psycopg
        from psycopg.types.string import TextLoader

        connection = psycopg.connect(self.location, autocommit=True)
        connection.execute("SET TimeZone = 'UTC'")
        # JSON and arrays as PostgreSQL's text, which is what DMS writes for them (NCLOB), not parsed.
        for (oid,) in connection.execute(
            "SELECT oid FROM pg_type WHERE typcategory = 'A' OR typname IN ('json', 'jsonb')"
        ).fetchall():
            connection.adapters.register_loader(oid, TextLoader)
        return SourceConnection(self, connection)

    def __str__(self) -> str:
        return self.location


def _sqlite_value(value: Any) -> Any:
    """How values are stored in SQLite: decimals as text (exact; NUMERIC affinity keeps them numbers),
    dates and timestamps as ISO text."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    return value


class _MysqlConnection:
    """pymysql with psycopg's `execute` (returning the cursor), in UTC, with ANSI quotes (`"name"`), so the
    facade's SQL is the same as PostgreSQL's."""

    def __init__(self, parts: dict[str, Any]) -> None:
        import pymysql

        options = {"user": parts["user"], "password": parts["password"], "database": parts["database"]}
        where = {"unix_socket": parts["unix_socket"]} if parts["unix_socket"] else {}
        where = where or {"host": parts["host"], "port": parts["port"]}
        self.connection = pymysql.connect(**options, **where, autocommit=True, charset="utf8mb4")
        self.execute("SET time_zone = '+00:00'")
        self.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')")

    def execute(self, statement: str, parameters: Sequence[Any] | None = None) -> Any:
        cursor = self.connection.cursor()
        cursor.execute(statement, parameters)
        return cursor

    def cursor(self) -> Any:
        return self.connection.cursor()

    def close(self) -> None:
        self.connection.close()


class SourceConnection:
    """A connection in autocommit mode; `transaction()` brackets a unit of work."""

    def __init__(self, source: SourceDatabase, connection: Any) -> None:
        self.source = source
        self.raw = connection
        # a server (PostgreSQL, or MySQL through `_MysqlConnection`): `%s` placeholders, values as they are
        self.postgres = self.server = source.dialect in ("postgresql", "mysql")

    def __enter__(self) -> SourceConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.raw.close()

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.postgres else statement

    def value(self, value: Any) -> Any:
        """A Python value as this database takes it as a parameter."""
        return value if self.postgres else _sqlite_value(value)

    def execute(self, statement: str, parameters: Sequence[Any] = ()) -> Any:
        values = tuple(self.value(v) for v in parameters)
        if self.postgres:
            return self.raw.execute(self._sql(statement), values or None)
        return self.raw.execute(statement, values)

    def executemany(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = [tuple(self.value(v) for v in row) for row in rows]
        if self.postgres:
            with self.raw.cursor() as cursor:
                cursor.executemany(self._sql(statement), batch)
        else:
            self.raw.executemany(statement, batch)

    def begin(self) -> None:
        # SQLite: IMMEDIATE takes the write lock first, so a concurrent writer (a mid-stream ALTER TABLE)
        # makes this wait instead of failing at the upgrade from a read lock ("database is locked").
        self.raw.execute("BEGIN" if self.postgres else "BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        self.raw.execute("ROLLBACK")

    def columns(self, table: str) -> list[str]:
        if self.postgres:
            rows = self.raw.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
                " ORDER BY ordinal_position",
                (self.source.schema, table),
            ).fetchall()
            return [name for (name,) in rows]
        return [row[1] for row in self.raw.execute(f'PRAGMA table_info("{table}")')]

    def drop_table(self, table: str) -> None:
        self.raw.execute(f'DROP TABLE IF EXISTS "{table}"' + (" CASCADE" if self.postgres else ""))
