#!/usr/bin/env bash
# Lints the SAM template the way CloudFormation will see it.
#
# cfn-lint alone does not expand AWS::Serverless resources, so a reference inside one
# (e.g. `!GetAtt Missing.Arn` in a function policy) can pass. This script translates each
# template offline with aws-sam-translator (scripts/sam_translate.py: no AWS credentials,
# no network) and runs cfn-lint on the translated JSON, failing on any cfn-lint error.
# It then proves the check can fail: every negative fixture in infra/tests/*.yaml must be
# rejected. The translated main template is also checked for the deployment invariants in
# scripts/check_template.py (arm64, PITR, TTL, DLQ + alarm, JWT, IAM without wildcards,
# tracing, the runbook's alarms and dashboard on metrics the code writes), whose own
# self-test proves those checks refuse a broken template.
#
# Usage: scripts/lint-template.sh [TEMPLATE...]   (default: infra/template.yaml + fixtures)
# Python: $FLOTILLA_PYTHON, else .venv/bin/python (created by scripts/test.sh with
# aws-sam-translator==1.110.0 and cfn-lint==1.51.0), else python3.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [[ -n "${FLOTILLA_PYTHON:-}" ]]; then
  py="$FLOTILLA_PYTHON"
elif [[ -x .venv/bin/python ]]; then
  py=.venv/bin/python
else
  py=python3
fi
if ! "$py" -c 'import samtranslator, cfnlint' 2>/dev/null; then
  echo "lint-template: $py lacks aws-sam-translator and cfn-lint;" \
    "run: $py -m pip install aws-sam-translator==1.110.0 cfn-lint==1.51.0" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1

# lint TEMPLATE: 0 when it translates and cfn-lint reports no error.
lint() {
  local template="$1" out
  out="$work/$(basename "$template" .yaml).json"
  if ! "$py" scripts/sam_translate.py "$template" "$out"; then
    return 1
  fi
  local rc=0
  "$py" -c 'import sys; from cfnlint.runner import main; sys.exit(main())' \
    --regions us-east-1 --format parseable -- "$out" || rc=$?
  # cfn-lint's exit code is a bit mask: 1 fatal, 2 error, 4 warning, 8 informational.
  if (( rc & 3 )); then
    return 1
  fi
  return 0
}

failed=0
if [[ $# -gt 0 ]]; then
  for template in "$@"; do
    if lint "$template"; then echo "lint-template: ok $template"; else echo "lint-template: FAILED $template" >&2; failed=1; fi
  done
  exit "$failed"
fi

if lint infra/template.yaml && "$py" scripts/check_template.py "$work/template.json" \
  && "$py" scripts/check_template.py --self-test "$work/template.json"; then
  echo "lint-template: ok infra/template.yaml"
else
  echo "lint-template: FAILED infra/template.yaml" >&2
  failed=1
fi

shopt -s nullglob
fixtures=(infra/tests/*.yaml)
if [[ ${#fixtures[@]} -eq 0 ]]; then
  echo "lint-template: no negative fixtures under infra/tests" >&2
  failed=1
fi
for fixture in "${fixtures[@]}"; do
  if lint "$fixture" >"$work/fixture.log" 2>&1; then
    echo "lint-template: FAILED negative fixture $fixture was accepted" >&2
    failed=1
  else
    echo "lint-template: ok negative fixture $fixture rejected: $(grep -m1 -E 'E[0-9]{4}|translation error' "$work/fixture.log" || true)"
  fi
done
exit "$failed"
