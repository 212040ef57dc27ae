#!/usr/bin/env bash
# Property-based API fuzzing of `flotilla serve` against its own served OpenAPI document
# (GET /v1/openapi.json), with schemathesis from the project venv (scripts/test.sh pins it).
#
#   1. refuses a stale openapi.json (scripts/openapi.py --check);
#   2. starts `flotilla serve` (the debug binary in CARGO_TARGET_DIR, brought up to date) on a
#      free loopback port with a temporary data dir, an operator bootstrap token and a token
#      file scoping a second token to account `acme`; always stopped on exit;
#   3. creates account `acme`, then runs schemathesis twice with a fixed seed and a bounded
#      number of examples per operation:
#        - every operation with the account-scoped token (account routes in `acme`;
#          operator routes must answer 403 in the documented shape);
#        - the operator routes (/v1/accounts, /v1/admin/*) with the operator token;
#      checks: no 5xx; responses conform to the documented schema, status codes, content
#      types and headers; requests that violate the document are refused (4xx); a deleted
#      resource is gone and a created one is there (stateful phase over the document's links);
#   4. reads /v1/admin/metrics and requires the five counter families of docs/api.md.
#
# Environment: SCHEMATHESIS_EXAMPLES (default 25), SCHEMATHESIS_SEED (default 20250101),
# SCHEMATHESIS_TIMEOUT seconds per run (default 600), SCHEMATHESIS_CHECKS (comma list),
# VENV (default .venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
ST="$VENV/bin/schemathesis"
EXAMPLES="${SCHEMATHESIS_EXAMPLES:-25}"
SEED="${SCHEMATHESIS_SEED:-20250101}"
RUN_TIMEOUT="${SCHEMATHESIS_TIMEOUT:-600}"
OUT="$ROOT/.ci/out/schemathesis"
mkdir -p "$OUT"

log() { printf '==> %s\n' "$*" >&2; }

[[ -x "$ST" ]] || { echo "schemathesis not found in $VENV (run scripts/test.sh once)" >&2; exit 1; }

# ---- 1. the served document is the source's conversion -----------------------------------
"$PY" scripts/openapi.py --check

# ---- 2. flotilla serve ---------------------------------------------------------------------
# After scripts/test.sh's cargo tests this is a no-op; standalone it makes sure the binary
# serves the current router (and the current openapi.json).
BIN="$CARGO_TARGET_DIR/debug/flotilla"
cargo build --quiet -p flotilla-cli --bin flotilla

WORK="$(mktemp -d)"
SERVER_PID=""
SERVER_LOG="$OUT/serve.log"
cleanup() {
  local status=$?
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ $status -ne 0 && -s "$SERVER_LOG" ]]; then
    echo "---- last lines of $SERVER_LOG ----" >&2
    tail -n 30 "$SERVER_LOG" >&2 || true
  fi
  rm -rf "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Random tokens per run (never printed).
OPERATOR_TOKEN="op-$("$PY" -c 'import secrets; print(secrets.token_hex(16))')"
ACME_TOKEN="acme-$("$PY" -c 'import secrets; print(secrets.token_hex(16))')"
umask 077
"$PY" - "$WORK/tokens.json" "$ACME_TOKEN" <<'PY'
import json, sys
json.dump({"tokens": [{"token": sys.argv[2], "operator": False, "accounts": ["acme"]}]}, open(sys.argv[1], "w"))
PY

PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
BASE="http://127.0.0.1:$PORT"
log "starting flotilla serve on $BASE"
FLOTILLA_BOOTSTRAP_TOKEN="$OPERATOR_TOKEN" FLOTILLA_TOKENS_FILE="$WORK/tokens.json" FLOTILLA_SCHEDULE_SECS=3600 \
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" --allow-insecure-upstreams \
  >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!

# Readiness: bounded (~30 s), fails fast if the server died.
ready=""
for _ in $(seq 1 150); do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "flotilla serve exited during start-up" >&2
    exit 1
  fi
  if "$PY" - "$BASE" <<'PY' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/v1/health", timeout=1).read()
PY
    ready=1
    break
  fi
  sleep 0.2
done
[[ -n "$ready" ]] || { echo "flotilla serve did not answer on $BASE" >&2; exit 1; }

# ---- 3. schemathesis -----------------------------------------------------------------------
"$PY" - "$BASE" "$OPERATOR_TOKEN" <<'PY'
import json, sys, urllib.request
req = urllib.request.Request(
    sys.argv[1] + "/v1/accounts",
    data=json.dumps({"id": "acme", "display_name": "acme"}).encode(),
    headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"},
    method="POST",
)
with urllib.request.urlopen(req, timeout=10) as r:
    assert r.status == 201, r.status
PY

CHECKS="${SCHEMATHESIS_CHECKS:-not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance,response_headers_conformance,negative_data_rejection,use_after_free,ensure_resource_availability}"
COMMON=(
  --checks "$CHECKS"
  --max-examples "$EXAMPLES"
  --seed "$SEED"
  --generation-database none
  --workers 1
  --request-timeout 30
  --phases examples,coverage,fuzzing,stateful
  --suppress-health-check all
  --no-color
)

log "schemathesis: every operation, account-scoped token ($EXAMPLES examples per operation, seed $SEED)"
timeout "$RUN_TIMEOUT" "$ST" --config-file scripts/schemathesis.toml run "$BASE/v1/openapi.json" \
  "${COMMON[@]}" -H "Authorization: Bearer $ACME_TOKEN" \
  --report junit --report-junit-path "$OUT/account.xml" --output-sanitize true

log "schemathesis: operator routes, operator token"
timeout "$RUN_TIMEOUT" "$ST" run "$BASE/v1/openapi.json" \
  "${COMMON[@]}" -H "Authorization: Bearer $OPERATOR_TOKEN" \
  --include-path-regex '^/v1/(accounts|admin/.*)$' \
  --report junit --report-junit-path "$OUT/operator.xml" --output-sanitize true

# ---- 4. metrics after the run ---------------------------------------------------------------
"$PY" - "$BASE" "$OPERATOR_TOKEN" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/admin/metrics", headers={"Authorization": "Bearer " + sys.argv[2]})
text = urllib.request.urlopen(req, timeout=10).read().decode()
need = [
    'flotilla_metastore_requests_total{op="get"}',
    'flotilla_metastore_requests_total{op="batch_get"}',
    'flotilla_metastore_requests_total{op="query"}',
    'flotilla_metastore_requests_total{op="count"}',
    'flotilla_metastore_requests_total{op="transact"}',
    "flotilla_metastore_items_read_total",
    "flotilla_metastore_items_written_total",
    'flotilla_upstream_requests_total{protocol="iceberg_rest"}',
    'flotilla_upstream_requests_total{protocol="unity"}',
    'flotilla_upstream_requests_total{protocol="delta_sharing"}',
    'flotilla_directory_refresh_total{outcome="unchanged"}',
    'flotilla_directory_refresh_total{outcome="reloaded"}',
    'flotilla_directory_refresh_total{outcome="failed"}',
]
series = {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
missing = [n for n in need if n not in series]
if missing:
    sys.exit(f"/v1/admin/metrics lacks {missing}")
PY
log "schemathesis: no server error, no schema violation"
