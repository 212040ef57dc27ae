"""DuckDB on the tables pyiceberg_features.py left: reads every format version, the
partitioned and evolved table and an older snapshot; deletes and updates rows the
merge-on-read way (positional delete files), which pyiceberg then reads; creates a table."""

from common import TOKEN, URI, WAREHOUSE, catalog, check
from duckdb_flow_lib import connect, rows

con = connect()
con.execute(f"CREATE SECRET flotilla_bearer (TYPE ICEBERG, TOKEN '{TOKEN}')")
con.execute(f"ATTACH '{WAREHOUSE}' AS lake (TYPE ICEBERG, ENDPOINT '{URI}', SECRET flotilla_bearer)")
cat = catalog()

for name in ("v1", "v2", "v3", "parts", "mor"):
    want = sorted(cat.load_table(f"feat.{name}").scan().to_arrow()["id"].to_pylist())
    got = [r[0] for r in rows(con, f"SELECT id FROM lake.feat.{name}")]
    check(got == want, f"duckdb reads feat.{name}: {got} != {want}")
cols = [r[0] for r in con.execute("DESCRIBE lake.feat.parts").fetchall()]
check(cols == ["id", "city", "ts", "quantity", "score"], f"evolved schema: {cols}")
v2 = cat.load_table("feat.v2")
first = v2.history()[0].snapshot_id
got = rows(con, f"SELECT id FROM lake.feat.v2 AT (VERSION => {first})")
check(got == [(1,), (2,)], f"duckdb time travel: {got}")
print("duckdb reads ok")

# Row-level deletes and updates: DuckDB writes positional delete files (merge-on-read).
con.execute("DELETE FROM lake.feat.mor WHERE id = 3")
con.execute("UPDATE lake.feat.mor SET city = 'D' WHERE id = 4")
mor = cat.load_table("feat.mor")
summary = mor.current_snapshot().summary
got = sorted(zip(*[mor.scan().to_arrow()[c].to_pylist() for c in ("id", "city")]))
check(got == [(1, "a"), (4, "D")], f"pyiceberg reads DuckDB's delete and update: {got}")
deletes = [f for f in mor.inspect.files().to_pylist() if f["content"] == 1]
check(deletes, f"positional delete files were written (merge-on-read): {summary}")
got = rows(con, "SELECT id, city FROM lake.feat.mor")
check(got == [(1, "a"), (4, "D")], f"DuckDB reads its own positional deletes back: {got}")

con.execute("CREATE TABLE lake.feat.by_duckdb (id BIGINT, city VARCHAR)")
con.execute("INSERT INTO lake.feat.by_duckdb VALUES (1, 'Oslo'), (2, 'Lima')")
t = cat.load_table("feat.by_duckdb")
check(sorted(t.scan().to_arrow()["id"].to_pylist()) == [1, 2], "pyiceberg reads DuckDB's table")
con.execute("ALTER TABLE lake.feat.by_duckdb ADD COLUMN qty INTEGER")
con.execute("INSERT INTO lake.feat.by_duckdb VALUES (3, 'Pune', 7)")
t = cat.load_table("feat.by_duckdb")
check([f.name for f in t.schema().fields] == ["id", "city", "qty"], "DuckDB evolved the schema")
got = sorted(zip(*[t.scan().to_arrow()[c].to_pylist() for c in ("id", "qty")]))
check(got == [(1, None), (2, None), (3, 7)], f"pyiceberg reads across DuckDB's schemas: {got}")

# Version 3: pyiceberg creates it, DuckDB writes it, pyiceberg reads it.
con.execute("INSERT INTO lake.feat.v3 VALUES (1, 'Oslo'), (2, 'Lima')")
v3 = cat.load_table("feat.v3")
check(v3.metadata.format_version == 3, "still v3")
check(sorted(v3.scan().to_arrow()["id"].to_pylist()) == [1, 2], "pyiceberg reads DuckDB's v3 rows")
con.execute("CREATE TABLE lake.feat.duck_v1 (id BIGINT) WITH ('format-version' = '1')")
con.execute("INSERT INTO lake.feat.duck_v1 VALUES (5)")
duck_v1 = cat.load_table("feat.duck_v1")
check(duck_v1.metadata.format_version == 1, "DuckDB creates v1 tables")
check(duck_v1.scan().to_arrow()["id"].to_pylist() == [5], "pyiceberg reads DuckDB's v1 rows")
con.close()
print("duckdb features ok")
