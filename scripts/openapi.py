#!/usr/bin/env python3
"""Converts the API's OpenAPI source (shared/http/openapi/openapi.yaml) to the JSON copy the
router serves at GET /v1/openapi.json (shared/http/openapi/openapi.json, compiled in with
include_str!).

    scripts/openapi.py           rewrite the JSON copy
    scripts/openapi.py --check   exit 1 if the JSON copy is stale (scripts/schemathesis.sh)

Needs PyYAML (installed in .venv with schemathesis).
"""
import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "shared/http/openapi/openapi.yaml"
TARGET = ROOT / "shared/http/openapi/openapi.json"


def render() -> str:
    doc = yaml.safe_load(SOURCE.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("openapi") != "3.0.3":
        raise SystemExit(f"{SOURCE}: not an OpenAPI 3.0.3 document")
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is stale: run scripts/openapi.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
