//! Commands whose routes are still being built (integrations, overlays, index catalogs,
//! directory, admin), against a stub that records what the CLI sent and answers the shapes of
//! docs/api.md. These check argument parsing, request construction and rendering, and the
//! write-only handling of credentials.

mod support;

use serde_json::{Value, json};
use support::*;

const INT_ID: &str = "0190aaaaaaaaaaaaaaaaaaaaaaaaaaa1";
const CAT_ID: &str = "0190cccccccccccccccccccccccccc01";
const OV_ID: &str = "0190bbbbbbbbbbbbbbbbbbbbbbbbbbb1";

fn integration(id: &str, name: &str) -> Value {
    json!({
        "id": id, "display_name": name, "type": "ICEBERG_REST", "uri": "https://up.example.com/catalog",
        "properties": {"warehouse": "wh"}, "authentication": {"type": "OAUTH_CLIENT_CREDENTIALS", "client_id": "abc"},
        "credentials_configured": true, "credential_generation": 1, "generation": 1,
        "etag": "\"e1\"", "create_time": "2026-01-01T00:00:00Z", "update_time": "2026-01-01T00:00:00Z"
    })
}

fn overlay(id: &str, name: &str) -> Value {
    json!({
        "id": id, "display_name": name, "integration_id": INT_ID, "catalog_id": CAT_ID,
        "include_namespaces": [["crm"]], "exclude_namespaces": [], "generation": 1, "etag": "\"o1\"",
        "last_reconcile": null
    })
}

fn list(items: Vec<Value>) -> Value {
    json!({"items": items, "next_page_token": null})
}

/// The documented answers, enough for every command of this file.
fn api(r: &Recorded) -> (u16, Value) {
    let p = r.path.as_str();
    let m = r.method.as_str();
    match (m, p) {
        ("GET", "/v1/accounts/acme/integrations") => {
            // Two pages, so resolution must follow the token to find "prod".
            if r.query.contains("page_token=p2") {
                (
                    200,
                    json!({"items": [integration(INT_ID, "prod")], "next_page_token": null}),
                )
            } else {
                (
                    200,
                    json!({"items": [integration("0190dddddddddddddddddddddddddd01", "dup"), integration("0190dddddddddddddddddddddddddd02", "dup")], "next_page_token": "p2"}),
                )
            }
        }
        ("GET", "/v1/accounts/acme/audit") => {
            // The audit always answers a token; a page after the last record is empty.
            if r.query.contains("page_token=a2") {
                (200, json!({"items": [], "next_page_token": "a2"}))
            } else if r.query.contains("page_token=a1") {
                (
                    200,
                    json!({"items": [{"kind": "refusal", "id": "r1", "timestamp_ms": 2,
                        "principal": "anonymous", "method": "GET",
                        "route": "/v1/accounts/{account_id}/catalogs", "status": 401,
                        "request_id": "q2"}], "next_page_token": "a2"}),
                )
            } else {
                (
                    200,
                    json!({"items": [{"kind": "mutation", "id": "e1", "timestamp_ms": 1,
                        "principal": "ana", "action": "create-namespace",
                        "securable": {"catalog_id": CAT_ID, "namespace": ["sales"], "name": null},
                        "request_id": "q1"}], "next_page_token": "a1"}),
                )
            }
        }
        ("POST", "/v1/accounts/acme/event-sinks") => (
            201,
            json!({"id": "s1", "url": r.body["url"], "types": r.body["types"], "state": "ACTIVE",
                "delivered": {}, "delivered_count": 0, "consecutive_failures": 0}),
        ),
        ("GET", "/v1/accounts/acme/event-sinks") => (
            200,
            list(vec![
                json!({"id": "s1", "url": "https://hooks.example.com/x",
                "state": "FAILING", "delivered_count": 7, "consecutive_failures": 5}),
            ]),
        ),
        ("DELETE", "/v1/accounts/acme/event-sinks/s1") => (204, Value::Null),
        ("GET", "/v1/accounts/acme/catalogs") => (
            200,
            list(vec![
                json!({"id": CAT_ID, "display_name": "lake", "etag": "\"c\""}),
            ]),
        ),
        ("GET", "/v1/accounts/acme/overlays") => (200, list(vec![overlay(OV_ID, "crm-import")])),
        // Read before a selection change, for the etag it must carry.
        ("GET", _) if p == format!("/v1/accounts/acme/overlays/{OV_ID}") => {
            (200, overlay(OV_ID, "crm-import"))
        }
        ("POST", "/v1/accounts/acme/integrations") => {
            let mut v = integration(INT_ID, r.body["display_name"].as_str().unwrap_or(""));
            v["authentication"] = r.body["authentication"].clone();
            (201, v)
        }
        ("GET", _) if p == format!("/v1/accounts/acme/integrations/{INT_ID}") => {
            (200, integration(INT_ID, "prod"))
        }
        ("PATCH", _) if p == format!("/v1/accounts/acme/integrations/{INT_ID}") => {
            (200, integration(INT_ID, "prod"))
        }
        ("DELETE", _) if p.starts_with("/v1/accounts/acme/integrations/") => (204, Value::Null),
        ("PUT", _) if p.ends_with("/authentication") => (200, integration(INT_ID, "prod")),
        ("POST", _) if p.ends_with("/validate") => (
            200,
            json!({"valid": false, "checks": [
                {"type": "CATALOG_CONNECTION", "status": "PASSED", "issue": null, "summary": "reachable"},
                {"type": "CATALOG_AUTHENTICATION", "status": "FAILED", "issue": "INVALID_CLIENT", "summary": "the token endpoint refused the client"},
                {"type": "DISCOVERY", "status": "NOT_RUN", "issue": null, "summary": "skipped"}
            ]}),
        ),
        ("GET", _) if p.ends_with("/upstream/namespaces") => {
            (200, list(vec![json!({"path": ["sales", "eu.west"]})]))
        }
        ("GET", _) if p.ends_with("/upstream/objects") => (
            200,
            list(vec![
                json!({"namespace": ["sales"], "name": "orders", "kind": "TABLE"}),
            ]),
        ),
        ("POST", "/v1/accounts/acme/overlays") => {
            let mut v = overlay(OV_ID, r.body["display_name"].as_str().unwrap_or(""));
            v["include_namespaces"] = r.body["include_namespaces"].clone();
            v["exclude_namespaces"] = r.body["exclude_namespaces"].clone();
            (201, v)
        }
        ("PATCH", _) if p.starts_with("/v1/accounts/acme/overlays/") => {
            if r.header("if-match") == Some("\"stale\"") {
                (412, api_error("PRECONDITION_FAILED", "etag does not match"))
            } else {
                (200, overlay(OV_ID, "crm-import"))
            }
        }
        ("POST", _) if p.ends_with("/reconcile") => (
            200,
            json!({
                "created": 4, "updated": 1, "unchanged": 10, "retired": 2, "duration_ms": 1234,
                "conflicts": [{"path": ["crm", "orders"], "code": "MAPPING_CONFLICT", "reason": "a local table holds the name"}],
                "skipped": [["crm", "tmp"]]
            }),
        ),
        ("DELETE", _) if p.starts_with("/v1/accounts/acme/overlays/") => (204, Value::Null),
        ("POST", "/v1/accounts/acme/index-catalogs") => (
            201,
            json!({"name": r.body["name"], "warehouse": r.body["warehouse"], "create_time": "t", "etag": "\"i\""}),
        ),
        ("GET", "/v1/accounts/acme/index-catalogs") => (
            200,
            list(vec![
                json!({"name": "vectors", "warehouse": "s3://b/wh/", "create_time": "t", "etag": "\"i\""}),
            ]),
        ),
        ("POST", _) if p.starts_with("/v1/accounts/acme/index-catalogs/") => {
            (201, json!({"ok": true, "echo": r.body}))
        }
        ("GET", _)
            if p.starts_with("/v1/accounts/acme/index-catalogs/") && p.ends_with("/indexes") =>
        {
            (
                200,
                list(vec![json!({"namespace": ["emb"], "name": "idx"})]),
            )
        }
        ("GET", _) if p.starts_with("/v1/accounts/acme/index-catalogs/") => (
            200,
            json!({
                "identifier": {"namespace": ["emb"], "name": "idx"}, "metadata_location": "s3://b/wh/idx/m1.json",
                "source": {"type": "PARQUET", "uri": "s3://b/data/"}
            }),
        ),
        ("DELETE", _) if p.starts_with("/v1/accounts/acme/index-catalogs/") => (204, Value::Null),
        ("GET", _) if p.ends_with("/directory") => (
            200,
            json!({"catalog_id": CAT_ID, "entries": [
                {"namespace": ["crm"], "name": "orders", "kind": "TABLE", "id": "t1"}
            ]}),
        ),
        ("POST", "/v1/admin/catalog-finalize") => (200, json!({"finalized": true, "catalogs": 3})),
        _ => (404, api_error("NOT_FOUND", "no such route")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_never_leaves_the_request_body() {
    let stub = Stub::start(api).await;
    let canary = format!("canary-{}-SECRET", std::process::id());
    let cred_file = write(
        stub.dir.path(),
        "creds",
        &format!("client_secret={canary}-file\n"),
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cred_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
    }
    let base = [
        "-v",
        "integration",
        "create",
        "prod",
        "iceberg-rest",
        "https://up.example.com/catalog",
        "--auth-type",
        "oauth-client-credentials",
        "--auth",
        "client_id=abc",
        "--auth",
        "scopes=catalog,sql",
        "--props",
        "warehouse=wh",
    ];
    let cases: Vec<(Vec<&str>, Cli, String)> = vec![
        (
            [&base[..], &["--cred-stdin"]].concat(),
            stub.cli()
                .stdin(&format!("# rotated today\nclient_secret={canary}-stdin\n")),
            format!("{canary}-stdin"),
        ),
        (
            [&base[..], &["--cred-file", &cred_file]].concat(),
            stub.cli(),
            format!("{canary}-file"),
        ),
        (
            [&base[..], &["--cred-env", "MY_CRED", "-o", "json"]].concat(),
            stub.cli()
                .env("MY_CRED", &format!("client_secret={canary}-env")),
            format!("{canary}-env"),
        ),
    ];
    for (args, cli, secret) in cases {
        let before = stub.requests().len();
        let out = cli.run(&args).await.ok();
        for (what, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(!text.contains(&canary), "the secret reached {what}: {text}");
        }
        // With --cred-stdin the child is still blocked on stdin when its argv is read, so the
        // kernel's view of its arguments is available; the other sources may finish first.
        if args.contains(&"--cred-stdin") {
            let argv = out.argv.as_deref().expect("argv read while the child ran");
            assert!(argv.contains("integration create"), "{argv:?}");
            assert!(
                !argv.contains(&canary),
                "the secret is in the process arguments: {argv}"
            );
        }
        assert!(
            out.stderr.contains("> POST "),
            "verbose output expected: {}",
            out.stderr
        );
        let sent = &stub.requests()[before..];
        let create = sent
            .iter()
            .find(|r| r.method == "POST")
            .expect("create sent");
        assert_eq!(create.path, "/v1/accounts/acme/integrations");
        assert_eq!(create.body["credentials"], json!({"client_secret": secret}));
        assert_eq!(create.body["type"], "ICEBERG_REST");
        assert_eq!(create.body["uri"], "https://up.example.com/catalog");
        assert_eq!(create.body["properties"], json!({"warehouse": "wh"}));
        assert_eq!(
            create.body["authentication"],
            json!({"type": "OAUTH_CLIENT_CREDENTIALS", "client_id": "abc", "scopes": ["catalog", "sql"]})
        );
        assert_eq!(
            create.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
    }
    // A malformed credential line is refused without quoting it, and nothing is sent.
    let before = stub.writes().len();
    let out = stub
        .cli()
        .stdin(&format!("client_secret {canary}\n"))
        .run(&[&base[..], &["--cred-stdin"]].concat())
        .await
        .fails(2);
    assert!(
        !out.stderr.contains(&canary) && out.stderr.contains("line 1"),
        "{}",
        out.stderr
    );
    assert_eq!(stub.writes().len(), before);
    // A credential as a plain argument is not accepted at all.
    stub.cli()
        .run(&[&base[..], &["--cred", &canary]].concat())
        .await
        .fails(2);
    stub.cli()
        .run(&[&base[..], &["--cred-stdin", "--cred-env", "X"]].concat())
        .await
        .fails(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integration_names_resolve_across_pages_and_ambiguity_is_an_error() {
    let stub = Stub::start(api).await;
    let got = stub
        .cli()
        .run(&["integration", "get", "prod", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(got["id"], INT_ID);
    let lists: Vec<Recorded> = stub
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/accounts/acme/integrations")
        .collect();
    assert_eq!(lists.len(), 2, "both pages were read");
    assert!(lists[1].query.contains("page_token=p2"));
    let amb = stub
        .cli()
        .run(&["integration", "get", "dup"])
        .await
        .fails(1);
    assert!(
        amb.stderr
            .starts_with("error: AMBIGUOUS: 2 integrations are named \"dup\""),
        "{}",
        amb.stderr
    );
    assert!(
        amb.stderr
            .contains("0190dddddddddddddddddddddddddd01, 0190dddddddddddddddddddddddddd02"),
        "{}",
        amb.stderr
    );
    // An id picks one of the duplicates.
    let by_id = stub
        .cli()
        .run(&["integration", "get", INT_ID, "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(by_id["id"], INT_ID);
    let missing = stub
        .cli()
        .run(&["integration", "get", "nope"])
        .await
        .fails(1);
    assert!(
        missing
            .stderr
            .starts_with("error: NOT_FOUND: no integration has the id or name \"nope\""),
        "{}",
        missing.stderr
    );
    let table = stub.cli().run(&["integration", "list", "--all"]).await.ok();
    let header = table.stdout.lines().next().expect("header");
    for h in [
        "ID",
        "NAME",
        "TYPE",
        "URI",
        "AUTH",
        "CREDENTIALS",
        "GENERATION",
    ] {
        assert!(header.contains(h), "{header}");
    }
    assert_eq!(table.stdout.lines().count(), 4, "{}", table.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integration_update_rotate_delete_and_browse_build_the_documented_requests() {
    let stub = Stub::start(api).await;
    stub.cli()
        .run(&[
            "integration",
            "update",
            "prod",
            "--uri",
            "https://new.example.com",
            "--props",
            "warehouse=w2",
            "--etag",
            "e1",
        ])
        .await
        .ok();
    let rotate_file = write(stub.dir.path(), "rot", "client_secret=rotated-value\n");
    stub.cli()
        .run(&[
            "integration",
            "update-auth",
            "prod",
            "--auth-type",
            "OAUTH_CLIENT_CREDENTIALS",
            "--auth",
            "client_id=new",
            "--cred-file",
            &rotate_file,
        ])
        .await
        .ok();
    stub.cli()
        .run(&["integration", "update-auth", "prod"])
        .await
        .fails(2);
    let del = stub
        .cli()
        .run(&[
            "integration",
            "delete",
            "prod",
            "--cascade",
            "--etag",
            "\"e1\"",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(
        del,
        json!({"deleted": true, "kind": "integration", "id": INT_ID, "cascade": true})
    );
    let w = stub.writes();
    assert_eq!(w[0].method, "PATCH");
    assert_eq!(
        w[0].path,
        format!("/v1/accounts/acme/integrations/{INT_ID}")
    );
    assert_eq!(
        w[0].body,
        json!({"uri": "https://new.example.com", "properties": {"warehouse": "w2"}})
    );
    assert_eq!(w[0].header("if-match"), Some("\"e1\""));
    assert_eq!(w[1].method, "PUT");
    assert_eq!(
        w[1].path,
        format!("/v1/accounts/acme/integrations/{INT_ID}/authentication")
    );
    assert_eq!(
        w[1].body,
        json!({"authentication": {"type": "OAUTH_CLIENT_CREDENTIALS", "client_id": "new"}, "credentials": {"client_secret": "rotated-value"}})
    );
    assert_eq!(w[2].method, "DELETE");
    assert_eq!(w[2].query, "cascade=true");
    assert_eq!(w[2].header("if-match"), Some("\"e1\""));

    let ns = stub
        .cli()
        .run(&[
            "integration",
            "namespaces",
            "prod",
            "--parent",
            "sales",
            "--page-size",
            "10",
        ])
        .await
        .ok();
    assert!(ns.stdout.contains("sales.\"eu.west\""), "{}", ns.stdout);
    let objs = stub
        .cli()
        .run(&[
            "integration",
            "objects",
            "prod",
            "--namespace",
            "\"a.b\".c",
            "--kinds",
            "table,view",
            "-o",
            "json",
        ])
        .await
        .ok();
    assert_eq!(objs.json()["items"][0]["kind"], "TABLE");
    let gets: Vec<Recorded> = stub
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/upstream/"))
        .collect();
    assert_eq!(gets[0].query, "parent=sales&page_size=10");
    assert_eq!(gets[1].query, "namespace=a.b%1Fc&kinds=table%2Cview");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_renders_the_checks_and_fails_when_invalid() {
    let stub = Stub::start(api).await;
    let out = stub
        .cli()
        .run(&["integration", "validate", "prod"])
        .await
        .fails(1);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("CHECK")
            && lines[0].contains("STATUS")
            && lines[0].contains("ISSUE")
            && lines[0].contains("SUMMARY")
    );
    assert!(
        lines[2].starts_with("CATALOG_AUTHENTICATION")
            && lines[2].contains("FAILED")
            && lines[2].contains("INVALID_CLIENT"),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("validation failed"), "{}", out.stderr);
    let out = stub
        .cli()
        .run(&["integration", "validate", "prod", "-o", "json"])
        .await
        .fails(1);
    assert_eq!(out.json()["valid"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlays_bind_names_to_ids_and_replace_selections() {
    let stub = Stub::start(api).await;
    let created = stub
        .cli()
        .run(&[
            "overlay",
            "create",
            "crm-import",
            "prod",
            "lake",
            "--include",
            "crm",
            "--include",
            "sales.\"eu.west\"",
            "--exclude",
            "crm.tmp",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(
        created["include_namespaces"],
        json!([["crm"], ["sales", "eu.west"]])
    );
    let post = stub.writes().into_iter().next().expect("create");
    assert_eq!(post.path, "/v1/accounts/acme/overlays");
    assert_eq!(
        post.body,
        json!({"display_name": "crm-import", "integration_id": INT_ID, "catalog_id": CAT_ID,
               "include_namespaces": [["crm"], ["sales", "eu.west"]], "exclude_namespaces": [["crm", "tmp"]]})
    );
    stub.cli()
        .run(&[
            "overlay",
            "update",
            "crm-import",
            "--include",
            "a\\.b",
            "--clear-exclude",
        ])
        .await
        .ok();
    let patch = stub
        .writes()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("patch");
    assert_eq!(patch.path, format!("/v1/accounts/acme/overlays/{OV_ID}"));
    assert_eq!(
        patch.body,
        json!({"include_namespaces": [["a.b"]], "exclude_namespaces": []})
    );
    // A stale etag is exit 3.
    let stale = stub
        .cli()
        .run(&[
            "overlay",
            "update",
            "crm-import",
            "--name",
            "x",
            "--etag",
            "stale",
        ])
        .await
        .fails(3);
    assert!(
        stale.stderr.starts_with("error: PRECONDITION_FAILED: "),
        "{}",
        stale.stderr
    );
    stub.cli()
        .run(&["overlay", "list", "--integration", "prod"])
        .await
        .ok();
    let listed = stub
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/v1/accounts/acme/overlays" && r.method == "GET")
        .expect("list");
    assert_eq!(listed.query, format!("integration_id={INT_ID}"));
    let missing_catalog = stub
        .cli()
        .run(&["overlay", "create", "x", "prod", "nolake"])
        .await
        .fails(1);
    assert!(
        missing_catalog
            .stderr
            .contains("no catalog has the id or name \"nolake\""),
        "{}",
        missing_catalog.stderr
    );
    stub.cli()
        .run(&["overlay", "delete", "crm-import"])
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_prints_the_summary() {
    let stub = Stub::start(api).await;
    let out = stub
        .cli()
        .run(&["overlay", "reconcile", "crm-import"])
        .await
        .ok();
    assert!(
        out.stdout.contains("created:") && out.stdout.contains("retired:"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("conflicts: 1")
            && out.stdout.contains("crm.orders")
            && out.stdout.contains("MAPPING_CONFLICT"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("skipped: 1") && out.stdout.contains("crm.tmp"),
        "{}",
        out.stdout
    );
    let json_out = stub
        .cli()
        .run(&["overlay", "reconcile", OV_ID, "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(json_out["created"], 4);
    let post = stub.writes().into_iter().last().expect("reconcile");
    assert_eq!(
        post.path,
        format!("/v1/accounts/acme/overlays/{OV_ID}/reconcile")
    );
    // JSON routes answer 415 to a POST without a JSON body.
    assert_eq!(post.header("content-type"), Some("application/json"));
    assert_eq!(post.body, json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_catalog_commands_follow_the_contract() {
    let stub = Stub::start(api).await;
    let c = stub.cli();
    c.run(&["index", "create", "vectors", "--warehouse", "s3://b/wh/"])
        .await
        .ok();
    c.run(&["index", "namespace", "create", "vectors", "emb.\"v.2\""])
        .await
        .ok();
    c.run(&[
        "index",
        "register",
        "vectors",
        "emb",
        "idx",
        "--metadata-location",
        "s3://b/wh/idx/m1.json",
        "--source-parquet",
        "s3://b/data/",
    ])
    .await
    .ok();
    c.run(&[
        "index",
        "commit",
        "vectors",
        "emb",
        "idx",
        "--base",
        "s3://b/wh/idx/m1.json",
        "--new",
        "s3://b/wh/idx/m2.json",
        "--source-json",
        r#"{"type":"PARQUET","uri":"s3://b/data/"}"#,
    ])
    .await
    .ok();
    c.run(&["index", "rename", "vectors", "emb", "idx", "emb2", "idx2"])
        .await
        .ok();
    c.run(&["index", "drop", "vectors", "emb", "idx"])
        .await
        .ok();
    c.run(&[
        "index",
        "register",
        "vectors",
        "emb",
        "idx",
        "--metadata-location",
        "m",
    ])
    .await
    .fails(2);
    let w = stub.writes();
    let expect = [
        (
            "POST",
            "/v1/accounts/acme/index-catalogs",
            json!({"name": "vectors", "warehouse": "s3://b/wh/"}),
        ),
        (
            "POST",
            "/v1/accounts/acme/index-catalogs/vectors/namespaces",
            json!({"path": ["emb", "v.2"]}),
        ),
        (
            "POST",
            "/v1/accounts/acme/index-catalogs/vectors/namespaces/emb/indexes",
            json!({"name": "idx", "metadata_location": "s3://b/wh/idx/m1.json", "source": {"type": "PARQUET", "uri": "s3://b/data/"}}),
        ),
        (
            "POST",
            "/v1/accounts/acme/index-catalogs/vectors/namespaces/emb/indexes/idx/commit",
            json!({"source": {"type": "PARQUET", "uri": "s3://b/data/"}, "base": "s3://b/wh/idx/m1.json", "new": "s3://b/wh/idx/m2.json"}),
        ),
        (
            "POST",
            "/v1/accounts/acme/index-catalogs/vectors/rename",
            json!({"source": {"namespace": ["emb"], "name": "idx"}, "destination": {"namespace": ["emb2"], "name": "idx2"}}),
        ),
        (
            "DELETE",
            "/v1/accounts/acme/index-catalogs/vectors/namespaces/emb/indexes/idx",
            Value::Null,
        ),
    ];
    assert_eq!(w.len(), expect.len(), "{w:?}");
    for (r, (m, p, b)) in w.iter().zip(expect) {
        assert_eq!((r.method.as_str(), r.path.as_str(), &r.body), (m, p, &b));
    }
    let load = c
        .run(&["index", "load", "vectors", "emb", "idx", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(load["metadata_location"], "s3://b/wh/idx/m1.json");
    let cats = c.run(&["index", "list"]).await.ok();
    assert!(
        cats.stdout.contains("vectors") && cats.stdout.contains("s3://b/wh/"),
        "{}",
        cats.stdout
    );
    let idx = c.run(&["index", "list", "vectors", "emb"]).await.ok();
    assert!(
        idx.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("emb") && l.contains("idx")),
        "{}",
        idx.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_and_admin_commands() {
    let stub = Stub::start(api).await;
    let dir = stub.cli().run(&["directory", "get", "lake"]).await.ok();
    assert!(
        dir.stdout.contains("orders") && dir.stdout.contains("crm"),
        "{}",
        dir.stdout
    );
    assert!(
        stub.requests()
            .iter()
            .any(|r| r.path == format!("/v1/accounts/acme/catalogs/{CAT_ID}/directory"))
    );
    stub.cli()
        .run(&["admin", "catalog-finalize", "--acknowledge-writer-rollout"])
        .await
        .fails(2);
    let fin = stub
        .cli()
        .run(&[
            "admin",
            "catalog-finalize",
            "--acknowledge-writer-rollout",
            "--acknowledge-quiescent-writes",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(fin["finalized"], true);
    let post = stub
        .writes()
        .into_iter()
        .find(|r| r.path == "/v1/admin/catalog-finalize")
        .expect("finalize");
    assert_eq!(
        post.body,
        json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true})
    );
    let sweep = stub
        .cli()
        .run(&["admin", "sweep-credentials", "--min-age", "60"])
        .await
        .fails(1);
    assert!(
        sweep.stderr.contains("not offer credential sweeping yet"),
        "{}",
        sweep.stderr
    );
    let post = stub
        .writes()
        .into_iter()
        .find(|r| r.path == "/v1/admin/sweep-credentials")
        .expect("sweep");
    assert_eq!(post.body, json!({"account_id": "acme", "min_age_secs": 60}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_show_code_message_and_error_id() {
    let stub = Stub::start(|_r| (500, json!({"error": {"code": "INTERNAL", "message": "internal error", "details": {"error_id": "err-42"}}}))).await;
    let out = stub.cli().run(&["catalog", "list"]).await.fails(1);
    assert_eq!(
        out.stderr.trim(),
        "error: INTERNAL: internal error (error_id err-42)"
    );
    let stub = Stub::start(|_r| (409, api_error("HAS_DEPENDENTS", "overlays reference it"))).await;
    let out = stub
        .cli()
        .run(&["account", "delete", "acme"])
        .await
        .fails(3);
    assert_eq!(
        out.stderr.trim(),
        "error: HAS_DEPENDENTS: overlays reference it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_follows_pages_until_an_empty_one_and_passes_the_filters() {
    let stub = Stub::start(api).await;
    let out = stub
        .cli()
        .run(&[
            "audit",
            "--principal",
            "ana",
            "--from",
            "2026-12-01T00:00:00Z",
            "--to",
            "1900000000000",
            "--all",
        ])
        .await
        .ok();
    assert!(out.stdout.contains("create-namespace"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("401 GET /v1/accounts/{account_id}/catalogs"),
        "{}",
        out.stdout
    );
    let asked: Vec<_> = stub
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/accounts/acme/audit")
        .collect();
    assert_eq!(asked.len(), 3, "stops at the empty page");
    assert!(
        asked[0].query.contains("principal=ana"),
        "{}",
        asked[0].query
    );
    assert!(
        asked[0].query.contains("from=2026-12-01T00%3A00%3A00Z"),
        "{}",
        asked[0].query
    );
    assert!(
        asked[0].query.contains("to=1900000000000"),
        "{}",
        asked[0].query
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_sink_create_sends_the_secret_once_in_the_body_and_never_prints_it() {
    let stub = Stub::start(api).await;
    let canary = "sink-secret-canary-000111";
    let out = stub
        .cli()
        .env("HOOK_SECRET", &format!("secret={canary}"))
        .run(&[
            "event-sink",
            "create",
            "https://hooks.example.com/x",
            "--types",
            "update-table,drop-table",
            "--cred-env",
            "HOOK_SECRET",
            "--idempotency-key",
            "k1",
        ])
        .await
        .ok();
    assert!(!out.stdout.contains(canary) && !out.stderr.contains(canary));
    let sent: Vec<_> = stub
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/accounts/acme/event-sinks" && r.method == "POST")
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["secret"], canary);
    assert_eq!(sent[0].body["types"], json!(["update-table", "drop-table"]));
    // Anything but one `secret=` line is refused before a request is sent.
    stub.cli()
        .env("HOOK_SECRET", "token=x")
        .run(&[
            "event-sink",
            "create",
            "https://h.example.com",
            "--cred-env",
            "HOOK_SECRET",
        ])
        .await
        .fails(2);
    let listed = stub.cli().run(&["event-sink", "list"]).await.ok();
    assert!(listed.stdout.contains("FAILING"), "{}", listed.stdout);
    let deleted = stub.cli().run(&["event-sink", "delete", "s1"]).await.ok();
    assert!(deleted.stdout.contains("s1"), "{}", deleted.stdout);
}
