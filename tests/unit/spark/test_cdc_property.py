"""Property: any stream of I/U/D changes, cut into any files, delivered in any order (late files), some
twice (a duplicate in the queue, a file listed twice), in any batches, with retries and replays of earlier
batches, leaves the Iceberg table equal to an oracle after every batch: the source's rows after every
change delivered so far, applied in the order the source made them."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

TABLE = "shop.stock"
COLUMNS = ["sku", "qty", "label"]
SCHEMA = schema_of({TABLE: (["sku"], [("sku", "int"), ("qty", "bigint"), ("label", "varchar(20)")])})
EXAMPLES = int(os.environ.get("CDC_PROPERTY_EXAMPLES", "10"))

keys = st.integers(min_value=0, max_value=7)
change = st.tuples(
    st.sampled_from(["I", "U", "D"]),
    keys,
    st.integers(min_value=-1000, max_value=1000),
    st.one_of(st.none(), st.text(alphabet='ab ,"\n', max_size=6)),
)


@st.composite
def scenarios(draw):
    initial = draw(st.dictionaries(keys, st.integers(0, 99), max_size=6))
    changes = draw(st.lists(change, min_size=1, max_size=40))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(changes) - 1)), max_size=6)))
    files = [changes[a:b] for a, b in itertools.pairwise([0, *cuts, len(changes)]) if changes[a:b]]
    # Delivery: in any order (late files); some files a second time later (duplicates).
    order = list(draw(st.permutations(range(len(files)))))
    for file, at in draw(st.lists(st.tuples(st.integers(0, len(files) - 1), st.integers(0, 40)), max_size=3)):
        order.insert(min(at, len(order)), file)
    least = 1 if len(order) > 1 else 0
    batch_cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), min_size=least, max_size=4)))
    batches = [order[a:b] for a, b in itertools.pairwise([0, *batch_cuts, len(order)]) if b > a]
    retries = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    replays = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return initial, files, batches, retries, replays


def oracle_after(initial: dict, files: list, delivered: set[int]) -> list[tuple]:
    """The source's rows after the delivered files' changes, in the order the source made them (the
    files were cut from one stream in order). DMS default: null and "" look alike."""
    rows = {k: (v, f"init {k}") for k, v in initial.items()}
    for index in sorted(delivered):
        for op, key, qty, label in files[index]:
            if op == "D":
                rows.pop(key, None)
            else:
                rows[key] = (qty, label or None)
    return sorted((k, q, label) for k, (q, label) in rows.items())


# Always tried first: a late file whose other change must apply while its insert of a key deleted since
# must not (a high-water mark loses the first; an order-independent apply without tombstones the second),
# and a late file replayed in a retried batch after a duplicate.
LATE_AFTER_DELETE = (
    {1: 5},
    [[("I", 3, 1, "x"), ("I", 5, 1, None)], [("D", 3, 0, None), ("U", 1, 7, "y")]],
    [[1], [0]],
    [False, True],
    [False, True],
)
DUPLICATED_AND_REPLAYED = (
    {},
    [[("I", 2, 1, "a")], [("U", 2, 2, "b")], [("D", 2, 0, None), ("I", 4, 4, "d")]],
    [[2, 1], [1, 0, 0]],
    [True, False],
    [False, True],
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(scenario=scenarios())
@example(scenario=LATE_AFTER_DELETE)
@example(scenario=DUPLICATED_AND_REPLAYED)
def test_table_equals_oracle_after_every_batch_whatever_the_delivery(
    spark, generated_code, base_config, scenario
):
    """Given the product's code generation (the suite's other sessions interpret), random initial rows and a random I/U/D stream cut into random files,
    When the files are delivered late, twice, in random batches, some batches run twice (a retry) and
    some with an earlier batch's files again (a replay),
    Then after every batch the table equals the oracle of the changes delivered so far."""
    initial, files, batches, retries, replays = scenario
    root = Path(tempfile.mkdtemp(prefix="cdc-prop-"))
    config = replace(base_config, clean_database=f"prop_{root.name.replace('-', '_')}")
    try:
        dms = DmsWriter(root / "dms")
        dms.load(TABLE, COLUMNS, [(k, v, f"init {k}") for k, v in sorted(initial.items())])
        full_load(spark, config, SCHEMA, str(dms.root))
        paths = [
            dms.cdc(TABLE, COLUMNS, [(op, (key, qty, label)) for op, key, qty, label in f]) for f in files
        ]
        delivered: set[int] = set()
        previous: list[str] = []
        for number, (batch, retry, replay) in enumerate(zip(batches, retries, replays, strict=True)):
            chosen = [paths[i] for i in batch]
            run = manifest(*(previous if replay else []), *chosen, run_id=f"batch-{number}")
            report = apply_cdc(spark, config, SCHEMA, run)
            assert report.ok, (report.failed, report.error)
            if retry:
                assert apply_cdc(spark, config, SCHEMA, manifest(*chosen, run_id=f"retry-{number}")).ok
            delivered |= set(batch)
            assert rows_of(spark, config.clean_table("shop_stock")) == oracle_after(initial, files, delivered)
            previous = chosen
    finally:
        for row in spark.sql(f"SHOW TABLES IN {config.catalog_name}.{config.clean_database}").collect():
            spark.sql(f"DROP TABLE {config.catalog_name}.{config.clean_database}.{row['tableName']} PURGE")
        shutil.rmtree(root, ignore_errors=True)
