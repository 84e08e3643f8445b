"""The demo source's rows: the value pools, the row counts at a scale factor, and one seeded generator of
every table's rows (realistic names, addresses, items and TPC-DS price arithmetic)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

FIRST_SALES_DAY = date(2024, 1, 1)
SALES_DAYS = 731  # 2024-01-01 … 2025-12-31
DATE_DIM_FIRST = date(2023, 1, 1)
DATE_DIM_DAYS = 1461 + 365  # 2023 … 2027: room for ship dates and new orders
JULIAN_OFFSET = 1721425  # TPC-DS d_date_sk is the Julian day number: date.toordinal() + this
CLOCK_START = datetime(2026, 1, 1, 8, 0, 0)
CENT = Decimal("0.01")

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


def money(value: float | Decimal) -> Decimal:
    """An amount rounded half up to the cent, as a decimal(7,2) column holds it."""
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
    """A day's date_dim key (its Julian day number)."""
    return day.toordinal() + JULIAN_OFFSET


def sk_date(sk: int) -> date:
    """The day of a date_dim key."""
    return date.fromordinal(sk - JULIAN_OFFSET)


class RowGenerator:
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
            money(offset),
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
        wholesale = money(r.uniform(0.5, 80))
        price = money(float(wholesale) * r.uniform(1.1, 2.5))
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
            money(float(wholesale) * r.uniform(1.0, 2.0)) if r.random() < 0.3 else Decimal(str(item[4]))
        )
        sales_price = money(float(list_price) * (1 - r.choice((0, 0, 0, 0.05, 0.1, 0.2, 0.5))))
        ext_list = list_price * quantity
        ext_sales = sales_price * quantity
        ext_discount = ext_list - ext_sales
        ext_wholesale = wholesale * quantity
        coupon = money(float(ext_sales) * r.uniform(0.05, 0.3)) if r.random() < 0.1 else Decimal("0.00")
        net_paid = ext_sales - coupon
        tax = money(float(net_paid) * r.choice((0.0, 0.05, 0.07, 0.09)))
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


def date_rows() -> Iterator[tuple[Any, ...]]:
    """The date_dim rows: one per day of 2023 to 2027."""
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


def time_rows() -> Iterator[tuple[Any, ...]]:
    """The time_dim rows: one per minute of the day."""
    for minute_of_day in range(24 * 60):
        hour, minute = divmod(minute_of_day, 60)
        seconds = minute_of_day * 60
        shift = "first" if 6 <= hour < 14 else "second" if 14 <= hour < 22 else "third"
        yield (
            seconds, _business_id(seconds), seconds, hour, minute,
            "AM" if hour < 12 else "PM", shift, MEAL_TIMES.get(hour),
        )  # fmt: skip


def sales_rows(
    gen: RowGenerator, sizes: Sizes, items: Sequence[tuple[Any, ...]]
) -> Iterator[tuple[Any, ...]]:
    """The web_sales rows: `sizes.orders` orders of skewed item popularity, on seasonal days."""
    popularity = [1.0 / (rank**0.8) for rank in range(1, len(items) + 1)]
    order_items = list(items)
    gen.random.shuffle(order_items)  # popularity independent of the surrogate key
    for order in range(1, sizes.orders + 1):
        yield from _order_lines(gen, sizes, order_items, popularity, order, gen.sold_day())


def _order_lines(
    gen: RowGenerator,
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
