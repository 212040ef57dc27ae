"""A pyiceberg commit through /iceberg writes exactly one `update-table` event whose metadata
location is the table's new one, read through the Iceberg events endpoint
(`POST /iceberg/v1/{prefix}/events`) and `GET /v1/accounts/{a}/events`. Creates namespace
`ev` with tables `t1`, `t2`, `t3` (a later reconciliation mirrors them)."""

import json
import urllib.request

import pyarrow as pa

from common import TOKEN, URI, WAREHOUSE, catalog, check

ROOT = URI[: -len("/iceberg")]
ACCOUNT = WAREHOUSE.split("/")[0]


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{ROOT}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


prefix = call("GET", f"/iceberg/v1/config?warehouse={WAREHOUSE}")["overrides"]["prefix"]
catalog_id = prefix.split(".", 1)[1]


def iceberg_events(token=None):
    """Every event after `token` through the Iceberg endpoint, and the token to resume."""
    out = []
    while True:
        body = {"page-size": 50}
        if token is not None:
            body["continuation-token"] = token
        page = call("POST", f"/iceberg/v1/{prefix}/events", body)
        token = page["continuation-token"]
        if not page["events"]:
            return out, token
        out.extend(page["events"])


def api_events(token=None):
    """Every event of the catalog after `token` through the /v1 feed, and the token."""
    out = []
    while True:
        path = f"/v1/accounts/{ACCOUNT}/events?catalog_id={catalog_id}&page_size=50"
        if token is not None:
            path += f"&page_token={token}"
        page = call("GET", path)
        token = page["next_page_token"]
        if not page["items"]:
            return out, token
        out.extend(page["items"])


cat = catalog()
cat.create_namespace("ev")
schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
tables = {n: cat.create_table(f"ev.{n}", schema=schema) for n in ("t1", "t2", "t3")}
_, iceberg_token = iceberg_events()
_, api_token = api_events()

t1 = tables["t1"]
before = t1.metadata_location
t1.append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=schema))
after = cat.load_table("ev.t1").metadata_location
check(after != before, "the append moved the metadata location")

events, _ = iceberg_events(iceberg_token)
check(len(events) == 1, f"one event for one commit, got {events}")
e = events[0]["operation"]
check(e["operation-type"] == "update-table", f"update-table: {e}")
check(e["identifier"] == {"namespace": ["ev"], "name": "t1"}, f"identifier: {e}")
check(e["metadata-location"] == after, f"the new metadata location: {e} vs {after}")
check(
    any(u.get("action") == "add-snapshot" for u in e["updates"]),
    f"the commit's updates summarized: {e}",
)

items, _ = api_events(api_token)
check(len(items) == 1, f"one event on the /v1 feed, got {items}")
op = items[0]["operation"]
check(op["type"] == "update-table" and op["name"] == "t1", f"/v1 event: {op}")
check(op["metadata_location"] == after, f"/v1 metadata location: {op} vs {after}")
check(items[0]["event_id"] == events[0]["event-id"], "the same event on both doors")
check(items[0]["actor"]["type"] == "PRINCIPAL", f"actor: {items[0]['actor']}")
print("pyiceberg_events: one commit, one update-table event with the new metadata location")
