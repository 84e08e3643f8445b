"""Property: any stream of I/U/D changes, cut into any files and batches, with retries, leaves the
Iceberg table equal to an in-memory oracle after every batch."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lakehouse.pipeline import apply_cdc, full_load

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
    # cut the stream into files, and the files into batches
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(changes) - 1)), max_size=6)))
    files = [changes[a:b] for a, b in itertools.pairwise([0, *cuts, len(changes)]) if changes[a:b]]
    batch_cuts = sorted(draw(st.sets(st.integers(1, max(1, len(files) - 1)), max_size=3)))
    batches = [list(range(a, b)) for a, b in itertools.pairwise([0, *batch_cuts, len(files)]) if b > a]
    retries = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return initial, files, batches, retries


def apply_to_oracle(oracle: dict, changes: list) -> None:
    for op, key, qty, label in changes:
        if op == "D":
            oracle.pop(key, None)
        else:
            oracle[key] = (qty, "" if label is None else label)  # DMS default: null and "" look alike


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(scenario=scenarios())
def test_table_equals_oracle_after_every_batch_even_with_retries(spark, base_config, scenario):
    """Given random initial rows and a random I/U/D stream cut into random files and batches,
    When each batch is applied (some twice, as a retry; some with the previous batch's files again),
    Then after every batch the table equals the oracle that applies the stream in order."""
    from dataclasses import replace

    initial, files, batches, retries = scenario
    root = Path(tempfile.mkdtemp(prefix="cdc-prop-"))
    config = replace(base_config, clean_database=f"prop_{root.name.replace('-', '_')}")
    try:
        dms = DmsWriter(root / "dms")
        dms.load(TABLE, COLUMNS, [(k, v, f"init {k}") for k, v in sorted(initial.items())])
        full_load(spark, config, SCHEMA, str(dms.root))
        oracle = {k: (v, f"init {k}") for k, v in initial.items()}
        paths = [
            dms.cdc(TABLE, COLUMNS, [(op, (key, qty, label)) for op, key, qty, label in f]) for f in files
        ]
        previous: list[str] = []
        for batch, retry in zip(batches, retries, strict=True):
            chosen = [paths[i] for i in batch]
            report = apply_cdc(spark, config, SCHEMA, manifest(*previous, *chosen))
            assert not report.failed, report.failed
            if retry:
                apply_cdc(spark, config, SCHEMA, manifest(*chosen, run_id="retry"))
            for i in batch:
                apply_to_oracle(oracle, files[i])
            expected = sorted((k, q, label if label != "" else None) for k, (q, label) in oracle.items())
            assert rows_of(spark, config.clean_table("shop_stock")) == expected
            previous = chosen if retry else []
    finally:
        for row in spark.sql(f"SHOW TABLES IN {config.catalog_name}.{config.clean_database}").collect():
            spark.sql(f"DROP TABLE {config.catalog_name}.{config.clean_database}.{row['tableName']} PURGE")
        shutil.rmtree(root, ignore_errors=True)
