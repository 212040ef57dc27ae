"""The warehouse on moto S3, no static key anywhere: pyiceberg and DuckDB reach the table
files only with the temporary credentials the catalog vends (STS AssumeRole through moto)
and the S3 endpoint it answers in `config`."""

import os

import pyarrow as pa
import pyarrow.fs

# pyarrow 26 rejects moto 5.2's CompleteMultipartUpload answer ("error embedded in a 200 OK
# response"), with any credentials, vended or static. A delayed open uploads a small file
# with one PutObject instead; pyiceberg builds its S3 file system through this name at call
# time, so the option reaches it. Nothing about credentials changes.
_S3FileSystem = pyarrow.fs.S3FileSystem
pyarrow.fs.S3FileSystem = lambda **kw: _S3FileSystem(allow_delayed_open=True, **kw)

from common import TOKEN, URI, WAREHOUSE, catalog, check
from duckdb_flow_lib import connect, rows

S3_WAREHOUSE = os.environ["FLOTILLA_S3_WAREHOUSE"]
check(not [k for k in os.environ if k.startswith("AWS_") and k not in (
    "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED")],
    "the engines run without AWS keys or endpoints in their environment")

cat = catalog()
check("s3.endpoint" in cat.properties, f"the config answers the S3 endpoint: {sorted(cat.properties)}")
cat.create_namespace("s3ns")
schema = pa.schema([pa.field("id", pa.int64()), pa.field("city", pa.string())])
t = cat.create_table("s3ns.cities", schema=schema)
check(t.location().startswith(S3_WAREHOUSE + "/"), f"table below the s3 warehouse: {t.location()}")
io = t.io.properties
check(io.get("s3.session-token"), "a session token was vended")
check(io.get("s3.access-key-id") not in (None, "", "test"), "the key is a vended one")
t.append(pa.table({"id": [1, 2], "city": ["Oslo", "Lima"]}, schema=schema))
t.append(pa.table({"id": [3], "city": ["Pune"]}, schema=schema))
t = cat.load_table("s3ns.cities")
check(t.metadata_location.startswith(S3_WAREHOUSE + "/"), f"metadata on s3: {t.metadata_location}")
got = sorted(t.scan().to_arrow()["id"].to_pylist())
check(got == [1, 2, 3], f"pyiceberg reads both appends from s3: {got}")
print("pyiceberg on s3 ok")

# DuckDB: a bearer token and nothing else; its S3 secret comes from the vended credentials.
con = connect()
con.execute(f"CREATE SECRET flotilla_bearer (TYPE ICEBERG, TOKEN '{TOKEN}')")
con.execute(f"ATTACH '{WAREHOUSE}' AS lake (TYPE ICEBERG, ENDPOINT '{URI}', SECRET flotilla_bearer)")
secrets = con.execute("SELECT type FROM duckdb_secrets()").fetchall()
check(("s3",) not in secrets, f"no S3 secret before a table is loaded: {secrets}")
got = rows(con, "SELECT id, city FROM lake.s3ns.cities")
check(got == [(1, "Oslo"), (2, "Lima"), (3, "Pune")], f"duckdb reads pyiceberg's rows from s3: {got}")
con.execute("INSERT INTO lake.s3ns.cities VALUES (4, 'Kyiv')")
got = rows(con, "SELECT id FROM lake.s3ns.cities")
check(got == [(1,), (2,), (3,), (4,)], f"duckdb insert on s3: {got}")
con.close()

ids = sorted(catalog().load_table("s3ns.cities").scan().to_arrow()["id"].to_pylist())
check(ids == [1, 2, 3, 4], f"pyiceberg reads DuckDB's insert: {ids}")
print("duckdb on s3 ok")
