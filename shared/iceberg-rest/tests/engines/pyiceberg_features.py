"""pyiceberg across the table features engines use: every format version (and an upgrade),
partitioned and sorted tables, schema and partition evolution, add_files, row deletes,
overwrites, inspect tables, branches and tags, register-table, two writers with pyiceberg's
own retry. Leaves tables in namespace `feat` for the DataFrame, DuckDB and Sail scripts."""

import datetime
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestampType

from common import catalog, check, refused

cat = catalog()
cat.create_namespace("feat")


def ids(t, **scan):
    return sorted(t.scan(**scan).to_arrow()["id"].to_pylist())


def snapshot_ids_in_order(t):
    return [s.snapshot_id for s in t.metadata.snapshots]


rows = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("city", pa.string())])

# ---- every format version -----------------------------------------------------------------
for v in (1, 2, 3):
    t = cat.create_table(f"feat.v{v}", schema=rows, properties={"format-version": str(v)})
    check(t.metadata.format_version == v, f"created as v{v}: {t.metadata.format_version}")
    check("format-version" not in t.properties, "format-version is not stored as a property")
    if v == 3:
        # pyiceberg 0.12 creates and reads v3 tables but writes no v3 manifests.
        e = refused(lambda: t.append(pa.table({"id": [1], "city": ["Oslo"]}, schema=rows)), "pyiceberg's v3 append")
        check("version: 3" in e, f"refused by pyiceberg: {e}")
        t = cat.load_table("feat.v3")
        check(t.metadata.format_version == 3 and t.current_snapshot() is None, "v3 on load")
        continue
    t.append(pa.table({"id": [1, 2], "city": ["Oslo", "Lima"]}, schema=rows))
    t.append(pa.table({"id": [3], "city": ["Pune"]}, schema=rows))
    t = cat.load_table(f"feat.v{v}")
    check(t.metadata.format_version == v, f"v{v} on load")
    check(ids(t) == [1, 2, 3], f"v{v} rows: {ids(t)}")
    # "The last snapshot" by position is the current one, on every load.
    check(t.metadata.snapshots[-1].snapshot_id == t.current_snapshot().snapshot_id, f"v{v} order")
    check(snapshot_ids_in_order(t) == [h.snapshot_id for h in t.history()], f"v{v} history order")

up = cat.create_table("feat.upgraded", schema=rows, properties={"format-version": "1"})
up.append(pa.table({"id": [1, 2], "city": ["Oslo", "Lima"]}, schema=rows))
with cat.load_table("feat.upgraded").transaction() as tx:
    tx.upgrade_table_version(format_version=2)
up = cat.load_table("feat.upgraded")
up.append(pa.table({"id": [3], "city": ["Pune"]}, schema=rows))
t = cat.load_table("feat.upgraded")
check(t.metadata.format_version == 2 and ids(t) == [1, 2, 3], "v1 upgraded to v2, rows kept")
# A staged create (stage-create, then one commit with assert-create), as a version 1 table.
with cat.create_table_transaction("feat.staged", schema=rows, properties={"format-version": "1"}) as tx:
    tx.append(pa.table({"id": [1], "city": ["staged"]}, schema=rows))
staged = cat.load_table("feat.staged")
check(staged.metadata.format_version == 1 and ids(staged) == [1], "staged create with its first rows")
print("format versions ok")

# ---- partitioned and sorted; partition and schema evolution ---------------------------------
events = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "city", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "qty", IntegerType(), required=False),
)
spec = PartitionSpec(
    PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"),
    PartitionField(source_id=1, field_id=1001, transform=BucketTransform(4), name="id_bucket"),
)
order = SortOrder(SortField(source_id=1, transform=IdentityTransform()))
parts = cat.create_table("feat.parts", schema=events, partition_spec=spec, sort_order=order)
check(parts.spec().fields[0].name == "ts_day" and parts.sort_order().order_id == 1, "spec and order kept")
day = datetime.datetime(2026, 12, 1, 10, 0)
ev = parts.schema().as_arrow()


def event_rows(start, n, city, days=0):
    return pa.table(
        {
            "id": list(range(start, start + n)),
            "city": [city] * n,
            "ts": [day + datetime.timedelta(days=days, minutes=i) for i in range(n)],
            "qty": list(range(n)),
        },
        schema=ev,
    )


parts.append(event_rows(1, 6, "Oslo"))
parts.append(event_rows(7, 6, "Lima", days=1))
parts = cat.load_table("feat.parts")
files = parts.inspect.files()
check(files.num_rows >= 4, f"rows spread over partitions: {files.num_rows} files")
check(ids(parts, row_filter=GreaterThanOrEqual("ts", "2026-12-02T00:00:00")) == list(range(7, 13)), "partition pruning filter")

with parts.update_spec() as u:
    u.add_identity("city")
with parts.update_schema() as u:
    u.add_column("score", DoubleType())
    u.rename_column("qty", "quantity")
    u.update_column("qty", LongType())
parts = cat.load_table("feat.parts")
check([f.name for f in parts.schema().fields] == ["id", "city", "ts", "quantity", "score"], "schema evolved")
check(len(parts.metadata.partition_specs) == 2 and parts.spec().spec_id == 1, "partition spec evolved")
check([s.schema_id for s in parts.metadata.schemas] == [0, 1], "schemas in id order")
new_rows = pa.table(
    {"id": [13, 14], "city": ["Pune", "Pune"], "ts": [day, day], "quantity": [5, 6], "score": [0.5, 1.5]},
    schema=parts.schema().as_arrow(),
)
parts.append(new_rows)
parts = cat.load_table("feat.parts")
got = parts.scan().to_arrow()
check(got.num_rows == 14 and got.column_names == ["id", "city", "ts", "quantity", "score"], "old and new specs read together")
check(sorted(x for x in got["score"].to_pylist() if x is not None) == [0.5, 1.5], "new column read")
print("partitioned, sorted, evolved ok")

# ---- row deletes and overwrites -------------------------------------------------------------
parts.delete(EqualTo("city", "Lima"))  # copy-on-write: whole files rewritten
parts = cat.load_table("feat.parts")
check(ids(parts) == list(range(1, 7)) + [13, 14], f"delete by predicate: {ids(parts)}")
check(parts.current_snapshot().summary.operation.value in ("delete", "overwrite"), "a delete snapshot")
# Merge-on-read is asked for; pyiceberg 0.12 writes copy-on-write anyway (the DuckDB script
# writes positional delete files, which pyiceberg then reads).
mor = cat.create_table("feat.mor", schema=rows, properties={"write.delete.mode": "merge-on-read"})
mor.append(pa.table({"id": [1, 2, 3, 4], "city": ["a", "b", "c", "d"]}, schema=rows))
mor.delete(EqualTo("id", 2))
mor = cat.load_table("feat.mor")
check(ids(mor) == [1, 3, 4], f"delete on a merge-on-read table: {ids(mor)}")
check(all(f["content"] == 0 for f in mor.inspect.files().to_pylist()), "pyiceberg wrote no delete files: update the engine matrix")

v2 = cat.load_table("feat.v2")
v2.overwrite(pa.table({"id": [10, 11], "city": ["Kyiv", "Rome"]}, schema=rows))
v2 = cat.load_table("feat.v2")
check(ids(v2) == [10, 11], f"overwrite: {ids(v2)}")
first = v2.history()[0].snapshot_id
check(ids(v2, snapshot_id=first) == [1, 2], "time travel before the overwrite")
print("deletes and overwrites ok")

# ---- add_files -----------------------------------------------------------------------------
adds = cat.create_table("feat.added", schema=rows)
path = f"{adds.location()}/data/external-{uuid.uuid4().hex}.parquet"
local = path.removeprefix("file://")
os.makedirs(os.path.dirname(local), exist_ok=True)
pq.write_table(pa.table({"id": [7, 8, 9], "city": ["x", "y", "z"]}, schema=rows), local)
adds.add_files([path])
adds = cat.load_table("feat.added")
check(ids(adds) == [7, 8, 9], f"add_files: {ids(adds)}")
check(adds.current_snapshot().summary["added-data-files"] == "1", "one file added")
print("add_files ok")

# ---- inspect tables ------------------------------------------------------------------------
parts = cat.load_table("feat.parts")
snaps = parts.inspect.snapshots()
check(snaps.num_rows == len(parts.metadata.snapshots), "inspect.snapshots")
check(snaps["snapshot_id"].to_pylist() == snapshot_ids_in_order(parts), "inspect.snapshots in commit order")
check(parts.inspect.manifests().num_rows >= 1, "inspect.manifests")
check(parts.inspect.files().num_rows >= 1, "inspect.files")
check(parts.inspect.entries().num_rows >= 1, "inspect.entries")
check(parts.inspect.partitions().num_rows >= 1, "inspect.partitions")
hist = parts.inspect.history()
check(hist["snapshot_id"].to_pylist() == [h.snapshot_id for h in parts.history()], "inspect.history")
check(parts.inspect.refs()["name"].to_pylist() == ["main"], "inspect.refs")
print("inspect ok")

# ---- branches and tags ---------------------------------------------------------------------
v3 = cat.create_table("feat.branches", schema=rows)
v3.append(pa.table({"id": [1, 2, 3], "city": ["a", "b", "c"]}, schema=rows))
v3 = cat.load_table("feat.branches")
base = v3.current_snapshot().snapshot_id
v3.manage_snapshots().create_tag(base, "release").create_branch(base, "dev").commit()
v3 = cat.load_table("feat.branches")
v3.append(pa.table({"id": [40], "city": ["dev"]}, schema=rows), branch="dev")
v3.append(pa.table({"id": [50], "city": ["main"]}, schema=rows))
v3 = cat.load_table("feat.branches")
check(ids(v3) == [1, 2, 3, 50], f"main moved alone: {ids(v3)}")
check(ids(v3, snapshot_id=v3.snapshot_by_name("dev").snapshot_id) == [1, 2, 3, 40], "the branch has its own commit")
check(ids(v3, snapshot_id=v3.snapshot_by_name("release").snapshot_id) == [1, 2, 3], "the tag stays")
refs = sorted(v3.inspect.refs()["name"].to_pylist())
check(refs == ["dev", "main", "release"], f"refs: {refs}")
v3.manage_snapshots().remove_tag("release").commit()
check("release" not in cat.load_table("feat.branches").metadata.refs, "tag removed")
print("branches and tags ok")

# ---- register-table ------------------------------------------------------------------------
location = cat.load_table("feat.added").metadata_location
cat.drop_table("feat.added")
try:
    cat.load_table("feat.added")
    raise AssertionError("dropped table still loads")
except NoSuchTableError:
    pass
back = cat.register_table("feat.added_again", location)
check(ids(back) == [7, 8, 9], "registered from its metadata file, rows intact")
back.append(pa.table({"id": [10], "city": ["w"]}, schema=rows))
check(ids(cat.load_table("feat.added_again")) == [7, 8, 9, 10], "a registered table takes commits")
print("register ok")

# ---- two writers: one wins, the loser retries ------------------------------------------------
race = cat.create_table("feat.race", schema=rows)
w1 = cat.load_table("feat.race")
w2 = cat.load_table("feat.race")
w1.append(pa.table({"id": [1], "city": ["one"]}, schema=rows))
# w2's base is stale: its first attempt is refused (409) and pyiceberg refreshes and retries.
w2.append(pa.table({"id": [2], "city": ["two"]}, schema=rows))
race = cat.load_table("feat.race")
check(ids(race) == [1, 2], f"both writers landed: {ids(race)}")
s1, s2 = race.metadata.snapshots
check(s2.parent_snapshot_id == s1.snapshot_id, "the retried commit sits on the winner's")
print("pyiceberg features ok")
