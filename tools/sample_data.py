"""A deterministic TPC-DS-like source database (PostgreSQL or SQLite, no Spark) and a realistic change workload.

    python -m tools.sample_data --db var/source.db --scale 1 --seed 42
    python -m tools.sample_data --db postgresql://postgres@/postgres?host=/tmp/pg --workload 500 --seed 7

Tables (schema `public` in PostgreSQL, `main` in SQLite; the TPC-DS web channel subset): `web_sales` (primary key ws_item_sk +
ws_order_number, like TPC-DS), `customer`, `customer_address`, `item`, `date_dim`, `time_dim`.
Types are declared as a real source would (`DECIMAL(7,2)`, `VARCHAR(50)`, `DATE`, `TIMESTAMP`), so
schema reflection (`tools.schema_gen`) yields the right Iceberg types. Values are realistic: skewed
item popularity, a seasonal sales curve, TPC-DS price arithmetic, nullable columns with realistic null
rates, and unicode names holding commas, quotes and newlines (they exercise the DMS CSV format).

Scale 1 is about 20,000 web_sales rows (the demo, a few minutes on 2 cores); larger scales grow every
table but `date_dim` and `time_dim` linearly. The same `seed` and `scale` give byte-identical data.

The database stays plain: the local DMS reads PostgreSQL through a replication slot and adds its own capture
triggers to SQLite. For
tests and benchmarks without the emulator, `run_workload` also returns the row changes it made, and
`write_full_load_files` / `write_cdc_files` render them as DMS files.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from lakehouse.base.dms_files import CsvFormat, cdc_file_name, change_seq, load_file_name, write_dms_csv

from tools.source_db import SourceConnection, SourceDatabase

Source = SourceDatabase | str | Path  # a SourceDatabase, or the path of an SQLite file

SOURCE_SCHEMA = "main"
FIRST_SALES_DAY = date(2024, 1, 1)
SALES_DAYS = 731  # 2024-01-01 … 2025-12-31
DATE_DIM_FIRST = date(2023, 1, 1)
DATE_DIM_DAYS = 1461 + 365  # 2023 … 2027: room for ship dates and new orders
JULIAN_OFFSET = 1721425  # TPC-DS d_date_sk is the Julian day number: date.toordinal() + this
CLOCK_START = datetime(2026, 1, 1, 8, 0, 0)
CENT = Decimal("0.01")

# Declared like a source catalog does; reflection maps them (decimal(7,2) → decimal(7,2), …).
DDL: dict[str, str] = {
    "date_dim": """CREATE TABLE date_dim (
        d_date_sk INTEGER NOT NULL PRIMARY KEY,
        d_date_id CHAR(16) NOT NULL,
        d_date DATE NOT NULL,
        d_year INTEGER NOT NULL,
        d_moy INTEGER NOT NULL,
        d_dom INTEGER NOT NULL,
        d_qoy INTEGER NOT NULL,
        d_day_name VARCHAR(9) NOT NULL,
        d_weekend CHAR(1) NOT NULL,
        d_holiday CHAR(1) NOT NULL)""",
    "time_dim": """CREATE TABLE time_dim (
        t_time_sk INTEGER NOT NULL PRIMARY KEY,
        t_time_id CHAR(16) NOT NULL,
        t_time INTEGER NOT NULL,
        t_hour INTEGER NOT NULL,
        t_minute INTEGER NOT NULL,
        t_am_pm CHAR(2) NOT NULL,
        t_shift VARCHAR(20) NOT NULL,
        t_meal_time VARCHAR(20))""",
    "customer_address": """CREATE TABLE customer_address (
        ca_address_sk INTEGER NOT NULL PRIMARY KEY,
        ca_address_id CHAR(16) NOT NULL,
        ca_street_number VARCHAR(10),
        ca_street_name VARCHAR(60),
        ca_suite_number VARCHAR(10),
        ca_city VARCHAR(60),
        ca_county VARCHAR(30),
        ca_state CHAR(2),
        ca_zip CHAR(10),
        ca_country VARCHAR(20),
        ca_gmt_offset DECIMAL(5,2))""",
    "customer": """CREATE TABLE customer (
        c_customer_sk INTEGER NOT NULL PRIMARY KEY,
        c_customer_id CHAR(16) NOT NULL,
        c_current_addr_sk INTEGER,
        c_first_name VARCHAR(40),
        c_last_name VARCHAR(60),
        c_preferred_cust_flag CHAR(1),
        c_birth_date DATE,
        c_email_address VARCHAR(80),
        c_last_update TIMESTAMP NOT NULL)""",
    "item": """CREATE TABLE item (
        i_item_sk INTEGER NOT NULL PRIMARY KEY,
        i_item_id CHAR(16) NOT NULL,
        i_rec_start_date DATE,
        i_item_desc VARCHAR(200),
        i_current_price DECIMAL(7,2),
        i_wholesale_cost DECIMAL(7,2),
        i_brand VARCHAR(50),
        i_class VARCHAR(50),
        i_category VARCHAR(50),
        i_color VARCHAR(20),
        i_product_name VARCHAR(50))""",
    "web_sales": """CREATE TABLE web_sales (
        ws_item_sk INTEGER NOT NULL,
        ws_order_number INTEGER NOT NULL,
        ws_sold_date_sk INTEGER,
        ws_sold_time_sk INTEGER,
        ws_ship_date_sk INTEGER,
        ws_bill_customer_sk INTEGER,
        ws_ship_addr_sk INTEGER,
        ws_quantity INTEGER,
        ws_wholesale_cost DECIMAL(7,2),
        ws_list_price DECIMAL(7,2),
        ws_sales_price DECIMAL(7,2),
        ws_ext_discount_amt DECIMAL(7,2),
        ws_ext_sales_price DECIMAL(7,2),
        ws_ext_wholesale_cost DECIMAL(7,2),
        ws_ext_list_price DECIMAL(7,2),
        ws_ext_tax DECIMAL(7,2),
        ws_coupon_amt DECIMAL(7,2),
        ws_net_paid DECIMAL(7,2),
        ws_net_paid_inc_tax DECIMAL(7,2),
        ws_net_profit DECIMAL(7,2),
        PRIMARY KEY (ws_item_sk, ws_order_number))""",
}
TABLES = tuple(DDL)
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "date_dim": ("d_date_sk",),
    "time_dim": ("t_time_sk",),
    "customer_address": ("ca_address_sk",),
    "customer": ("c_customer_sk",),
    "item": ("i_item_sk",),
    "web_sales": ("ws_item_sk", "ws_order_number"),
}

FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Carlos", "Maria",
    "José", "Zoë", "François", "Søren", "Łukasz", "Nguyễn", "美咲", "Ana María", "Renée", "Björn",
    'Robert "Bob"', "Jean-Luc", "Dag", "Siobhán", "Ngozi", "Aarav", "Олег", "Fatima", "Yuki", "Chloé",
)  # fmt: skip
LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Lee",
    "O'Brien", "Smith, Jr.", "Müller", "Ødegård", "Çelik", "García Márquez", "佐藤", "Nakamura",
    "D'Angelo", "van der Berg", "Kowalski", "Иванов", "Dubois", "Okafor", "Patel", "Haddad",
)  # fmt: skip
STREETS = (
    "Main", "Oak", "Pine", "Maple", "Cedar", "Elm", "Washington", "Lake", "Hill", "Park", "Sunset",
    "Railroad", "Jackson", "Church", "Spring", "Ridge", "Highland", "Forest", "River", "Mill",
)  # fmt: skip
STREET_TYPES = ("St", "Ave", "Blvd", "Ln", "Dr", "Ct", "Way", "Pkwy", "Rd", "Cir")
# (state, weight, cities, counties, gmt offset): a skew like TPC-DS's population-weighted states.
STATES: tuple[tuple[str, int, tuple[str, ...], float], ...] = (
    ("TX", 12, ("Austin", "Dallas", "El Paso", "Plano"), -6.0),
    ("CA", 12, ("Fresno", "San José", "Oakland", "Riverside"), -8.0),
    ("GA", 8, ("Atlanta", "Macon", "Savannah"), -5.0),
    ("VA", 7, ("Richmond", "Norfolk", "Arlington"), -5.0),
    ("KY", 6, ("Louisville", "Lexington"), -5.0),
    ("MO", 6, ("Springfield", "St. Louis", "Kansas City"), -6.0),
    ("IL", 6, ("Chicago", "Springfield", "Peoria"), -6.0),
    ("OH", 6, ("Columbus", "Dayton", "Toledo"), -5.0),
    ("NY", 6, ("Albany", "Buffalo", "Rochester"), -5.0),
    ("NC", 5, ("Charlotte", "Raleigh", "Durham"), -5.0),
    ("IN", 5, ("Indianapolis", "Fort Wayne"), -5.0),
    ("MI", 5, ("Detroit", "Lansing", "Ann Arbor"), -5.0),
    ("WA", 4, ("Seattle", "Spokane", "Tacoma"), -8.0),
    ("WI", 4, ("Madison", "Milwaukee"), -6.0),
    ("OR", 3, ("Portland", "Salem", "Eugene"), -8.0),
    ("CO", 3, ("Denver", "Boulder"), -7.0),
    ("NM", 2, ("Santa Fe", "Albuquerque"), -7.0),
    ("VT", 1, ("Burlington", "Montpelier"), -5.0),
    ("AK", 1, ("Anchorage", "Juneau"), -9.0),
    ("HI", 1, ("Honolulu", "Hilo"), -10.0),
)
COUNTIES = ("Williamson County", "Walker County", "Ziebach County", "Franklin Parish", "Barrow County")
# category → classes (the TPC-DS item hierarchy, abridged)
CATEGORIES: dict[str, tuple[str, ...]] = {
    "Books": ("arts", "business", "computers", "fiction", "history", "romance"),
    "Children": ("infants", "newborn", "school-uniforms", "toddlers"),
    "Electronics": ("audio", "cameras", "computers", "monitors", "televisions", "wireless"),
    "Home": ("bathroom", "bedding", "decor", "furniture", "kids", "tables"),
    "Jewelry": ("bracelets", "diamonds", "estate", "gold", "rings"),
    "Men": ("accessories", "pants", "shirts", "sports-apparel"),
    "Music": ("classical", "country", "pop", "rock"),
    "Shoes": ("athletic", "kids", "mens", "womens"),
    "Sports": ("archery", "baseball", "camping", "fishing", "golf", "tennis"),
    "Women": ("dresses", "fragrances", "maternity", "swimwear"),
}
BRAND_WORDS = (
    "amalg",
    "edu pack",
    "exporti",
    "importo",
    "scholar",
    "corp",
    "univ",
    "brand",
    "maxi",
    "nameless",
)
COLORS = ("red", "navy", "olive", "white", "black", "peach", "ivory", "lime", "plum", "tan", "sienna")
SYLLABLES = ("able", "anti", "bar", "cally", "eing", "ese", "ought", "n st", "pri", "ation")
MEAL_TIMES = {7: "breakfast", 8: "breakfast", 12: "lunch", 13: "lunch", 18: "dinner", 19: "dinner"}
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
HOLIDAYS = {(1, 1), (7, 4), (11, 28), (12, 25), (12, 31), (5, 27), (9, 2)}


@dataclass(frozen=True)
class Sizes:
    """Row counts at a scale factor."""

    customers: int
    addresses: int
    items: int
    orders: int

    @classmethod
    def at(cls, scale: float) -> Sizes:
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        customers = max(40, round(2000 * scale))
        return cls(
            customers=customers,
            addresses=max(30, round(customers * 0.75)),
            items=max(30, round(600 * scale)),
            orders=max(20, round(5250 * scale)),  # ≈ 3.8 lines per order → ≈ 20k web_sales at scale 1
        )


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


def _money(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def _business_id(number: int) -> str:
    """A 16-character TPC-DS business key (`AAAAAAAABAAAAAAA` style)."""
    letters = []
    n = number
    for _ in range(8):
        letters.append("ABCDEFGHIJKLMNOP"[n % 16])
        n //= 16
    return "AAAAAAAA" + "".join(letters)


def date_sk(day: date) -> int:
    return day.toordinal() + JULIAN_OFFSET


def sk_date(sk: int) -> date:
    return date.fromordinal(sk - JULIAN_OFFSET)


class _Generator:
    """Draws rows from one seeded random stream, so a (seed, scale) pair always gives the same data."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def maybe_null(self, value: Any, rate: float) -> Any:
        return None if self.random.random() < rate else value

    def name(self, pool: Sequence[str]) -> str:
        # Zipf-like: common names are common
        index = min(int(self.random.paretovariate(1.2)) - 1, len(pool) - 1)
        return pool[index] if self.random.random() < 0.7 else self.random.choice(pool)

    def address(self, sk: int) -> tuple[Any, ...]:
        r = self.random
        state, _, cities, offset = r.choices(STATES, weights=[s[1] for s in STATES])[0]
        street = f"{r.choice(STREETS)} {r.choice(STREET_TYPES)}"
        if r.random() < 0.01:
            street = f"{street}\nBuilding {r.randint(1, 9)}"  # a two-line address (newline in CSV)
        return (
            sk,
            _business_id(sk),
            self.maybe_null(str(r.randint(1, 999)), 0.01),
            self.maybe_null(street, 0.01),
            self.maybe_null(f"Suite {r.randint(1, 50) * 10}", 0.5),
            self.maybe_null(r.choice(cities), 0.01),
            self.maybe_null(r.choice(COUNTIES), 0.02),
            self.maybe_null(state, 0.01),
            self.maybe_null(f"{r.randint(10000, 99999)}", 0.01),
            "United States",
            _money(offset),
        )

    def customer(self, sk: int, address_count: int, clock: datetime) -> tuple[Any, ...]:
        r = self.random
        first, last = self.name(FIRST_NAMES), self.name(LAST_NAMES)
        email_user = "".join(
            ch for ch in f"{first}.{last}".lower() if (ch.isascii() and ch.isalnum()) or ch == "."
        )
        birth = date(1930, 1, 1) + timedelta(days=r.randint(0, 365 * 75))
        return (
            sk,
            _business_id(sk),
            self.maybe_null(r.randint(1, address_count), 0.01),
            self.maybe_null(first, 0.02),
            self.maybe_null(last, 0.02),
            self.maybe_null(r.choice("YN"), 0.03),
            self.maybe_null(birth, 0.03),
            self.maybe_null(f"{email_user or 'customer'}{sk}@{r.choice(('example.com', 'mail.test'))}", 0.04),
            clock,
        )

    def item(self, sk: int) -> tuple[Any, ...]:
        r = self.random
        category = r.choice(list(CATEGORIES))
        item_class = r.choice(CATEGORIES[category])
        wholesale = _money(r.uniform(0.5, 80))
        price = _money(float(wholesale) * r.uniform(1.1, 2.5))
        brand = f"{r.choice(BRAND_WORDS)} {item_class.split('-')[0]} #{r.randint(1, 9)}"
        product = "".join(r.choice(SYLLABLES) for _ in range(r.randint(2, 4)))
        desc = f"{category} {item_class}: {product}, {r.choice(COLORS)}"
        if r.random() < 0.05:
            desc += ' — "best seller"'
        if r.random() < 0.02:
            desc += "\nSecond line of the description"
        return (
            sk,
            _business_id(sk),
            date(2020, 1, 1) + timedelta(days=r.randint(0, 1400)),
            self.maybe_null(desc, 0.02),
            price,
            wholesale,
            self.maybe_null(brand, 0.01),
            self.maybe_null(item_class, 0.01),
            self.maybe_null(category, 0.01),
            self.maybe_null(r.choice(COLORS), 0.02),
            product,
        )

    def sold_day(self) -> date:
        """A seasonal curve: more sales in November and December, fewer in late summer."""
        r = self.random
        while True:
            day = FIRST_SALES_DAY + timedelta(days=r.randrange(SALES_DAYS))
            weight = {11: 1.6, 12: 2.0, 7: 0.8, 8: 0.8}.get(day.month, 1.0)
            if r.random() * 2.0 < weight:
                return day

    def sold_minute(self) -> int:
        """Seconds since midnight, at minute resolution, busier in the evening."""
        hour = self.random.choices(
            range(24), weights=[1, 1, 1, 1, 1, 1, 2, 3, 4, 5, 5, 6] + [7] * 6 + [8, 9, 9, 7, 4, 2]
        )[0]
        return hour * 3600 + self.random.randrange(60) * 60

    def sale_line(
        self, item: tuple[Any, ...], order: int, day: date | None, minute: int | None,
        customer: int | None, address: int | None,
    ) -> tuple[Any, ...]:  # fmt: skip
        """One web_sales line with TPC-DS's price arithmetic (all amounts decimal(7,2))."""
        r = self.random
        quantity = r.randint(1, 100)
        wholesale = Decimal(str(item[5]))
        list_price = (
            _money(float(wholesale) * r.uniform(1.0, 2.0)) if r.random() < 0.3 else Decimal(str(item[4]))
        )
        sales_price = _money(float(list_price) * (1 - r.choice((0, 0, 0, 0.05, 0.1, 0.2, 0.5))))
        ext_list = list_price * quantity
        ext_sales = sales_price * quantity
        ext_discount = ext_list - ext_sales
        ext_wholesale = wholesale * quantity
        coupon = _money(float(ext_sales) * r.uniform(0.05, 0.3)) if r.random() < 0.1 else Decimal("0.00")
        net_paid = ext_sales - coupon
        tax = _money(float(net_paid) * r.choice((0.0, 0.05, 0.07, 0.09)))
        ship_sk = date_sk(day + timedelta(days=r.randint(1, 90))) if day else None
        return (
            item[0],
            order,
            self.maybe_null(date_sk(day), 0.002) if day else None,
            self.maybe_null(minute, 0.002),
            self.maybe_null(ship_sk, 0.01),
            customer,
            address,
            quantity,
            wholesale,
            list_price,
            sales_price,
            ext_discount,
            ext_sales,
            ext_wholesale,
            ext_list,
            tax,
            coupon,
            net_paid,
            net_paid + tax,
            net_paid - ext_wholesale,
        )


def _date_rows() -> Iterator[tuple[Any, ...]]:
    for offset in range(DATE_DIM_DAYS):
        day = DATE_DIM_FIRST + timedelta(days=offset)
        sk = date_sk(day)
        yield (
            sk,
            _business_id(sk),
            day,
            day.year,
            day.month,
            day.day,
            (day.month - 1) // 3 + 1,
            DAY_NAMES[day.weekday()],
            "Y" if day.weekday() >= 5 else "N",
            "Y" if (day.month, day.day) in HOLIDAYS else "N",
        )


def _time_rows() -> Iterator[tuple[Any, ...]]:
    for minute_of_day in range(24 * 60):
        hour, minute = divmod(minute_of_day, 60)
        seconds = minute_of_day * 60
        shift = "first" if 6 <= hour < 14 else "second" if 14 <= hour < 22 else "third"
        yield (
            seconds, _business_id(seconds), seconds, hour, minute,
            "AM" if hour < 12 else "PM", shift, MEAL_TIMES.get(hour),
        )  # fmt: skip


def _insert(db: SourceConnection, table: str, rows: Iterable[Sequence[Any]]) -> int:
    columns = db.columns(table)
    statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    count = 0
    for chunk in _chunks(rows, 5000):
        db.executemany(statement, chunk)
        count += len(chunk)
    return count


def _chunks(rows: Iterable[Sequence[Any]], size: int) -> Iterator[list[Sequence[Any]]]:
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def create_source_database(source: Source, scale: float = 1.0, seed: int = 42) -> dict[str, int]:
    """Write the source tables (replacing an SQLite file, or the tables of a PostgreSQL database, that are
    there) and return each table's row count. Deterministic: the same (scale, seed) gives the same rows."""
    database = SourceDatabase.of(source)
    if database.dialect == "sqlite":
        target = Path(database.location)
        target.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
    sizes = Sizes.at(scale)
    gen = _Generator(seed)
    counts: dict[str, int] = {}
    with database.connect() as db:
        db.begin()
        for table, ddl in DDL.items():
            db.drop_table(table)
            db.execute(ddl)
        counts["date_dim"] = _insert(db, "date_dim", _date_rows())
        counts["time_dim"] = _insert(db, "time_dim", _time_rows())
        counts["customer_address"] = _insert(
            db, "customer_address", (gen.address(sk) for sk in range(1, sizes.addresses + 1))
        )
        counts["customer"] = _insert(
            db,
            "customer",
            (
                gen.customer(sk, sizes.addresses, CLOCK_START - timedelta(days=gen.random.randint(1, 900)))
                for sk in range(1, sizes.customers + 1)
            ),
        )
        items = [gen.item(sk) for sk in range(1, sizes.items + 1)]
        counts["item"] = _insert(db, "item", items)
        counts["web_sales"] = _insert(db, "web_sales", _sales_rows(gen, sizes, items))
        db.commit()
    return counts


def _sales_rows(gen: _Generator, sizes: Sizes, items: Sequence[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    popularity = [1.0 / (rank**0.8) for rank in range(1, len(items) + 1)]
    order_items = list(items)
    gen.random.shuffle(order_items)  # popularity independent of the surrogate key
    for order in range(1, sizes.orders + 1):
        yield from _order_lines(gen, sizes, order_items, popularity, order, gen.sold_day())


def _order_lines(
    gen: _Generator,
    sizes: Sizes,
    items: Sequence[tuple[Any, ...]],
    popularity: Sequence[float],
    order: int,
    day: date,
) -> list[tuple[Any, ...]]:
    r = gen.random
    customer = gen.maybe_null(
        int(r.paretovariate(0.9)) % sizes.customers + 1
        if r.random() < 0.3
        else r.randint(1, sizes.customers),
        0.005,
    )
    address = gen.maybe_null(r.randint(1, sizes.addresses), 0.01)
    minute = gen.sold_minute()
    lines = min(1 + int(r.expovariate(1 / 3.3)), 20, len(items))
    chosen: dict[int, tuple[Any, ...]] = {}
    while len(chosen) < lines:
        item = r.choices(items, weights=popularity)[0]
        chosen.setdefault(item[0], item)
    return [gen.sale_line(item, order, day, minute, customer, address) for item in chosen.values()]


def schema_document(source: Source) -> dict[str, Any]:
    """The schema file (docs/CONTRACTS.md) of the source database, by catalog reflection."""
    from tools.schema_gen import reflect_schema

    database = SourceDatabase.of(source)
    return reflect_schema(database.sqlalchemy_url, [database.schema])


def read_rows(source: Source, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """A table's columns and rows (ordered by primary key) as the database returns them."""
    with SourceDatabase.of(source).connect() as db:
        columns = db.columns(table)
        rows = db.execute(f"SELECT * FROM {table} ORDER BY {', '.join(PRIMARY_KEYS[table])}").fetchall()
    return columns, rows


# ----------------------------------------------------------------------------------------------------
# The change workload


class _Workload:
    """Business operations as a shop's systems would run them, each in its own transaction."""

    def __init__(
        self, db: SourceConnection, gen: _Generator, result: WorkloadResult, clock: datetime
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

    def _record(self, table: str, op: str, row: tuple[Any, ...]) -> None:
        self.result.changes.append(RowChange(table, op, tuple(row), self.clock))
        self.result.rows[(table, op)] += 1

    def insert(self, table: str, row: Sequence[Any]) -> None:
        columns = self.columns[table]
        names = ", ".join(columns[: len(row)])  # a column added on the source since stays NULL
        self.db.execute(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", tuple(row))
        self._record(table, "I", self._row(table, [row[columns.index(k)] for k in PRIMARY_KEYS[table]]))

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
            item = self._row("item", key)
            if item[4] is None or item[5] is None:
                continue
            self.insert("web_sales", self.gen.sale_line(item, order, day, minute, customer[0], address))

    def price_update(self) -> None:
        """A new list price for an item (a dimension update); sometimes an order line is repriced too."""
        r = self.gen.random
        key = self.random_key("item")
        if key is None:
            return
        item = self._row("item", key)
        price = _money(float(item[4] or 10) * r.uniform(0.8, 1.25))
        self.update("item", key, i_current_price=price)
        line = self.random_key("web_sales")
        if line and r.random() < 0.5:
            row = self._row("web_sales", line)
            sales_price = _money(float(row[10]) * 0.9)
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
            current = self._row("customer", key)[2]
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
    gen = _Generator(seed)
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


# ----------------------------------------------------------------------------------------------------
# DMS files without the emulator


def write_full_load_files(
    db_path: str | Path,
    out_dir: str | Path,
    rows_per_file: int = 50_000,
    fmt: CsvFormat | None = None,
    load_time: datetime = CLOCK_START,
    tables: Sequence[str] = TABLES,
) -> list[str]:
    """Each table as DMS full-load files `out_dir/main/<table>/LOAD00000001.csv` (HEX counter, `Op` = I,
    no change sequence), `rows_per_file` rows each. Returns the paths written."""
    fmt = fmt or CsvFormat()
    written: list[str] = []
    for table in tables:
        columns, rows = read_rows(db_path, table)
        folder = Path(out_dir) / SOURCE_SCHEMA / table
        folder.mkdir(parents=True, exist_ok=True)
        for counter, chunk in enumerate(_chunks(rows, rows_per_file), start=1):
            path = folder / load_file_name(counter)
            path.write_text(
                write_dms_csv(columns, [("I", "", load_time, r) for r in chunk], fmt), encoding="utf-8"
            )
            written.append(str(path))
    return written


def write_cdc_files(
    db_path: str | Path,
    changes: Sequence[RowChange],
    out_dir: str | Path,
    first_change_seq: int = 1,
    changes_per_file: int = 10_000,
    fmt: CsvFormat | None = None,
) -> list[str]:
    """Render row changes (in commit order) as DMS CDC files, `out_dir/main/<table>/<time>.csv`, with
    increasing `AR_H_CHANGE_SEQ` from `first_change_seq`. A file holds one table's consecutive changes;
    file names follow the changes' commit times, so a later file never sorts before an earlier one."""
    fmt = fmt or CsvFormat()
    columns = {}
    with sqlite3.connect(db_path) as db:
        for table in {c.table for c in changes}:
            columns[table] = _columns(db, table)
    pending: dict[str, list[tuple[int, RowChange]]] = {}
    written: list[str] = []
    used_names: set[Path] = set()

    def flush(table: str) -> None:
        batch = pending.pop(table, [])
        if not batch:
            return
        folder = Path(out_dir) / SOURCE_SCHEMA / table
        folder.mkdir(parents=True, exist_ok=True)
        moment = batch[-1][1].commit_time
        path = folder / cdc_file_name(moment)
        while path in used_names or path.exists():
            moment += timedelta(milliseconds=1)
            path = folder / cdc_file_name(moment)
        used_names.add(path)
        rows = [(c.op, change_seq(seq), c.commit_time, c.values) for seq, c in batch]
        path.write_text(write_dms_csv(columns[table], rows, fmt), encoding="utf-8")
        written.append(str(path))

    for seq, change in enumerate(changes, start=first_change_seq):
        pending.setdefault(change.table, []).append((seq, change))
        if len(pending[change.table]) >= changes_per_file:
            flush(change.table)
    for table in sorted(pending):
        flush(table)
    return sorted(written, key=lambda p: Path(p).name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--db", required=True, help="the source database: an SQLite file, or a postgresql:// connection URI"
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workload", type=int, default=0, help="run this many operations on an existing db")
    parser.add_argument("--schema_out", help="also write the schema file here")
    args = parser.parse_args(argv)
    if args.workload:
        print(json.dumps(run_workload(args.db, args.workload, args.seed).summary(), indent=2))
    else:
        print(json.dumps(create_source_database(args.db, args.scale, args.seed), indent=2))
    if args.schema_out:
        Path(args.schema_out).write_text(
            json.dumps(schema_document(args.db), indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
