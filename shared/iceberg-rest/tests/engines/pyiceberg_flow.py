"""pyiceberg end to end: namespace, table, two appends, read back, schema evolution,
time travel, rename, drop; two writers on one base; a table left for DuckDB."""

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.types import IntegerType

from common import catalog, check

cat = catalog()
cat.create_namespace("sales")
check(("sales",) in cat.list_namespaces(), "namespace listed")

schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
t = cat.create_table("sales.orders", schema=schema, properties={"owner": "pyiceberg"})
check(t.properties.get("owner") == "pyiceberg", "create properties kept")
t.append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=schema))
first = t.current_snapshot().snapshot_id
t.append(pa.table({"id": [3], "name": ["c"]}, schema=schema))

t = cat.load_table("sales.orders")
ids = sorted(t.scan().to_arrow()["id"].to_pylist())
check(ids == [1, 2, 3], f"both appends read back: {ids}")
check(len(t.history()) == 2, "two snapshots")

with t.update_schema() as u:
    u.add_column("qty", IntegerType())
t = cat.load_table("sales.orders")
check([f.name for f in t.schema().fields] == ["id", "name", "qty"], "schema evolved")
rows = t.scan().to_arrow()
check(rows.column_names == ["id", "name", "qty"] and rows.num_rows == 3, "old rows under new schema")

old = sorted(t.scan(snapshot_id=first).to_arrow()["id"].to_pylist())
check(old == [1, 2], f"time travel to the first snapshot: {old}")

cat.rename_table("sales.orders", "sales.orders_renamed")
check(cat.table_exists("sales.orders_renamed"), "renamed table exists")
check(not cat.table_exists("sales.orders"), "old name gone")
check(("sales", "orders_renamed") in cat.list_tables("sales"), "renamed table listed")
cat.drop_table("sales.orders_renamed")
try:
    cat.load_table("sales.orders_renamed")
    raise AssertionError("dropped table still loads")
except NoSuchTableError:
    pass

# Two writers on one base: one wins, the other fails, retries and lands; nothing is lost.
race_schema = pa.schema([pa.field("writer", pa.string()), pa.field("n", pa.int64())])
# pyiceberg retries a failed commit by itself; off here, so the conflict reaches this script.
cat.create_table("sales.race", schema=race_schema, properties={"commit.retry.num-retries": "0"})
w1 = cat.load_table("sales.race")
w2 = cat.load_table("sales.race")
w1.append(pa.table({"writer": ["one"], "n": [1]}, schema=race_schema))
try:
    w2.append(pa.table({"writer": ["two"], "n": [2]}, schema=race_schema))
    raise AssertionError("the stale writer's commit was accepted")
except CommitFailedException:
    pass
w2 = cat.load_table("sales.race")
w2.append(pa.table({"writer": ["two"], "n": [2]}, schema=race_schema))
got = sorted(cat.load_table("sales.race").scan().to_arrow()["writer"].to_pylist())
check(got == ["one", "two"], f"no row lost: {got}")

# Rows for the DuckDB script.
duck_schema = pa.schema([pa.field("id", pa.int64()), pa.field("city", pa.string())])
d = cat.create_table("sales.for_duckdb", schema=duck_schema)
d.append(pa.table({"id": [1, 2, 3], "city": ["Oslo", "Lima", "Pune"]}, schema=duck_schema))
print("pyiceberg flow ok")

# OAuth2 client credentials: pyiceberg exchanges `client_id:client_secret` for a token.
from pyiceberg.catalog import load_catalog  # noqa: E402

from common import TOKEN, URI, WAREHOUSE  # noqa: E402

oauth = load_catalog("oauth", type="rest", uri=URI, warehouse=WAREHOUSE, credential=f"pyiceberg:{TOKEN}")
check(("sales",) in oauth.list_namespaces(), "OAuth2 client credentials work")
print("pyiceberg oauth ok")
