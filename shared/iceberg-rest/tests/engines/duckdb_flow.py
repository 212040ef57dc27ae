"""DuckDB attaches the catalog with OAuth2 client credentials and with a bearer token,
lists tables, reads the rows pyiceberg wrote and inserts rows. Extensions are loaded from
the installed pip packages' files; nothing is downloaded."""


from common import TOKEN, URI, WAREHOUSE, catalog, check
from duckdb_flow_lib import connect, rows


# OAuth2 client credentials: the client secret is the Flotilla token.
con = connect()
con.execute(
    f"""CREATE SECRET flotilla_oauth (TYPE ICEBERG, CLIENT_ID 'duckdb', CLIENT_SECRET '{TOKEN}',
        OAUTH2_SERVER_URI '{URI}/v1/oauth/tokens')"""
)
con.execute(f"ATTACH '{WAREHOUSE}' AS lake (TYPE ICEBERG, ENDPOINT '{URI}', SECRET flotilla_oauth)")
tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'").fetchall()]
check("for_duckdb" in tables, f"tables listed: {tables}")
got = rows(con, "SELECT id, city FROM lake.sales.for_duckdb")
check(got == [(1, "Oslo"), (2, "Lima"), (3, "Pune")], f"rows pyiceberg wrote: {got}")

# DuckDB writes.
con.execute("INSERT INTO lake.sales.for_duckdb VALUES (4, 'Kyiv')")
got = rows(con, "SELECT id FROM lake.sales.for_duckdb")
check(got == [(1,), (2,), (3,), (4,)], f"after insert: {got}")
con.close()

# A bearer token.
con = connect()
con.execute(f"CREATE SECRET flotilla_bearer (TYPE ICEBERG, TOKEN '{TOKEN}')")
con.execute(f"ATTACH '{WAREHOUSE}' AS lake2 (TYPE ICEBERG, ENDPOINT '{URI}', SECRET flotilla_bearer)")
got = rows(con, "SELECT id FROM lake2.sales.for_duckdb")
check(got == [(1,), (2,), (3,), (4,)], f"bearer read: {got}")
con.close()

# pyiceberg sees DuckDB's row.
ids = sorted(catalog().load_table("sales.for_duckdb").scan().to_arrow()["id"].to_pylist())
check(ids == [1, 2, 3, 4], f"pyiceberg reads DuckDB's insert: {ids}")
print("duckdb flow ok")
