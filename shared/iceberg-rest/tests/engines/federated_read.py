"""Reads the overlay table `sales.orders` through Flotilla (tests/federated.rs): pyiceberg
and DuckDB attached to the overlay's target catalog, with only the credentials the endpoint
answers (the upstream's vended ones). argv[1]: the ids expected, comma-separated."""

import sys

from common import TOKEN, URI, WAREHOUSE, catalog, check
from duckdb_flow_lib import connect, rows

want = [int(x) for x in sys.argv[1].split(",")]
cat = catalog()
listed = cat.list_tables("sales")
check(("sales", "orders") in listed, f"the overlay table is listed: {listed}")
t = cat.load_table("sales.orders")
got = sorted(t.scan().to_arrow()["id"].to_pylist())
check(got == want, f"pyiceberg reads the upstream rows: {got}, want {want}")
print("pyiceberg federated ok")

con = connect()
con.execute(f"CREATE SECRET flotilla_bearer (TYPE ICEBERG, TOKEN '{TOKEN}')")
con.execute(f"ATTACH '{WAREHOUSE}' AS lake (TYPE ICEBERG, ENDPOINT '{URI}', SECRET flotilla_bearer)")
got = [r[0] for r in rows(con, "SELECT id FROM lake.sales.orders")]
check(got == want, f"duckdb reads the upstream rows: {got}, want {want}")
con.close()
print("duckdb federated ok")
