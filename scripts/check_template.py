"""Checks the deployment invariants of the translated template (CloudFormation JSON).

cfn-lint proves the template is well-formed; this proves it still says what
docs/deploy.md promises: arm64 custom-runtime functions, a table with point-in-time
recovery, deletion protection and TTL on the attribute the metastore writes (`ttl`),
partial batch responses, a dead-letter queue with an alarm, bounded log retention, JWT on
every route but the health check, IAM statements without wildcards beyond the two that
cannot be scoped, and roles that grant at least what each function's code calls (and no
more than the SYSTEM partition to finalize), with the environment its code reads.

Usage: python check_template.py TRANSLATED.json
"""

import json
import sys

# Actions whose Resource may be "*": they cannot be scoped to a resource.
UNSCOPABLE = {"secretsmanager:ListSecrets"}

# What the code of each function calls, so a role cannot drift below it (TransactWriteItems
# is authorized per item: PutItem/UpdateItem/DeleteItem/ConditionCheckItem; SendMessageBatch
# by sqs:SendMessage). Sources: shared/metastore/src/dynamo.rs (GetItem, BatchGetItem,
# Query, TransactWriteItems), shared/secrets/src/aws.rs (CreateSecret, GetSecretValue,
# DeleteSecret, ListSecrets), shared/runtime/src/queue.rs (SendMessageBatch),
# shared/core/src/directory.rs (finalize: strong GetItem + put-if-absent of the marker).
METASTORE_RW = {
    "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:PutItem",
    "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem",
}
REQUIRED_ACTIONS = {
    "ApiFunction": METASTORE_RW | {
        "secretsmanager:CreateSecret", "secretsmanager:GetSecretValue",
        "secretsmanager:DeleteSecret", "secretsmanager:ListSecrets", "sqs:SendMessage",
    },
    "ReconcilerFunction": METASTORE_RW | {"secretsmanager:GetSecretValue"},
    "SchedulerFunction": {"dynamodb:GetItem", "dynamodb:Query", "sqs:SendMessage"},
    "FinalizeFunction": {"dynamodb:GetItem", "dynamodb:PutItem"},
    "QueryFunction": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"},
}
# Environment each function needs beyond the globals (AwsSettings::from_env; the scheduler
# refuses to start without the queue URL).
REQUIRED_ENV = {
    "ApiFunction": {"FLOTILLA_RECONCILE_QUEUE_URL"},
    "ReconcilerFunction": {"FLOTILLA_RECONCILE_QUEUE_URL"},
    "SchedulerFunction": {"FLOTILLA_RECONCILE_QUEUE_URL"},
}
# Writes that must stay inside one partition (dynamodb:LeadingKeys).
PARTITION_BOUND = {"FinalizeFunction": ["SYSTEM"]}


def statements(policy):
    """The statements of an inline policy; both branches of an Fn::If statement count."""
    for stmt in policy["PolicyDocument"]["Statement"]:
        if isinstance(stmt, dict) and "Fn::If" in stmt:
            for branch in stmt["Fn::If"][1:]:
                if isinstance(branch, dict) and "Action" in branch:
                    yield branch
        else:
            yield stmt


def actions_of(stmt):
    return stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
# The SAM-attached basic execution policy (logs) is a managed policy, not inline, so it is
# not checked here.


def fail(errors, message):
    errors.append(message)


def main(argv):
    with open(argv[1], encoding="utf-8") as f:
        template = json.load(f)
    resources = template["Resources"]
    errors = []

    def of_type(t):
        return {k: v for k, v in resources.items() if v["Type"] == t}

    functions = of_type("AWS::Lambda::Function")
    if len(functions) != 5:
        fail(errors, f"expected 5 functions, found {sorted(functions)}")
    for name, fn in functions.items():
        p = fn["Properties"]
        if p.get("Architectures") != ["arm64"]:
            fail(errors, f"{name}: Architectures must be [arm64]")
        if p.get("Runtime") != "provided.al2023" or p.get("Handler") != "bootstrap":
            fail(errors, f"{name}: must be provided.al2023 with handler bootstrap")
        if "LogGroup" not in p.get("LoggingConfig", {}):
            fail(errors, f"{name}: LoggingConfig.LogGroup (with retention) is required")
        env = p.get("Environment", {}).get("Variables", {})
        for var in ("FLOTILLA_TABLE", "FLOTILLA_STAGE", "FLOTILLA_SECRET_PREFIX", "RUST_LOG"):
            if var not in env:
                fail(errors, f"{name}: environment variable {var} missing")

    for name, group in of_type("AWS::Logs::LogGroup").items():
        if "RetentionInDays" not in group["Properties"]:
            fail(errors, f"{name}: RetentionInDays missing")

    tables = of_type("AWS::DynamoDB::Table")
    for name, table in tables.items():
        p = table["Properties"]
        if p.get("BillingMode") != "PAY_PER_REQUEST":
            fail(errors, f"{name}: BillingMode must be PAY_PER_REQUEST")
        if not p.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled"):
            fail(errors, f"{name}: point-in-time recovery must be enabled")
        if p.get("DeletionProtectionEnabled") is not True:
            fail(errors, f"{name}: deletion protection must be enabled")
        ttl = p.get("TimeToLiveSpecification", {})
        if ttl.get("AttributeName") != "ttl" or ttl.get("Enabled") is not True:
            fail(errors, f"{name}: TTL must be enabled on attribute `ttl`")
    if len(tables) != 1:
        fail(errors, f"expected one table, found {sorted(tables)}")

    mappings = of_type("AWS::Lambda::EventSourceMapping")
    if not mappings:
        fail(errors, "the reconciler's SQS event source mapping is missing")
    for name, m in mappings.items():
        if "ReportBatchItemFailures" not in m["Properties"].get("FunctionResponseTypes", []):
            fail(errors, f"{name}: FunctionResponseTypes must include ReportBatchItemFailures")

    queues = of_type("AWS::SQS::Queue")
    if not any("RedrivePolicy" in q["Properties"] for q in queues.values()):
        fail(errors, "no queue has a RedrivePolicy (dead-letter queue)")
    alarms = of_type("AWS::CloudWatch::Alarm")
    if not any(a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible" for a in alarms.values()):
        fail(errors, "no alarm on the dead-letter queue depth")

    for name, api in of_type("AWS::ApiGatewayV2::Api").items():
        paths = api["Properties"]["Body"]["paths"]
        for path, methods in paths.items():
            for method, op in methods.items():
                security = op.get("security", [])
                names = {k for s in security for k in s}
                # Public: the health check and the web console's static files (no data).
                if path in ("/v1/health", "/console", "/console/{proxy+}"):
                    if names != {"NONE"} or method != "get":
                        fail(errors, f"{name}: {method} {path} must be public")
                elif not names or "NONE" in names:
                    fail(errors, f"{name}: {method} {path} must require the JWT authorizer")

    for fn_name, fn in functions.items():
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        for var in sorted(REQUIRED_ENV.get(fn_name, set()) - set(env)):
            fail(errors, f"{fn_name}: environment variable {var} missing (the code reads it)")
        role = resources.get(f"{fn_name}Role", {}).get("Properties", {})
        granted = set()
        for policy in role.get("Policies", []):
            for stmt in statements(policy):
                granted |= set(actions_of(stmt))
                bound = PARTITION_BOUND.get(fn_name)
                if bound and any(a.startswith("dynamodb:") for a in actions_of(stmt)):
                    keys = (stmt.get("Condition", {}).get("ForAllValues:StringEquals", {})
                            .get("dynamodb:LeadingKeys"))
                    if keys != bound:
                        fail(errors, f"{fn_name}: DynamoDB access must be limited to LeadingKeys {bound}")
        for action in sorted(REQUIRED_ACTIONS.get(fn_name, set()) - granted):
            fail(errors, f"{fn_name}: role lacks {action}, which the function's code calls")
    if set(REQUIRED_ACTIONS) - set(functions):
        fail(errors, f"functions missing: {sorted(set(REQUIRED_ACTIONS) - set(functions))}")

    for name, role in of_type("AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for stmt in statements(policy):
                actions = actions_of(stmt)
                for action in actions:
                    if action == "*" or action.endswith(":*"):
                        fail(errors, f"{name}: wildcard action {action}")
                if stmt.get("Resource") == "*" and not set(actions) <= UNSCOPABLE:
                    fail(errors, f"{name}: Resource * for {actions}")
                if any(a.startswith("secretsmanager:") and a not in UNSCOPABLE for a in actions):
                    resource = json.dumps(stmt.get("Resource"))
                    if "secret:flotilla/${Stage}/*" not in resource:
                        fail(errors, f"{name}: secrets access must be limited to flotilla/${{Stage}}/*")

    for e in errors:
        print(f"check-template: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
