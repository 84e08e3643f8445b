"""The demo source's change workload: business operations (orders, price changes, returns, moves…) run
on the source database one transaction each, and the row changes they made, in commit order."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from tools.sample_data.rows import CATEGORIES, CLOCK_START, LAST_NAMES, STATES, RowGenerator, date_sk, money
from tools.sample_data.schema import PRIMARY_KEYS, TABLES, Source
from tools.source_db import SourceConnection, SourceDatabase


@dataclass(frozen=True)
class RowChange:
    """One source row change as DMS captures it: I/U carry the new row, D the deleted row."""

    table: str
    op: str
    values: tuple[Any, ...]
    commit_time: datetime


@dataclass
class WorkloadResult:
    """What `run_workload` did: business operations by kind, row changes by table and op, and the
    row changes themselves in commit order."""

    operations: Counter = field(default_factory=Counter)
    rows: Counter = field(default_factory=Counter)
    changes: list[RowChange] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "operations": dict(sorted(self.operations.items())),
            "row_changes": {f"{t}.{op}": n for (t, op), n in sorted(self.rows.items())},
            "total_row_changes": len(self.changes),
        }


class _Workload:
    """Business operations as a shop's systems would run them, each in its own transaction."""

    def __init__(
        self, db: SourceConnection, gen: RowGenerator, result: WorkloadResult, clock: datetime
    ) -> None:
        self.db = db
        self.gen = gen
        self.result = result
        self.clock = clock
        self.columns = {t: db.columns(t) for t in TABLES}

    def tick(self) -> datetime:
        self.clock += timedelta(milliseconds=self.gen.random.randint(5, 900))
        return self.clock

    def _row(self, table: str, key: Sequence[Any]) -> tuple[Any, ...] | None:
        where = " AND ".join(f"{k} = ?" for k in PRIMARY_KEYS[table])
        return self.db.execute(f"SELECT * FROM {table} WHERE {where}", tuple(key)).fetchone()

    def _existing_row(self, table: str, key: Sequence[Any]) -> tuple[Any, ...]:
        """The row of a key the workload knows is there (it just wrote or read it)."""
        row = self._row(table, key)
        assert row is not None, f"{table} {tuple(key)}: the row is gone"
        return row

    def _record(self, table: str, op: str, row: tuple[Any, ...]) -> None:
        self.result.changes.append(RowChange(table, op, tuple(row), self.clock))
        self.result.rows[(table, op)] += 1

    def insert(self, table: str, row: Sequence[Any]) -> None:
        columns = self.columns[table]
        names = ", ".join(columns[: len(row)])  # a column added on the source since stays NULL
        self.db.execute(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", tuple(row))
        self._record(
            table, "I", self._existing_row(table, [row[columns.index(k)] for k in PRIMARY_KEYS[table]])
        )

    def update(self, table: str, key: Sequence[Any], **changes: Any) -> None:
        assignments = ", ".join(f"{c} = ?" for c in changes)
        where = " AND ".join(f"{k} = ?" for k in PRIMARY_KEYS[table])
        self.db.execute(f"UPDATE {table} SET {assignments} WHERE {where}", (*changes.values(), *key))
        row = self._row(table, key)
        if row is not None:
            self._record(table, "U", row)

    def delete(self, table: str, key: Sequence[Any]) -> None:
        row = self._row(table, key)
        if row is None:
            return
        where = " AND ".join(f"{k} = ?" for k in PRIMARY_KEYS[table])
        self.db.execute(f"DELETE FROM {table} WHERE {where}", tuple(key))
        self._record(table, "D", row)

    def random_key(self, table: str) -> tuple[Any, ...] | None:
        """An existing row's key: SQLite by rowid, uniformly; PostgreSQL, which has no dense row number, the
        first key at or after a random value of the leading key column."""
        keys = ", ".join(PRIMARY_KEYS[table])
        if self.db.postgres:
            lead = PRIMARY_KEYS[table][0]
            low, high = self.db.execute(f"SELECT min({lead}), max({lead}) FROM {table}").fetchone()
            if low is None:
                return None
            row = self.db.execute(
                f"SELECT {keys} FROM {table} WHERE {lead} >= ? ORDER BY {keys} LIMIT 1",
                (self.gen.random.randint(low, high),),
            ).fetchone()
            return tuple(row) if row else None
        top = self.db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
        if not top:
            return None
        for _ in range(20):
            row = self.db.execute(
                f"SELECT {keys} FROM {table} WHERE rowid >= ? LIMIT 1", (self.gen.random.randint(1, top),)
            ).fetchone()
            if row:
                return tuple(row)
        return None

    def next_key(self, table: str, column: str) -> int:
        return (self.db.execute(f"SELECT max({column}) FROM {table}").fetchone()[0] or 0) + 1

    # --- operations -----------------------------------------------------------------------------

    def new_order(self) -> None:
        """An order of 1 to 6 lines; one in ten comes from a new customer with a new address."""
        r = self.gen.random
        customer = self.random_key("customer")
        if customer is None or r.random() < 0.1:
            address_sk = self.next_key("customer_address", "ca_address_sk")
            self.insert("customer_address", self.gen.address(address_sk))
            customer_sk = self.next_key("customer", "c_customer_sk")
            row = list(self.gen.customer(customer_sk, address_sk, self.clock))
            row[2] = address_sk
            self.insert("customer", row)
            customer = (customer_sk,)
        address = self.db.execute(
            "SELECT c_current_addr_sk FROM customer WHERE c_customer_sk = ?", customer
        ).fetchone()[0]
        order = self.next_key("web_sales", "ws_order_number")
        day = self.clock.date() if r.random() < 0.5 else self.gen.sold_day()
        minute = self.clock.hour * 3600 + self.clock.minute * 60
        seen: set[int] = set()
        for _ in range(r.randint(1, 6)):
            key = self.random_key("item")
            if key is None or key[0] in seen:
                continue
            seen.add(key[0])
            item = self._existing_row("item", key)
            if item[4] is None or item[5] is None:
                continue
            self.insert("web_sales", self.gen.sale_line(item, order, day, minute, customer[0], address))

    def price_update(self) -> None:
        """A new list price for an item (a dimension update); sometimes an order line is repriced too."""
        r = self.gen.random
        key = self.random_key("item")
        if key is None:
            return
        item = self._existing_row("item", key)
        price = money(float(item[4] or 10) * r.uniform(0.8, 1.25))
        self.update("item", key, i_current_price=price)
        line = self.random_key("web_sales")
        if line and r.random() < 0.5:
            row = self._existing_row("web_sales", line)
            sales_price = money(float(row[10]) * 0.9)
            quantity = row[7]
            ext_sales = sales_price * quantity
            net_paid = ext_sales - Decimal(str(row[16]))
            tax = Decimal(str(row[15]))
            self.update(
                "web_sales",
                line,
                ws_sales_price=sales_price,
                ws_ext_sales_price=ext_sales,
                ws_ext_discount_amt=Decimal(str(row[14])) - ext_sales,
                ws_net_paid=net_paid,
                ws_net_paid_inc_tax=net_paid + tax,
                ws_net_profit=net_paid - Decimal(str(row[13])),
            )

    def item_reclassified(self) -> None:
        """Merchandising moves an item to another category (changes every sale's category)."""
        key = self.random_key("item")
        if key is None:
            return
        category = self.gen.random.choice(list(CATEGORIES))
        self.update("item", key, i_category=category, i_class=self.gen.random.choice(CATEGORIES[category]))

    def order_returned(self) -> None:
        """A return removes the order's lines (modelled as deletes, like a cancelled order)."""
        line = self.random_key("web_sales")
        if line is None:
            return
        lines = self.db.execute(
            "SELECT ws_item_sk, ws_order_number FROM web_sales WHERE ws_order_number = ?", (line[1],)
        ).fetchall()
        if self.gen.random.random() < 0.5:
            lines = [line]  # a partial return: one line
        for key in lines:
            self.delete("web_sales", key)

    def customer_moved(self) -> None:
        """A customer moves: a new address row and a new current address (or an edit of the old one)."""
        r = self.gen.random
        key = self.random_key("customer")
        if key is None:
            return
        if r.random() < 0.6:
            address_sk = self.next_key("customer_address", "ca_address_sk")
            self.insert("customer_address", self.gen.address(address_sk))
            self.update("customer", key, c_current_addr_sk=address_sk, c_last_update=self.clock)
        else:
            current = self._existing_row("customer", key)[2]
            if current is None:
                return
            state, _, cities, _ = r.choices(STATES, weights=[s[1] for s in STATES])[0]
            self.update("customer_address", (current,), ca_state=state, ca_city=r.choice(cities))

    def customer_profile_edit(self) -> None:
        """A customer edits their profile (names with commas and quotes, an email removed)."""
        r = self.gen.random
        key = self.random_key("customer")
        if key is None:
            return
        self.update(
            "customer",
            key,
            c_last_name=r.choice(LAST_NAMES),
            c_email_address=None if r.random() < 0.3 else f"new.{key[0]}@example.com",
            c_last_update=self.clock,
        )

    def dimension_deleted(self) -> None:
        """Rare: an item is purged from the catalogue, or a customer is erased (right to be forgotten),
        while their sales remain."""
        r = self.gen.random
        table = "item" if r.random() < 0.5 else "customer"
        key = self.random_key(table)
        if key is not None:
            self.delete(table, key)

    def holiday_fixed(self) -> None:
        """Reference data fix: a day's holiday flag flips."""
        day = date_sk(self.gen.sold_day())
        row = self._row("date_dim", (day,))
        if row is not None:
            self.update("date_dim", (day,), d_holiday="N" if row[9] == "Y" else "Y")


# Every operation touches tables with a primary key, never a key column, and never truncates: AWS DMS drops
# TRUNCATE and the UPDATEs and DELETEs of a table without a primary key from PostgreSQL (and so does the local
# DMS, unless LOCALAWS_DMS_LENIENT=1), so such an operation would leave the lake different from the source
# until a reload; a key update would reach the lake (DMS writes it to S3) but is not part of this workload.
DEFAULT_MIX: dict[str, float] = {
    "new_order": 0.42,
    "price_update": 0.14,
    "order_returned": 0.14,
    "customer_moved": 0.1,
    "customer_profile_edit": 0.07,
    "item_reclassified": 0.06,
    "dimension_deleted": 0.04,
    "holiday_fixed": 0.03,
}


SOURCE_LOCK_TIMEOUT_SECONDS = 120


def run_workload(
    source: Source,
    changes: int,
    seed: int,
    mix: dict[str, float] | None = None,
    start: datetime | None = None,
) -> WorkloadResult:
    """Run `changes` business operations (one transaction each) drawn from `mix` (operation →
    weight; default `DEFAULT_MIX`) on the database at `path`. Returns what was done, including every
    row change in commit order (for `write_cdc_files`). Deterministic for a given database and seed."""
    weights = mix or DEFAULT_MIX
    unknown = set(weights) - set(DEFAULT_MIX)
    if unknown:
        raise ValueError(f"unknown operations {sorted(unknown)}; known: {sorted(DEFAULT_MIX)}")
    gen = RowGenerator(seed)
    result = WorkloadResult()
    # SQLite: a replicating reader (the local DMS) takes the write lock briefly; on a loaded machine
    # "briefly" can exceed sqlite's 5 s default, and the workload must wait, not fail (the facade's timeout).
    db = SourceDatabase.of(source).connect()
    try:
        clock = start or _latest_update(db) + timedelta(minutes=1)
        work = _Workload(db, gen, result, clock)
        names = list(weights)
        for _ in range(changes):
            operation = gen.random.choices(names, weights=[weights[n] for n in names])[0]
            db.begin()
            try:
                work.tick()
                getattr(work, operation)()
                db.commit()
            except BaseException:
                db.rollback()
                raise
            result.operations[operation] += 1
    finally:
        db.close()
    return result


def _latest_update(db: SourceConnection) -> datetime:
    latest = db.execute("SELECT max(c_last_update) FROM customer").fetchone()[0]
    if not latest:
        return CLOCK_START
    return max(CLOCK_START, latest if isinstance(latest, datetime) else datetime.fromisoformat(latest))
