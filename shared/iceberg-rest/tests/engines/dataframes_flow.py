"""Daft and Polars through pyiceberg's catalog: read what pyiceberg wrote (a partitioned,
evolved table with deletes, and an older snapshot), append, and overwrite; pyiceberg reads
their commits back. Runs after pyiceberg_features.py."""

import os

os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")

import daft  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402

from common import catalog, check  # noqa: E402

cat = catalog()
parts = cat.load_table("feat.parts")
want = sorted(parts.scan().to_arrow()["id"].to_pylist())

# Reads: current state (two partition specs, evolved schema, after a delete) and time travel.
got = sorted(daft.read_iceberg(parts).to_pydict()["id"])
check(got == want, f"daft reads the partitioned table: {got}")
got = sorted(pl.scan_iceberg(parts).collect()["id"].to_list())
check(got == want, f"polars reads the partitioned table: {got}")
cols = pl.scan_iceberg(parts).collect().columns
check(cols == ["id", "city", "ts", "quantity", "score"], f"polars sees the evolved schema: {cols}")
first = parts.history()[0].snapshot_id
old = sorted(parts.scan(snapshot_id=first).to_arrow()["id"].to_pylist())
check(sorted(daft.read_iceberg(parts, snapshot_id=first).to_pydict()["id"]) == old, "daft time travel")
check(sorted(pl.scan_iceberg(parts, snapshot_id=first).collect()["id"].to_list()) == old, "polars time travel")
big = sorted(daft.read_iceberg(parts).where(daft.col("id") > 4).to_pydict()["id"])
check(big == [i for i in want if i > 4], f"daft filter: {big}")
big = sorted(pl.scan_iceberg(parts).filter(pl.col("id") > 4).collect()["id"].to_list())
check(big == [i for i in want if i > 4], f"polars filter: {big}")
print("daft and polars read ok")

# Writes through the table object pyiceberg loaded from the catalog.
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("who", pa.string())])
t = cat.create_table("feat.frames", schema=schema)
daft.from_pydict({"id": [1, 2], "who": ["daft", "daft"]}).write_iceberg(cat.load_table("feat.frames"), mode="append")
pl.DataFrame({"id": [3], "who": ["polars"]}, schema={"id": pl.Int64, "who": pl.String}).write_iceberg(
    cat.load_table("feat.frames"), mode="append"
)
got = sorted(cat.load_table("feat.frames").scan().to_arrow()["who"].to_pylist())
check(got == ["daft", "daft", "polars"], f"pyiceberg reads daft's and polars' appends: {got}")
daft.from_pydict({"id": [9], "who": ["daft-overwrite"]}).write_iceberg(cat.load_table("feat.frames"), mode="overwrite")
got = cat.load_table("feat.frames").scan().to_arrow()["who"].to_pylist()
check(got == ["daft-overwrite"], f"daft overwrite: {got}")
pl.DataFrame({"id": [8], "who": ["polars-overwrite"]}, schema={"id": pl.Int64, "who": pl.String}).write_iceberg(
    cat.load_table("feat.frames"), mode="overwrite"
)
got = cat.load_table("feat.frames").scan().to_arrow()["who"].to_pylist()
check(got == ["polars-overwrite"], f"polars overwrite: {got}")
check(len(cat.load_table("feat.frames").history()) == 4, "four commits")
print("daft and polars write ok")

# Merge-on-read deletes (DuckDB's positional delete files) are applied by both readers.
mor = cat.load_table("feat.mor")
want = sorted(mor.scan().to_arrow()["id"].to_pylist())
check(sorted(daft.read_iceberg(mor).to_pydict()["id"]) == want, "daft applies positional deletes")
check(sorted(pl.scan_iceberg(mor).collect()["id"].to_list()) == want, "polars applies positional deletes")
print("daft and polars merge-on-read ok")
