"""DuckDB with the pip-installed extensions (no download), shared by the DuckDB scripts."""

import glob
import os
import site

import duckdb


def extension(name):
    for root in site.getsitepackages():
        found = glob.glob(os.path.join(root, f"duckdb_extension_{name}", "extensions", "*", f"{name}.duckdb_extension"))
        if found:
            return found[0]
    raise AssertionError(f"the {name} extension package is not installed")


def connect():
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    for name in ["httpfs", "avro", "iceberg"]:
        con.execute(f"LOAD '{extension(name)}'")
    return con


def rows(con, sql):
    return sorted(con.execute(sql).fetchall())
