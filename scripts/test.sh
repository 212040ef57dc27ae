#!/usr/bin/env bash
# The project's test command (README, CI via .ci/run):
#   1. a Python venv (.venv) with the pinned tools below, created or updated if needed,
#      then the SAM template lint (scripts/lint-template.sh);
#      Debian's chromium and chromium-driver for the web console test, installed with
#      apt-get when missing (needs root);
#   2. a moto server on a free loopback port, for the AWS backends (stopped on any exit);
#   3. cargo fmt --check, clippy with -D warnings, then every test (nextest, or cargo test).
# Extra arguments go to the test runner, e.g. `scripts/test.sh -p flotilla-metastore`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# ---- Pinned tool versions: the only place they live --------------------------------------
PY_REQUIREMENTS=(
  "moto[server]==5.2.1"
  # SAM template lint (scripts/lint-template.sh): offline translation, then cfn-lint.
  "aws-sam-translator==1.110.0"
  "cfn-lint==1.51.0"
  # `cargo lambda watch` / `invoke` for the Lambda end-to-end test (tests/tests/lambda_e2e.rs).
  "cargo-lambda==1.9.2"
  # API fuzzing against the served OpenAPI document (scripts/schemathesis.sh).
  "schemathesis==4.32.5"
  # Real engines against the Iceberg REST endpoint (shared/iceberg-rest/tests/engines.rs);
  # DuckDB loads its extensions from these packages' files, never from the network.
  "pyiceberg[pyarrow]==0.12.0"
  # pyiceberg's bucket and truncate transforms when it writes partitioned tables.
  "pyiceberg-core==0.10.1"
  "pyarrow==26.0.1"
  "duckdb==1.5.5"
  "duckdb-extension-iceberg==1.5.5"
  "duckdb-extension-httpfs==1.5.5"
  "duckdb-extension-avro==1.5.5"
  # ClickHouse in process (DataLakeCatalog database engine).
  "chdb==4.4.0"
  "chdb-core==26.9.0"
  # Sail (a Spark Connect server) and the Spark Connect client that drives it.
  "pysail==0.7.2"
  "pyspark-client==4.2.0"
  # Daft and Polars through pyiceberg's catalog (daft 0.7 needs pyarrow below 26).
  "daft==0.6.14"
  "polars==2.1.0"
)

VENV="$ROOT/.venv"
OUT="$ROOT/.ci/out"
mkdir -p "$OUT"
# The same target directory as `cargo run` (the README's first command), so a fresh clone
# builds its dependencies once; CI (.ci/run) and worktrees point CARGO_TARGET_DIR elsewhere.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

log() { printf '==> %s\n' "$*" >&2; }

# ---- 1. Python venv ----------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV" || {
    echo "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 1
  }
fi
STAMP="$VENV/.flotilla-requirements"
WANT="$(printf '%s\n' "${PY_REQUIREMENTS[@]}")"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
  log "installing pinned Python tools"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet "${PY_REQUIREMENTS[@]}"
  printf '%s\n' "$WANT" >"$STAMP"
fi

# ---- 1a. Self-containment: no tracked file reaches outside the repository -------------
log "scripts/check_self_contained.py"
"$VENV/bin/python" "$ROOT/scripts/check_self_contained.py" "$ROOT"
# No module of a crate depends on another in a cycle (docs/architecture.md, "Module cycles").
log "scripts/check_module_cycles.py"
"$VENV/bin/python" "$ROOT/scripts/check_module_cycles.py" --self-test
(cd "$ROOT" && "$VENV/bin/python" scripts/check_module_cycles.py)
# The one optional switch: an external ParqDB conformance set beside the clone runs as an
# extra (shared/parqdb/tests/fixture_sets); a clone without it uses the project's own set.
if [[ -z "${FLOTILLA_PARQDB_CONFORMANCE_DIR:-}" && -f "$ROOT/../shared/parqdb/fixtures/v1/catalog.json" ]]; then
  export FLOTILLA_PARQDB_CONFORMANCE_DIR="$ROOT/../shared/parqdb/fixtures/v1"
  log "ParqDB conformance set: $FLOTILLA_PARQDB_CONFORMANCE_DIR"
fi

# ---- 1b. SAM template lint (needs only the venv, so it runs before any compilation) ---
log "scripts/lint-template.sh"
FLOTILLA_PYTHON="$VENV/bin/python" bash "$ROOT/scripts/lint-template.sh"
# The Lambda end-to-end test runs this cargo-lambda (it fails when the variable is unset).
export FLOTILLA_CARGO_LAMBDA="$VENV/bin/cargo-lambda"
# The Iceberg engine tests run pyiceberg and DuckDB from this interpreter.
export FLOTILLA_ENGINES_PYTHON="$VENV/bin/python"

# ---- 1c. Chromium for the web console test (cli/tests/console.rs) ---------------------
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "chromium and chromium-driver are missing: run as root, or apt-get install chromium chromium-driver" >&2
    exit 1
  fi
  log "installing chromium and chromium-driver (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# ---- 2. moto server ----------------------------------------------------------------------
MOTO_PID=""
MOTO_LOG="$OUT/moto.log"
MOTO_SERIAL_PID=""
cleanup() {
  local status=$?
  for pid in "$MOTO_PID" "$MOTO_SERIAL_PID"; do
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [[ $status -ne 0 && -s "$MOTO_LOG" ]]; then
    echo "---- last lines of $MOTO_LOG ----" >&2
    tail -n 20 "$MOTO_LOG" >&2 || true
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

MOTO_PORT="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
log "starting moto_server on 127.0.0.1:$MOTO_PORT"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$MOTO_LOG" 2>&1 &
MOTO_PID=$!

# Readiness polling: bounded (~30 s), fails fast if the server died.
ready=""
for _ in $(seq 1 150); do
  if ! kill -0 "$MOTO_PID" 2>/dev/null; then
    echo "moto_server exited during start-up" >&2
    exit 1
  fi
  if "$VENV/bin/python" - "$MOTO_PORT" <<'PY' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/moto-api/", timeout=1).read()
PY
    ready=1
    break
  fi
  sleep 0.2
done
[[ -n "$ready" ]] || { echo "moto_server did not answer on port $MOTO_PORT" >&2; exit 1; }

export FLOTILLA_MOTO_ENDPOINT="http://127.0.0.1:$MOTO_PORT"

# A second moto that serves one request at a time (scripts/moto_serial.py), for the
# same-key race tests: the threaded one does not isolate concurrent transactions.
MOTO_SERIAL_PORT="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
log "starting single-threaded moto on 127.0.0.1:$MOTO_SERIAL_PORT"
"$VENV/bin/python" "$ROOT/scripts/moto_serial.py" "$MOTO_SERIAL_PORT" >"$OUT/moto-serial.log" 2>&1 &
MOTO_SERIAL_PID=$!
ready=""
for _ in $(seq 1 150); do
  kill -0 "$MOTO_SERIAL_PID" 2>/dev/null || { echo "single-threaded moto exited during start-up" >&2; exit 1; }
  if "$VENV/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}/moto-api/', timeout=1).read()" "$MOTO_SERIAL_PORT" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.2
done
[[ -n "$ready" ]] || { echo "single-threaded moto did not answer on port $MOTO_SERIAL_PORT" >&2; exit 1; }
export FLOTILLA_MOTO_SERIAL_ENDPOINT="http://127.0.0.1:$MOTO_SERIAL_PORT"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
# Keep the developer's own AWS configuration and the instance metadata service out of tests.
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
unset AWS_PROFILE
# The deployment's own AWS identity (assume-role, ambient) in tests: STS is moto, reached
# through the standard SDK variable, exactly as a deployment configures it.
export AWS_ENDPOINT_URL_STS="$FLOTILLA_MOTO_ENDPOINT"
# Tests that need moto state of their own (IAM enforcement is server-wide) start a private one.
export FLOTILLA_MOTO_SERVER="$VENV/bin/moto_server"

# ---- 3. Rust checks and tests ------------------------------------------------------------
log "cargo fmt --all --check"
cargo fmt --all --check

log "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

if cargo nextest --version >/dev/null 2>&1; then
  log "cargo nextest run --workspace"
  cargo nextest run --workspace --no-fail-fast "$@"
  # nextest does not run doctests.
  log "cargo test --workspace --doc"
  cargo test --workspace --doc
else
  log "cargo-nextest not found; cargo test --workspace"
  cargo test --workspace --no-fail-fast "$@"
fi
# Schemathesis against `flotilla serve` (the debug binary the tests just built).
log "scripts/schemathesis.sh"
bash scripts/schemathesis.sh
log "all checks passed"
