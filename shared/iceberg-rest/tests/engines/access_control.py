"""Engines with service principals' client credentials (tests/engines.rs sets them): a
reader reads and is refused on append, a writer appends, and a revoke in the middle of a
session refuses the reader's next call. pyiceberg and DuckDB both exchange the credentials at
the endpoint's OAuth2 token route."""

import os

import pyarrow as pa
import requests
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError, RESTError

from common import TOKEN, URI, WAREHOUSE, catalog, check
from duckdb_flow_lib import connect, rows

READER = (os.environ["FLOTILLA_READER_ID"], os.environ["FLOTILLA_READER_SECRET"])
WRITER = (os.environ["FLOTILLA_WRITER_ID"], os.environ["FLOTILLA_WRITER_SECRET"])
READER_GRANT = os.environ["FLOTILLA_READER_GRANT"]
API = URI.removesuffix("/iceberg")


def with_credentials(pair):
    return catalog(token=None, credential=f"{pair[0]}:{pair[1]}")


# The table, written by the account's admin token.
admin = catalog()
admin.create_namespace("acl")
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("who", pa.string())])
admin.create_table("acl.events", schema=schema).append(pa.table({"id": [1], "who": ["admin"]}, schema=schema))

# The reader lists and reads, and may not append.
reader = with_credentials(READER)
check(("acl", "events") in reader.list_tables("acl"), "the reader lists the table")
t = reader.load_table("acl.events")
check(t.scan().to_arrow()["id"].to_pylist() == [1], "the reader reads")
try:
    t.append(pa.table({"id": [2], "who": ["reader"]}, schema=schema))
    raise AssertionError("the reader appended")
except ForbiddenError:
    pass
check(admin.load_table("acl.events").scan().to_arrow().num_rows == 1, "the refused append changed nothing")

# The writer appends.
writer = with_credentials(WRITER)
writer.load_table("acl.events").append(pa.table({"id": [3], "who": ["writer"]}, schema=schema))
check(sorted(reader.load_table("acl.events").scan().to_arrow()["id"].to_pylist()) == [1, 3], "the reader sees the writer's append")

# DuckDB with the same credentials (OAuth2 client credentials through the token route).
def duck(name, pair):
    con = connect()
    con.execute(
        f"""CREATE SECRET {name} (TYPE ICEBERG, CLIENT_ID '{pair[0]}', CLIENT_SECRET '{pair[1]}',
            OAUTH2_SERVER_URI '{URI}/v1/oauth/tokens')"""
    )
    con.execute(f"ATTACH '{WAREHOUSE}' AS {name}_lake (TYPE ICEBERG, ENDPOINT '{URI}', SECRET {name})")
    return con

rd = duck("reader", READER)
check(rows(rd, "SELECT id FROM reader_lake.acl.events") == [(1,), (3,)], "DuckDB reads as the reader")
try:
    rd.execute("INSERT INTO reader_lake.acl.events VALUES (4, 'duck-reader')")
    raise AssertionError("DuckDB appended as the reader")
except Exception as e:  # DuckDB raises its own error types; the endpoint's answer is 403.
    check("403" in str(e) or "Forbidden" in str(e) or "forbidden" in str(e).lower(), f"reader insert refused: {e}")
wr = duck("writer", WRITER)
wr.execute("INSERT INTO writer_lake.acl.events VALUES (5, 'duck-writer')")
check(rows(wr, "SELECT id FROM writer_lake.acl.events") == [(1,), (3,), (5,)], "DuckDB appends as the writer")
wr.close()

# A revoke in the middle of the reader's sessions: the next call is refused (the table is now
# invisible to it: as if absent).
r = requests.delete(f"{API}/v1/accounts/acme/grants/{READER_GRANT}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
check(r.status_code == 204, f"revoke: {r.status_code} {r.text}")
try:
    reader.load_table("acl.events")
    raise AssertionError("pyiceberg loaded the table after the revoke")
except (NoSuchTableError, ForbiddenError, RESTError):
    pass
try:
    rd.execute("SELECT id FROM reader_lake.acl.events").fetchall()
    raise AssertionError("DuckDB read the table after the revoke")
except Exception as e:
    check("AssertionError" not in type(e).__name__, f"DuckDB refused after the revoke: {e}")
rd.close()
print("access control flow ok")
