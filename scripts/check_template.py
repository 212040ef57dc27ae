"""Checks the deployment invariants of the translated template (CloudFormation JSON).

cfn-lint proves the template is well-formed; this proves it still says what
docs/deploy.md promises: arm64 custom-runtime functions, a table with point-in-time
recovery, deletion protection and TTL on the attribute the metastore writes (`ttl`),
partial batch responses, a dead-letter queue with an alarm, bounded log retention, JWT on
every route but the health check, IAM statements without wildcards beyond the two that
cannot be scoped, and roles that grant at least what each function's code calls (and no
more than the SYSTEM partition to finalize), with the environment its code reads.

Operations (docs/operations.md): active tracing on every function, the alarms the runbook
lists, a dashboard, and no alarm or dashboard graph on a metric nobody writes: a Flotilla
metric must be in infra/metrics.json (the Rust metric catalogue exported; a Rust test keeps
the file equal to the code) with one of its emitted dimension sets and, for a closed label,
one of its values; an AWS metric must be one of the few AWS publishes with those dimensions.

Usage: python check_template.py TRANSLATED.json
       python check_template.py --self-test TRANSLATED.json   (proves the checks can fail)
"""

import copy
import json
import os
import sys

CATALOGUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "infra", "metrics.json")

# AWS-published metrics an alarm or graph may use, with their dimension names.
AWS_METRICS = {
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible"): {"QueueName"},
    ("AWS/Lambda", "Errors"): {"FunctionName"},
    ("AWS/Lambda", "Throttles"): {"FunctionName"},
    ("AWS/Lambda", "IteratorAge"): {"FunctionName"},
    ("AWS/DynamoDB", "ReadThrottleEvents"): {"TableName"},
    ("AWS/DynamoDB", "WriteThrottleEvents"): {"TableName"},
    ("AWS/DynamoDB", "SystemErrors"): {"TableName", "Operation"},
}

# Actions whose Resource may be "*": they cannot be scoped to a resource.
UNSCOPABLE = {"secretsmanager:ListSecrets"}

# What the code of each function calls, so a role cannot drift below it (TransactWriteItems
# is authorized per item: PutItem/UpdateItem/DeleteItem/ConditionCheckItem; SendMessageBatch
# by sqs:SendMessage). Sources: shared/metastore/src/dynamo.rs (GetItem, BatchGetItem,
# Query, TransactWriteItems), shared/secrets/src/aws.rs (CreateSecret, GetSecretValue,
# DeleteSecret, ListSecrets), shared/runtime/src/queue/sqs.rs (SendMessageBatch),
# shared/services/src/service/directory.rs (finalize: strong GetItem + put-if-absent of the marker).
METASTORE_RW = {
    "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:PutItem",
    "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem",
}
REQUIRED_ACTIONS = {
    "ApiFunction": METASTORE_RW | {
        "secretsmanager:CreateSecret", "secretsmanager:GetSecretValue",
        "secretsmanager:DeleteSecret", "secretsmanager:ListSecrets", "sqs:SendMessage",
    },
    # The Iceberg REST endpoint: metastore only (its S3 and sts:AssumeRole grants are
    # conditional on the warehouse bucket; check_iceberg_vending checks the role).
    "IcebergFunction": METASTORE_RW,
    "ReconcilerFunction": METASTORE_RW | {"secretsmanager:GetSecretValue", "sqs:SendMessage"},
    # Captured state in the deployment's warehouse buckets (conditional on the buckets).
    "CaptureFunction": METASTORE_RW | {
        "secretsmanager:GetSecretValue", "s3:GetObject", "s3:PutObject", "s3:DeleteObject",
    },
    "SchedulerFunction": {"dynamodb:GetItem", "dynamodb:Query", "sqs:SendMessage"},
    "FinalizeFunction": {"dynamodb:GetItem", "dynamodb:PutItem"},
    "QueryFunction": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"},
    # The push path (functions/events): seals event logs (events::seal_log: strong GetItem
    # and Query, TransactWriteItems of DeleteItem and PutItem), reads the table's stream and
    # puts events on the bus; the mapping's on-failure destination is sent with its role.
    "EventsFunction": {
        "dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem",
        "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
        "events:PutEvents", "sqs:SendMessage",
    },
}
# Environment each function needs beyond the globals (AwsSettings::from_env; the scheduler
# refuses to start without the queue URL).
REQUIRED_ENV = {
    "ApiFunction": {"FLOTILLA_RECONCILE_QUEUE_URL", "FLOTILLA_CAPTURE_QUEUE_URL"},
    "ReconcilerFunction": {"FLOTILLA_RECONCILE_QUEUE_URL", "FLOTILLA_CAPTURE_QUEUE_URL"},
    "SchedulerFunction": {"FLOTILLA_RECONCILE_QUEUE_URL"},
    "IcebergFunction": {"FLOTILLA_ICEBERG_TOKEN_URL"},
    "EventsFunction": {"FLOTILLA_EVENT_BUS_NAME"},
}
# Functions that touch no object storage at all: the reconciler queues capture jobs for the
# capture function instead of writing captured state itself.
NO_S3 = {"ReconcilerFunction", "SchedulerFunction", "FinalizeFunction", "QueryFunction",
         "EventsFunction"}
# The only routes without the JWT authorizer, each with its one method.
PUBLIC_ROUTES = {
    "/v1/health": "get",
    "/console": "get",
    "/console/{proxy+}": "get",
    "/iceberg/v1/oauth/tokens": "post",
}
# Writes that must stay inside one partition (dynamodb:LeadingKeys).
PARTITION_BOUND = {"FinalizeFunction": ["SYSTEM"]}
# Item access that must stay inside partitions of one kind (dynamodb:LeadingKeys patterns):
# the events function seals the event logs of catalogs and of accounts and touches nothing else.
PARTITION_PATTERN_BOUND = {"EventsFunction": ["CAT#*", "ACCT#*"]}
# DynamoDB actions on items (the table), as opposed to its stream.
ITEM_ACTIONS = METASTORE_RW


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


def metric_errors(where, namespace, name, dims, catalogue):
    """Why (namespace, name, dims) is not a metric the code or AWS writes; [] when it is.
    `dims` maps dimension names to template values (strings, Ref/Fn::Sub objects)."""
    if namespace == catalogue["namespace"]:
        metric = next((m for m in catalogue["metrics"] if m["cloudwatch"] == name), None)
        if metric is None:
            return [f"{where}: {namespace}/{name} is not written by the code (infra/metrics.json)"]
        if sorted(dims) not in [sorted(s) for s in metric["dimension_sets"]]:
            return [f"{where}: {name} is not emitted with dimensions {sorted(dims)} "
                    f"(emitted: {metric['dimension_sets']})"]
        errors = []
        labels = {l["dimension"]: l["values"] for l in metric["labels"]}
        functions = catalogue["fixed_dimensions"]["Function"]
        for dim, value in dims.items():
            if dim == "Stage":
                if value not in ({"Ref": "Stage"}, "${Stage}"):
                    errors.append(f"{where}: {name} Stage must be the Stage parameter, not {value!r}")
            elif dim == "Function":
                if value not in functions:
                    errors.append(f"{where}: {name} Function={value!r} is not a function")
            elif labels.get(dim) is not None and value not in labels[dim]:
                errors.append(f"{where}: {name} {dim}={value!r} is never emitted ({labels[dim]})")
        return errors
    allowed = AWS_METRICS.get((namespace, name))
    if allowed is None:
        return [f"{where}: {namespace}/{name} is not a metric this stack's alarms may use"]
    if set(dims) != allowed:
        return [f"{where}: {namespace}/{name} has dimensions {sorted(allowed)}, not {sorted(dims)}"]
    return []


def alarm_metrics(alarm):
    """(namespace, name, {dim: value}) of every metric an alarm reads."""
    p = alarm["Properties"]
    if "MetricName" in p:
        yield p.get("Namespace"), p["MetricName"], {d["Name"]: d["Value"] for d in p.get("Dimensions", [])}
    for q in p.get("Metrics", []):
        if "MetricStat" in q:
            m = q["MetricStat"]["Metric"]
            yield m.get("Namespace"), m["MetricName"], {d["Name"]: d["Value"] for d in m.get("Dimensions", [])}


def dashboard_metrics(dashboard):
    body = dashboard["Properties"]["DashboardBody"]
    text = body["Fn::Sub"] if isinstance(body, dict) else body
    if isinstance(text, list):
        text = text[0]
    for widget in json.loads(text)["widgets"]:
        for row in widget.get("properties", {}).get("metrics", []):
            values = [v for v in row if not isinstance(v, dict)]
            ns, name, rest = values[0], values[1], values[2:]
            yield widget["properties"].get("title", "?"), ns, name, dict(zip(rest[::2], rest[1::2]))


def check_operations(resources, catalogue, errors):
    def of_type(t):
        return {k: v for k, v in resources.items() if v["Type"] == t}

    functions = of_type("AWS::Lambda::Function")
    for name, fn in functions.items():
        if fn["Properties"].get("TracingConfig", {}).get("Mode") != "Active":
            fail(errors, f"{name}: X-Ray active tracing (Tracing: Active) is required")

    alarms = of_type("AWS::CloudWatch::Alarm")
    read = []
    for name, alarm in alarms.items():
        for ns, metric, dims in alarm_metrics(alarm):
            errors.extend(metric_errors(name, ns, metric, dims, catalogue))
            read.append((ns, metric, dims))
        actions = json.dumps(alarm["Properties"].get("AlarmActions"))
        if "HasAlarmTopic" not in actions or "AlarmTopicArn" not in actions:
            fail(errors, f"{name}: AlarmActions must notify the optional AlarmTopicArn")

    def alarmed(ns, metric, **want):
        return any(n == ns and m == metric and all(d.get(k) == v for k, v in want.items())
                   for n, m, d in read)

    failures = next(m for m in catalogue["metrics"] if m["cloudwatch"] == "ReconcileFailures")
    reasons = [v for l in failures["labels"] if l["dimension"] == "Reason" for v in l["values"] if v != "other"]
    for reason in reasons:
        if not alarmed("Flotilla", "ReconcileFailures", Reason=reason):
            fail(errors, f"no alarm on failed reconciles with reason {reason}")
    required = [
        (("Flotilla", "ApiRequests"), {"StatusClass": "5xx"}, "API 5xx rate"),
        (("Flotilla", "UpstreamResponses"), {"StatusClass": "5xx"}, "upstream error rate"),
        (("Flotilla", "UpstreamResponses"), {"StatusClass": "error"}, "upstream error rate"),
        (("Flotilla", "DirectoryRefreshes"), {"Outcome": "failed"}, "directory refresh failures"),
        (("AWS/DynamoDB", "ReadThrottleEvents"), {}, "DynamoDB read throttles"),
        (("AWS/DynamoDB", "WriteThrottleEvents"), {}, "DynamoDB write throttles"),
        (("AWS/DynamoDB", "SystemErrors"), {"Operation": "TransactWriteItems"}, "DynamoDB system errors"),
    ]
    for (ns, metric), want, what in required:
        if not alarmed(ns, metric, **want):
            fail(errors, f"no alarm on {what} ({ns}/{metric} {want})")
    for fn in functions:
        for metric in ("Errors", "Throttles"):
            if not alarmed("AWS/Lambda", metric, FunctionName={"Ref": fn}):
                fail(errors, f"no alarm on {fn} {metric}")

    dashboards = of_type("AWS::CloudWatch::Dashboard")
    if len(dashboards) != 1:
        fail(errors, f"expected one dashboard, found {sorted(dashboards)}")
    for name, dashboard in dashboards.items():
        try:
            graphs = list(dashboard_metrics(dashboard))
        except (KeyError, ValueError, IndexError, TypeError) as e:
            fail(errors, f"{name}: unreadable dashboard body: {e}")
            continue
        for title, ns, metric, dims in graphs:
            dims = {k: ({"Ref": "Stage"} if v == "${Stage}" else v) for k, v in dims.items()}
            errors.extend(metric_errors(f"{name} '{title}'", ns, metric, dims, catalogue))


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test(argv[2])
    with open(argv[1], encoding="utf-8") as f:
        template = json.load(f)
    errors = check(template)
    for e in errors:
        print(f"check-template: {e}", file=sys.stderr)
    return 1 if errors else 0


def self_test(path):
    """Each mutation of a good template must be refused with the expected message."""
    with open(path, encoding="utf-8") as f:
        good = json.load(f)
    if check(good):
        print("check-template self-test: the template itself fails", file=sys.stderr)
        return 1

    def alarm(t, name):
        return t["Resources"][name]["Properties"]

    def rename(t):
        alarm(t, "DirectoryRefreshFailuresAlarm")["MetricName"] = "DirectoryRefreshFailed"

    def bad_value(t):
        alarm(t, "ReconcileFailuresPoisonAlarm")["Dimensions"][1]["Value"] = "acme"

    def extra_dim(t):
        alarm(t, "MetastoreBackendFailuresAlarm")["Dimensions"].append({"Name": "AccountId", "Value": "acme"})

    def untraced(t):
        del t["Resources"]["QueryFunction"]["Properties"]["TracingConfig"]

    def bad_graph(t):
        body = t["Resources"]["OperationsDashboard"]["Properties"]["DashboardBody"]
        body["Fn::Sub"] = body["Fn::Sub"].replace('"ReconcileRuns"', '"ReconcileRunz"', 1)

    def no_alarm(t):
        del t["Resources"]["ReconcilerThrottlesAlarm"]

    def vending_trusts_anyone(t):
        st = t["Resources"]["IcebergVendingRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
        st["Principal"] = {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}

    def vending_bucket_wide(t):
        policy = t["Resources"]["IcebergVendingRole"]["Properties"]["Policies"][0]
        policy["PolicyDocument"]["Statement"][0]["Resource"] = "arn:aws:s3:::*"

    def assume_any_role(t):
        st = t["Resources"]["IcebergVendingAssumePolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
        st["Resource"] = {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/*"}

    def iceberg_unalarmed(t):
        del t["Resources"]["IcebergErrorsAlarm"]

    def vending_env_missing(t):
        del t["Resources"]["IcebergFunction"]["Properties"]["Environment"]["Variables"]["FLOTILLA_ICEBERG_VENDING_ROLE_ARN"]

    def iceberg_read_only(t):
        stmt = t["Resources"]["IcebergFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
        stmt["Action"] = ["dynamodb:GetItem", "dynamodb:Query"]

    def api_path(t, path):
        api = next(r for r in t["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Api")
        return api["Properties"]["Body"]["paths"][path]

    def catalog_public(t):
        for op in api_path(t, "/iceberg/v1/{proxy+}").values():
            op["security"] = [{"NONE": []}]

    def token_route_any_method(t):
        methods = api_path(t, "/iceberg/v1/oauth/tokens")
        methods["get"] = methods.pop("post")

    def token_url_missing(t):
        del t["Resources"]["IcebergFunction"]["Properties"]["Environment"]["Variables"]["FLOTILLA_ICEBERG_TOKEN_URL"]

    def reconciler_writes_warehouses(t):
        policy = t["Resources"]["ReconcilerFunctionRole"]["Properties"]["Policies"][0]
        policy["PolicyDocument"]["Statement"].append(
            {"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": "arn:aws:s3:::lake/*"})

    def capture_without_warehouses(t):
        policy = t["Resources"]["CaptureFunctionRole"]["Properties"]["Policies"][0]
        policy["PolicyDocument"]["Statement"] = [
            st for st in policy["PolicyDocument"]["Statement"] if "s3:PutObject" not in json.dumps(st)]

    def events_function(t):
        return t["Resources"]["EventsFunction"]["Properties"]

    def stream_mapping(t):
        return next(r["Properties"] for r in t["Resources"].values()
                    if r["Type"] == "AWS::Lambda::EventSourceMapping" and "StartingPosition" in r["Properties"])

    def stream_keys_only(t):
        t["Resources"]["MetastoreTable"]["Properties"]["StreamSpecification"]["StreamViewType"] = "KEYS_ONLY"

    def stream_retries_forever(t):
        stream_mapping(t)["MaximumRetryAttempts"] = -1

    def stream_without_destination(t):
        del stream_mapping(t)["DestinationConfig"]

    def stream_unfiltered(t):
        del stream_mapping(t)["FilterCriteria"]

    def iterator_age_unalarmed(t):
        del t["Resources"]["EventsIteratorAgeAlarm"]

    def events_any_partition(t):
        role = t["Resources"]["EventsFunctionRole"]["Properties"]["Policies"][0]
        for st in role["PolicyDocument"]["Statement"]:
            st.pop("Condition", None)

    def events_catalogs_only(t):
        role = t["Resources"]["EventsFunctionRole"]["Properties"]["Policies"][0]
        for st in role["PolicyDocument"]["Statement"]:
            cond = st.get("Condition", {}).get("ForAllValues:StringLike", {})
            if "dynamodb:LeadingKeys" in cond:
                cond["dynamodb:LeadingKeys"] = ["CAT#*"]

    def events_without_bus_env(t):
        del events_function(t)["Environment"]["Variables"]["FLOTILLA_EVENT_BUS_NAME"]

    cases = [(stream_keys_only, "the stream must carry new images"),
             (stream_retries_forever, "MaximumRetryAttempts must be bounded"),
             (stream_without_destination, "OnFailure must send to the EventsDeadLetterQueue"),
             (stream_unfiltered, "FilterCriteria must admit the inserts of EVQ# items"),
             (iterator_age_unalarmed, "no alarm on the events function's iterator age"),
             (events_any_partition, "EventsFunction: DynamoDB item access must be limited"),
             (events_catalogs_only, "EventsFunction: DynamoDB item access must be limited"),
             (events_without_bus_env, "EventsFunction: environment variable FLOTILLA_EVENT_BUS_NAME missing"),
             (reconciler_writes_warehouses, "ReconcilerFunction: role may use S3"),
             (capture_without_warehouses, "CaptureFunction: role lacks s3:PutObject"),
             (vending_trusts_anyone, "must trust exactly the iceberg function's role"),
             (vending_bucket_wide, "limited to the Iceberg warehouse bucket"),
             (assume_any_role, "may assume the vending role and nothing else"),
             (rename, "DirectoryRefreshFailed is not written"), (bad_value, "is never emitted"),
             (extra_dim, "is not emitted with dimensions"), (untraced, "active tracing"),
             (bad_graph, "ReconcileRunz is not written"), (no_alarm, "no alarm on ReconcilerFunction Throttles"),
             (iceberg_unalarmed, "no alarm on IcebergFunction Errors"),
             (vending_env_missing, "IcebergFunction: environment variable FLOTILLA_ICEBERG_VENDING_ROLE_ARN missing"),
             (iceberg_read_only, "IcebergFunction: role lacks dynamodb:PutItem"),
             (catalog_public, "/iceberg/v1/{proxy+} must require the JWT authorizer"),
             (token_route_any_method, "/iceberg/v1/oauth/tokens must be public"),
             (token_url_missing, "IcebergFunction: environment variable FLOTILLA_ICEBERG_TOKEN_URL missing")]
    failed = 0
    for mutate, expected in cases:
        t = copy.deepcopy(good)
        mutate(t)
        errors = check(t)
        if not any(expected in e for e in errors):
            print(f"check-template self-test: {mutate.__name__} was not refused ({errors})", file=sys.stderr)
            failed = 1
        else:
            print(f"check-template self-test: ok {mutate.__name__} refused")
    return failed


def check(template):
    resources = template["Resources"]
    errors = []
    with open(CATALOGUE, encoding="utf-8") as f:
        check_operations(resources, json.load(f), errors)

    def of_type(t):
        return {k: v for k, v in resources.items() if v["Type"] == t}

    functions = of_type("AWS::Lambda::Function")
    if len(functions) != 8:
        fail(errors, f"expected 8 functions, found {sorted(functions)}")
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
    check_event_stream(resources, mappings, errors)

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
                # Public: the health check and the web console's static files (no data), and
                # the Iceberg OAuth2 token route (it relays to the identity provider).
                if path in PUBLIC_ROUTES:
                    if names != {"NONE"} or method != PUBLIC_ROUTES[path]:
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
                patterns = PARTITION_PATTERN_BOUND.get(fn_name)
                if patterns and any(a in ITEM_ACTIONS for a in actions_of(stmt)):
                    keys = (stmt.get("Condition", {}).get("ForAllValues:StringLike", {})
                            .get("dynamodb:LeadingKeys"))
                    if keys != patterns:
                        fail(errors, f"{fn_name}: DynamoDB item access must be limited to LeadingKeys {patterns}")
        for action in sorted(REQUIRED_ACTIONS.get(fn_name, set()) - granted):
            fail(errors, f"{fn_name}: role lacks {action}, which the function's code calls")
        if fn_name in NO_S3 and any(a.startswith("s3:") for a in granted):
            fail(errors, f"{fn_name}: role may use S3, which the function never does")
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

    check_iceberg_vending(resources, errors)
    return errors


def check_event_stream(resources, mappings, errors):
    """The push path of change events (docs/events.md "Push"): the table's stream carries new
    images (the handler reads each event's body), and the events function's mapping reads
    it with bounded retries, bisection and an on-failure destination (a failing batch can
    neither block the shard forever nor vanish), invoked only by the inserts of event items,
    with the alarms the runbook lists."""
    table = resources.get("MetastoreTable", {}).get("Properties", {})
    view = table.get("StreamSpecification", {}).get("StreamViewType")
    if view not in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"):
        fail(errors, f"MetastoreTable: the stream must carry new images, not {view!r}")
    streams = {n: m["Properties"] for n, m in mappings.items()
               if "StartingPosition" in m["Properties"]}
    ours = {n: p for n, p in streams.items() if p.get("FunctionName") == {"Ref": "EventsFunction"}}
    if len(ours) != 1:
        fail(errors, f"EventsFunction: expected one stream mapping, found {sorted(ours)}")
    for name, p in ours.items():
        if p.get("EventSourceArn") != {"Fn::GetAtt": ["MetastoreTable", "StreamArn"]}:
            fail(errors, f"{name}: must read the metastore table's stream")
        if p.get("BisectBatchOnFunctionError") is not True:
            fail(errors, f"{name}: BisectBatchOnFunctionError must be true")
        retries = p.get("MaximumRetryAttempts")
        if not isinstance(retries, int) or not 0 <= retries <= 10000:
            fail(errors, f"{name}: MaximumRetryAttempts must be bounded, not {retries!r}")
        destination = p.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        if destination != {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}:
            fail(errors, f"{name}: OnFailure must send to the EventsDeadLetterQueue, not {destination!r}")
        patterns = [f.get("Pattern", "") for f in p.get("FilterCriteria", {}).get("Filters", [])]
        for prefix in ("EVQ#", "EVT#"):
            if not any(f'"{prefix}"' in pat and '"INSERT"' in pat for pat in patterns):
                fail(errors, f"{name}: FilterCriteria must admit the inserts of {prefix} items")
    alarms = [a["Properties"] for a in resources.values() if a["Type"] == "AWS::CloudWatch::Alarm"]
    if not any(a.get("MetricName") == "IteratorAge"
               and {"Name": "FunctionName", "Value": {"Ref": "EventsFunction"}} in a.get("Dimensions", [])
               for a in alarms):
        fail(errors, "no alarm on the events function's iterator age")
    if not any(a.get("MetricName") == "ApproximateNumberOfMessagesVisible"
               and {"Name": "QueueName", "Value": {"Fn::GetAtt": ["EventsDeadLetterQueue", "QueueName"]}}
               in a.get("Dimensions", []) for a in alarms):
        fail(errors, "no alarm on the events dead-letter queue depth")
    bus = resources.get("EventBus", {})
    if bus.get("Type") != "AWS::Events::EventBus":
        fail(errors, "EventBus (AWS::Events::EventBus) is missing")


def check_iceberg_vending(resources, errors):
    """The Iceberg vending role (docs/iceberg-rest.md): trusted by the iceberg function's role
    only, reaching only the Iceberg warehouse bucket; the iceberg function may assume that
    role and no other through the vending policy, and is told its ARN."""
    role = resources.get("IcebergVendingRole")
    if role is None:
        fail(errors, "IcebergVendingRole is missing")
        return
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    principals = [st.get("Principal") for st in trust]
    if principals != [{"AWS": {"Fn::GetAtt": ["IcebergFunctionRole", "Arn"]}}] or any(
            st.get("Action") != "sts:AssumeRole" for st in trust):
        fail(errors, f"IcebergVendingRole: must trust exactly the iceberg function's role, not {principals}")
    for policy in role["Properties"].get("Policies", []):
        for stmt in statements(policy):
            resource = json.dumps(stmt.get("Resource"))
            if "${IcebergWarehouseBucket}" not in resource:
                fail(errors, f"IcebergVendingRole: access must be limited to the Iceberg warehouse bucket, not {resource}")
    assume = resources.get("IcebergVendingAssumePolicy", {}).get("Properties", {})
    grants = [st for st in assume.get("PolicyDocument", {}).get("Statement", [])]
    if assume.get("Roles") != [{"Ref": "IcebergFunctionRole"}] or [
            (st.get("Action"), st.get("Resource")) for st in grants] != [
            ("sts:AssumeRole", {"Fn::GetAtt": ["IcebergVendingRole", "Arn"]})]:
        fail(errors, "IcebergVendingAssumePolicy: the iceberg function may assume the vending role and nothing else")
    env = resources.get("IcebergFunction", {}).get("Properties", {}).get("Environment", {}).get("Variables", {})
    if "FLOTILLA_ICEBERG_VENDING_ROLE_ARN" not in env:
        fail(errors, "IcebergFunction: environment variable FLOTILLA_ICEBERG_VENDING_ROLE_ARN missing")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
