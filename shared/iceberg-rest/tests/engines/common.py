"""Shared set-up of the engine scripts: the endpoint, tokens and warehouse come from the
environment the Rust harness (tests/engines.rs) sets."""

import os

from pyiceberg.catalog import load_catalog

URI = os.environ["FLOTILLA_ICEBERG_URI"]
TOKEN = os.environ["FLOTILLA_TOKEN"]
OTHER_TOKEN = os.environ["FLOTILLA_OTHER_TOKEN"]
WAREHOUSE = os.environ["FLOTILLA_WAREHOUSE"]


def catalog(token=TOKEN, **extra):
    props = {"type": "rest", "uri": URI, "warehouse": WAREHOUSE}
    if token is not None:
        props["token"] = token
    props.update(extra)
    return load_catalog("flotilla", **props)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def refused(action, what):
    """Runs `action`, which the engine is known not to do, and returns its error. Should it
    succeed, the engine matrix in docs/iceberg-rest.md is out of date: the check fails."""
    try:
        action()
    except Exception as e:  # noqa: BLE001 - whatever the engine raises
        return str(e)
    raise AssertionError(f"{what} now works: update the engine matrix in docs/iceberg-rest.md")


def sail():
    """A Sail Spark Connect server with this catalog as `lake` (the default), and a session."""
    import os

    os.environ["SAIL_CATALOG__LIST"] = (
        f'[{{type="iceberg-rest", name="lake", uri="{URI}", warehouse="{WAREHOUSE}", bearer_access_token="{TOKEN}"}}]'
    )
    os.environ["SAIL_CATALOG__DEFAULT_CATALOG"] = "lake"
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    _, port = server.listening_address
    return server, SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
