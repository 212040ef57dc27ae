"""More engines on the moto S3 warehouse, after s3_vended_flow.py.

ClickHouse (chdb: ClickHouse in process) with the catalog as a `DataLakeCatalog` database
of type `rest`, on the moto S3 warehouse, after s3_vended_flow.py: lists and reads the tables
pyiceberg and DuckDB wrote, reads an older snapshot, inserts, deletes and adds a column;
pyiceberg reads each change. (ClickHouse appends only on top of snapshots whose summary has
the running totals, which DuckDB's omit: it writes to a table pyiceberg made.)

ClickHouse reads the files with static keys of its own (moto takes any): with the catalog's
vended credentials, ClickHouse 26.9 joins the metadata path wrongly when the catalog also
answers an `s3.endpoint`, as every S3-compatible store needs (ClickHouse PR 106823, open). The
last check pins that refusal, so a fixed chdb shows up here."""

import os

import pyarrow as pa
import pyarrow.fs

# As in s3_vended_flow.py: pyiceberg's small uploads as one PutObject on moto.
_S3FileSystem = pyarrow.fs.S3FileSystem
pyarrow.fs.S3FileSystem = lambda **kw: _S3FileSystem(allow_delayed_open=True, **kw)

from chdb import session  # noqa: E402

from common import TOKEN, URI, WAREHOUSE, catalog, check, refused, sail  # noqa: E402

os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")
S3_WAREHOUSE = os.environ["FLOTILLA_S3_WAREHOUSE"]
ENDPOINT = os.environ["FLOTILLA_S3_ENDPOINT"]
BUCKET = S3_WAREHOUSE.removeprefix("s3://").split("/")[0]


def database(s, name, storage):
    s.query(
        f"""CREATE DATABASE {name} ENGINE = DataLakeCatalog('{URI}/v1')
        SETTINGS catalog_type = 'rest', warehouse = '{WAREHOUSE}',
                 catalog_credential = 'clickhouse:{TOKEN}', oauth_server_uri = '{URI}/v1/oauth/tokens',
                 auth_scope = 'catalog', {storage}"""
    )


def csv(s, sql):
    return [line for line in str(s.query(sql, "CSV")).splitlines() if line]


def pyiceberg_ids(name="s3ns.ch"):
    return sorted(catalog().load_table(name).scan().to_arrow()["id"].to_pylist())


schema = pa.schema([pa.field("id", pa.int64()), pa.field("city", pa.string())])
t = catalog().create_table("s3ns.ch", schema=schema)
t.append(pa.table({"id": [1, 2], "city": ["Oslo", "Lima"]}, schema=schema))
t.append(pa.table({"id": [3], "city": ["Pune"]}, schema=schema))


s = session.Session()
s.query("SET allow_experimental_database_iceberg = 1")
s.query("SET allow_insert_into_iceberg = 1")
database(
    s,
    "lake",
    f"""vended_credentials = 0, aws_access_key_id = 'test', aws_secret_access_key = 'test',
        region = 'us-east-1', storage_endpoint = '{ENDPOINT}/{BUCKET}'""",
)
tables = csv(s, "SHOW TABLES FROM lake")
check('"s3ns.cities"' in tables and '"s3ns.ch"' in tables, f"ClickHouse lists the tables: {tables}")
for name in ("s3ns.cities", "s3ns.ch"):
    want = pyiceberg_ids(name)
    got = [int(r.split(",")[0]) for r in csv(s, f"SELECT id, city FROM lake.`{name}` ORDER BY id")]
    check(got == want, f"ClickHouse reads {name}: {got} != {want}")
first = catalog().load_table("s3ns.ch").history()[0].snapshot_id
old = csv(s, f"SELECT count() FROM lake.`s3ns.ch` SETTINGS iceberg_snapshot_id = {first}")
check(old == ["2"], f"ClickHouse time travel to the first snapshot: {old}")

s.query("INSERT INTO lake.`s3ns.ch` VALUES (5, 'Rome')")
check(pyiceberg_ids() == [1, 2, 3, 5], f"pyiceberg reads ClickHouse's insert: {pyiceberg_ids()}")
s.query("DELETE FROM lake.`s3ns.ch` WHERE id = 1")
check(pyiceberg_ids() == [2, 3, 5], f"pyiceberg reads ClickHouse's delete: {pyiceberg_ids()}")
s.query("ALTER TABLE lake.`s3ns.ch` ADD COLUMN qty Nullable(Int32)")
fields = [f.name for f in catalog().load_table("s3ns.ch").schema().fields]
check(fields == ["id", "city", "qty"], f"ClickHouse evolved the schema: {fields}")
print("clickhouse ok")

# Vended credentials: ClickHouse asks for them and then reads a doubled path (404).
database(s, "vended", f"vended_credentials = 1, storage_endpoint = '{ENDPOINT}/{BUCKET}'")
e = refused(lambda: s.query("SELECT count() FROM vended.`s3ns.ch`", "CSV"), "ClickHouse with vended credentials")
check("404" in e, f"ClickHouse with vended credentials fails on the path: {e}")
print("clickhouse vended-credentials refusal pinned")

# ---- Daft and Polars with the vended credentials --------------------------------------------
import daft  # noqa: E402
import polars as pl  # noqa: E402

t = catalog().load_table("s3ns.ch")
want = pyiceberg_ids()
got = sorted(daft.read_iceberg(t).to_pydict()["id"])
check(got == want, f"daft reads S3 with vended credentials: {got} != {want}")
io = t.io.properties
check(io.get("s3.session-token"), "the table IO holds vended credentials")
options = {
    "aws_endpoint_url": io["s3.endpoint"],
    "aws_allow_http": "true",
    "aws_access_key_id": io["s3.access-key-id"],
    "aws_secret_access_key": io["s3.secret-access-key"],
    "aws_session_token": io["s3.session-token"],
    "aws_region": io["s3.region"],
}
got = sorted(pl.scan_iceberg(t, storage_options=options).collect()["id"].to_list())
check(got == want, f"polars reads S3 with vended credentials: {got} != {want}")
daft.from_pydict({"id": [6], "city": ["Daft"], "qty": [1]}).write_iceberg(catalog().load_table("s3ns.ch"), mode="append")
check(pyiceberg_ids() == want + [6], f"daft appends on S3 with vended credentials: {pyiceberg_ids()}")
print("daft and polars on s3 ok")

# ---- Sail does not use vended credentials ----------------------------------------------------
server, spark = sail()
# Sail asks its own AWS configuration (no endpoint: AWS itself, unreachable here).
e = refused(lambda: spark.sql("SELECT id FROM lake.s3ns.ch").collect(), "Sail with vended credentials")
print(f"Sail without storage access, as expected: {e[:120]}")
spark.stop()
server.stop()
print("sail vended-credentials refusal pinned")
