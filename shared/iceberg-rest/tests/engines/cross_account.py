"""Another account's token sees nothing of the catalog: no config, list, load or commit."""

import requests
from pyiceberg.exceptions import ForbiddenError, RESTError

from common import OTHER_TOKEN, URI, catalog, check

mine = catalog()
prefix = mine.properties.get("prefix")
check(prefix, "the config gave a prefix")

try:
    catalog(token=OTHER_TOKEN)
    raise AssertionError("another account could read the catalog config")
except (ForbiddenError, RESTError):
    pass

# Even with the prefix in hand, every call is refused and shows nothing.
headers = {"Authorization": f"Bearer {OTHER_TOKEN}"}
base = f"{URI}/v1/{prefix}"
table = f"{base}/namespaces/sales/tables/for_duckdb"
for method, url, body in [
    ("GET", f"{base}/namespaces", None),
    ("GET", f"{base}/namespaces/sales/tables", None),
    ("GET", table, None),
    ("POST", table, {"requirements": [], "updates": [{"action": "set-properties", "updates": {"hijacked": "yes"}}]}),
    ("DELETE", table, None),
]:
    r = requests.request(method, url, headers=headers, json=body, timeout=30)
    check(r.status_code in (403, 404), f"{method} {url}: {r.status_code}")
    check("for_duckdb" not in r.text and "Oslo" not in r.text, f"{method} leaked: {r.text}")

t = mine.load_table("sales.for_duckdb")
check("hijacked" not in t.properties, "nothing changed")
print("cross-account ok")
