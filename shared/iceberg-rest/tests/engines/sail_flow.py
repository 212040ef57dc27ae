"""Sail (a Spark Connect server, `pysail`) with the catalog as an Iceberg REST catalog:
Spark SQL lists and reads what pyiceberg wrote, inserts into it, creates a table, appends,
overwrites, reads an older snapshot, deletes rows and drops the table; pyiceberg reads
Sail's commits. Runs after pyiceberg_features.py."""

import json
import urllib.request

from common import TOKEN, URI, WAREHOUSE, catalog, check, refused, sail

server, spark = sail()


def q(sql):
    return spark.sql(sql).collect()


def ids(sql):
    return sorted(r[0] for r in q(sql))


check(["feat"] == [r[0] for r in q("SHOW NAMESPACES") if r[0] == "feat"], "namespaces listed")
tables = {r[1] for r in q("SHOW TABLES IN feat")}
check({"parts", "v1", "v2", "v3"} <= tables, f"tables listed: {tables}")
pyiceberg_ids = sorted(catalog().load_table("feat.parts").scan().to_arrow()["id"].to_pylist())
check(ids("SELECT id FROM feat.parts") == pyiceberg_ids, "Sail reads pyiceberg's partitioned table")
check(ids("SELECT id FROM feat.v1") == [1, 2, 3], "Sail reads a v1 table")
mor = sorted(catalog().load_table("feat.mor").scan().to_arrow()["id"].to_pylist())
check(ids("SELECT id FROM feat.mor") == mor, "Sail reads a table with row deletes")

q("INSERT INTO feat.v2 VALUES (12, 'Sail')")
check(sorted(catalog().load_table("feat.v2").scan().to_arrow()["id"].to_pylist()) == [10, 11, 12], "pyiceberg reads Sail's insert")

# Sail proposes a location below its own warehouse directory: name one inside the catalog's.
req = urllib.request.Request(f"{URI}/v1/config?warehouse={WAREHOUSE}", headers={"Authorization": f"Bearer {TOKEN}"})
warehouse = json.load(urllib.request.urlopen(req))["defaults"]["warehouse"].rstrip("/")
q(f"CREATE TABLE feat.by_sail (k BIGINT, v STRING) USING iceberg LOCATION '{warehouse}/feat/by_sail'")
q("INSERT INTO feat.by_sail VALUES (1, 'x'), (2, 'y')")
q("INSERT INTO feat.by_sail VALUES (3, 'z')")
check(ids("SELECT k FROM feat.by_sail") == [1, 2, 3], "Sail appends")
t = catalog().load_table("feat.by_sail")
check(sorted(t.scan().to_arrow()["k"].to_pylist()) == [1, 2, 3], "pyiceberg reads Sail's table")
first = t.history()[0].snapshot_id
check(ids(f"SELECT k FROM feat.by_sail VERSION AS OF {first}") == [1, 2], "Sail time travel")
q("INSERT OVERWRITE feat.by_sail VALUES (4, 'w')")
check(ids("SELECT k FROM feat.by_sail") == [4], "Sail overwrites")
q("INSERT INTO feat.by_sail VALUES (5, 'v')")
q("DELETE FROM feat.by_sail WHERE k = 4")
check(ids("SELECT k FROM feat.by_sail") == [5], "Sail deletes rows")
check(sorted(catalog().load_table("feat.by_sail").scan().to_arrow()["k"].to_pylist()) == [5], "pyiceberg reads Sail's delete")
e = refused(lambda: q("ALTER TABLE feat.by_sail ADD COLUMN w INT"), "Sail's ALTER TABLE")
check("ALTER TABLE" in e, f"Sail refuses schema evolution: {e}")
q("DROP TABLE feat.by_sail")
check(not catalog().table_exists("feat.by_sail"), "Sail drops")
spark.stop()
server.stop()
print("sail ok")
