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
