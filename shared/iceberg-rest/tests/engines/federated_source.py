"""Writes the upstream's table for tests/federated.rs: pyiceberg creates `sales.orders` in
a native Flotilla catalog on moto S3 (the warehouse the upstream fixture then serves) and
appends rows. `create` writes ids 1-3, `append` adds ids 4-5."""

import sys

import pyarrow as pa
import pyarrow.fs

# See s3_vended_flow.py: moto's multipart answer, one PutObject instead.
_S3FileSystem = pyarrow.fs.S3FileSystem
pyarrow.fs.S3FileSystem = lambda **kw: _S3FileSystem(allow_delayed_open=True, **kw)

from common import catalog

schema = pa.schema([pa.field("id", pa.int64()), pa.field("city", pa.string())])
cat = catalog()
if sys.argv[1] == "create":
    cat.create_namespace("sales")
    t = cat.create_table("sales.orders", schema=schema)
    t.append(pa.table({"id": [1, 2, 3], "city": ["Oslo", "Lima", "Pune"]}, schema=schema))
else:
    t = cat.load_table("sales.orders")
    t.append(pa.table({"id": [4, 5], "city": ["Kyiv", "Quito"]}, schema=schema))
print("source written")
