//! The CLI against the real router on redb (built like `flotilla serve`), through the
//! compiled binary: output shapes, name resolution, exit codes, configuration.

mod support;

use serde_json::{Value, json};
use support::*;

/// Creates account `id` and answers a runner acting in it.
async fn with_account(s: &Server, id: &str) -> Cli {
    s.cli(id)
        .run(&["account", "create", "--id", id, "-o", "json"])
        .await
        .ok();
    s.cli(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_account_commands_print_one_json_document() {
    let s = Server::local().await;
    let out = s.cli("acme").run(&["health", "-o", "json"]).await.ok();
    assert_eq!(out.json(), json!({"status": "ok"}));
    let created = s
        .cli("acme")
        .run(&["account", "create", "--id", "acme", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(created["id"], "acme");
    assert!(created["etag"].is_string());
    let got = s
        .cli("acme")
        .run(&["account", "get", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(got["id"], "acme");
    let list = s
        .cli("acme")
        .run(&["account", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(list["items"][0]["id"], "acme");
    assert!(list["next_page_token"].is_null());
    let table = s.cli("acme").run(&["account", "list"]).await.ok();
    assert!(table.stdout.starts_with("ID"), "{}", table.stdout);
    assert!(
        table.stdout.lines().any(|l| l.starts_with("acme ")),
        "{}",
        table.stdout
    );
    // A second create of the same id is a conflict: exit 3 and the API's code on stderr.
    let dup = s
        .cli("acme")
        .run(&["account", "create", "--id", "acme"])
        .await
        .fails(3);
    assert!(
        dup.stderr.starts_with("error: ALREADY_EXISTS: "),
        "{}",
        dup.stderr
    );
    assert!(dup.stdout.is_empty());
    let deleted = s
        .cli("acme")
        .run(&["account", "delete", "acme", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(
        deleted,
        json!({"deleted": true, "kind": "account", "id": "acme"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogs_resolve_by_name_and_honour_etags() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    let c = cli
        .run(&[
            "catalog",
            "create",
            "analytics",
            "--description",
            "d1",
            "--props",
            "team=data",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    let id = c["id"].as_str().expect("id").to_owned();
    assert_eq!(c["display_name"], "analytics");
    assert_eq!(c["properties"], json!({"team": "data"}));
    let etag1 = c["etag"].as_str().expect("etag").to_owned();

    // By name and by id, the same catalog.
    let by_name = cli
        .run(&["catalog", "get", "analytics", "-o", "json"])
        .await
        .ok()
        .json();
    let by_id = cli
        .run(&["catalog", "get", &id, "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(by_name["id"], by_id["id"]);

    // An update with the current etag (quotes optional) succeeds; a stale one exits 3.
    let bare = etag1.trim_matches('"');
    let up = cli
        .run(&[
            "catalog",
            "update",
            "analytics",
            "--description",
            "d2",
            "--etag",
            bare,
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(up["description"], "d2");
    let stale = cli
        .run(&[
            "catalog",
            "update",
            "analytics",
            "--description",
            "d3",
            "--etag",
            &etag1,
        ])
        .await
        .fails(3);
    assert!(
        stale.stderr.starts_with("error: PRECONDITION_FAILED: "),
        "{}",
        stale.stderr
    );
    let still = cli
        .run(&["catalog", "get", "analytics", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(still["description"], "d2");

    // Rename keeps the id; the old name is gone.
    cli.run(&["catalog", "update", &id, "--name", "renamed"])
        .await
        .ok();
    let missing = cli.run(&["catalog", "get", "analytics"]).await.fails(1);
    assert!(
        missing
            .stderr
            .starts_with("error: NOT_FOUND: no catalog has the id or name \"analytics\""),
        "{}",
        missing.stderr
    );
    let table = cli.run(&["catalog", "list"]).await.ok();
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("NAME") && lines[0].contains("DESCRIPTION"),
        "{}",
        table.stdout
    );
    assert!(
        lines[1].contains("renamed") && lines[1].contains(&id),
        "{}",
        table.stdout
    );

    let del = cli
        .run(&["catalog", "delete", "renamed", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(del, json!({"deleted": true, "kind": "catalog", "id": id}));
    cli.run(&["catalog", "get", &id]).await.fails(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_matching_an_id_wins_over_a_display_name() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    let first = cli
        .run(&["catalog", "create", "first", "-o", "json"])
        .await
        .ok()
        .json();
    let first_id = first["id"].as_str().expect("id");
    // A second catalog whose display name is the first one's id.
    let second = cli
        .run(&["catalog", "create", first_id, "-o", "json"])
        .await
        .ok()
        .json();
    assert_ne!(second["id"], first["id"]);
    let got = cli
        .run(&["catalog", "get", first_id, "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(got["id"], first["id"]);
    assert_eq!(got["display_name"], "first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_paths_quote_and_escape_dots() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    cli.run(&["catalog", "create", "c"]).await.ok();
    cli.run(&["namespace", "create", "c", "sales"]).await.ok();
    let q = cli
        .run(&[
            "namespace",
            "create",
            "c",
            "sales.\"eu.west\"",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(q["path"], json!(["sales", "eu.west"]));
    cli.run(&[
        "namespace",
        "create",
        "c",
        "sales.us",
        "--props",
        "region=us",
    ])
    .await
    .ok();
    // The escaped spelling names the same namespace.
    let e = cli
        .run(&["namespace", "get", "c", "sales.eu\\.west", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(e["path"], json!(["sales", "eu.west"]));
    let children = cli
        .run(&["namespace", "list", "c", "--parent", "sales", "-o", "json"])
        .await
        .ok()
        .json();
    let paths: Vec<Value> = children["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["path"].clone())
        .collect();
    assert_eq!(
        paths,
        vec![json!(["sales", "eu.west"]), json!(["sales", "us"])]
    );
    // The table shows paths in the same quoting, so they can be pasted back.
    let table = cli
        .run(&["namespace", "list", "c", "--parent", "sales"])
        .await
        .ok();
    assert!(
        table.stdout.contains("sales.\"eu.west\""),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("region=us"), "{}", table.stdout);
    let up = cli
        .run(&[
            "namespace",
            "update",
            "c",
            "sales.us",
            "--props",
            "region=us-east",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(up["properties"], json!({"region": "us-east"}));
    // Not empty: HAS_DEPENDENTS is a conflict.
    let refused = cli
        .run(&["namespace", "delete", "c", "sales"])
        .await
        .fails(3);
    assert!(
        refused.stderr.starts_with("error: HAS_DEPENDENTS: "),
        "{}",
        refused.stderr
    );
    cli.run(&["namespace", "delete", "c", "\"sales\".\"eu.west\""])
        .await
        .ok();
    // A malformed path is a usage error, caught before any request.
    let bad = cli
        .run(&["namespace", "get", "c", "sales..us"])
        .await
        .fails(2);
    assert!(bad.stderr.contains("empty segment"), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_views_create_update_and_conflict() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    cli.run(&["catalog", "create", "c"]).await.ok();
    cli.run(&["namespace", "create", "c", "crm"]).await.ok();
    cli.run(&["namespace", "create", "c", "archive"]).await.ok();
    let schema = write(s.dir.path(), "schema.json", schema_json());
    let t = cli
        .run(&[
            "table",
            "create",
            "c",
            "crm",
            "orders",
            "--schema-file",
            &schema,
            "--format",
            "ICEBERG",
            "--metadata-location",
            "s3://b/m.json",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(t["name"], "orders");
    assert_eq!(t["format"], "ICEBERG");
    assert_eq!(t["schema"]["fields"][0]["name"], "id");
    let etag = t["etag"].as_str().expect("etag").to_owned();
    // Views share the name slot.
    let clash = cli
        .run(&[
            "view",
            "create",
            "c",
            "crm",
            "orders",
            "--schema-file",
            &schema,
            "--sql",
            "spark=select 1",
        ])
        .await
        .fails(3);
    assert!(
        clash.stderr.starts_with("error: ALREADY_EXISTS: "),
        "{}",
        clash.stderr
    );
    let sql = write(s.dir.path(), "v.sql", "select id from orders");
    let v = cli
        .run(&[
            "view",
            "create",
            "c",
            "crm",
            "recent",
            "--schema-file",
            &schema,
            "--sql",
            "spark=select 1",
            "--sql-file",
            &format!("trino={sql}"),
            "--default-namespace",
            "crm",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(
        v["definitions"],
        json!([{"dialect": "spark", "sql": "select 1"}, {"dialect": "trino", "sql": "select id from orders"}])
    );
    let views = cli.run(&["view", "list", "c", "crm"]).await.ok();
    assert!(views.stdout.contains("spark, trino"), "{}", views.stdout);
    // Rename and move keep the id.
    let moved = cli
        .run(&[
            "table",
            "update",
            "c",
            "crm",
            "orders",
            "--name",
            "orders_2020",
            "--namespace",
            "archive",
            "--etag",
            &etag,
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(moved["id"], t["id"]);
    assert_eq!(moved["namespace"], json!(["archive"]));
    let list = cli
        .run(&["table", "list", "c", "archive", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(list["items"][0]["name"], "orders_2020");
    cli.run(&["table", "get", "c", "crm", "orders"])
        .await
        .fails(1);
    let del = cli
        .run(&[
            "table",
            "delete",
            "c",
            "archive",
            "orders_2020",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(
        del,
        json!({"deleted": true, "kind": "table", "name": "orders_2020", "namespace": ["archive"]})
    );
    // A bad schema file is a local error with the file named; nothing is sent.
    let bad = write(s.dir.path(), "bad.json", "{not json");
    let e = cli
        .run(&[
            "table",
            "create",
            "c",
            "crm",
            "x",
            "--schema-file",
            &bad,
            "--format",
            "ICEBERG",
        ])
        .await
        .fails(1);
    assert!(
        e.stderr.contains("bad.json") && e.stderr.contains("not JSON"),
        "{}",
        e.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_follows_pages_with_all() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    cli.run(&["catalog", "create", "c"]).await.ok();
    for i in 0..5 {
        cli.run(&["namespace", "create", "c", &format!("ns{i}")])
            .await
            .ok();
    }
    let page = cli
        .run(&["namespace", "list", "c", "--page-size", "2", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(page["items"].as_array().expect("items").len(), 2);
    let token = page["next_page_token"].as_str().expect("token").to_owned();
    let next = cli
        .run(&[
            "namespace",
            "list",
            "c",
            "--page-size",
            "2",
            "--page-token",
            &token,
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(next["items"][0]["path"], json!(["ns2"]));
    let all = cli
        .run(&[
            "namespace",
            "list",
            "c",
            "--page-size",
            "2",
            "--all",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(all["items"].as_array().expect("items").len(), 5);
    assert!(all["next_page_token"].is_null());
    // A partial table listing says how to continue, on stderr.
    let partial = cli
        .run(&["namespace", "list", "c", "--page-size", "2"])
        .await
        .ok();
    assert!(
        partial.stderr.contains("--page-token"),
        "{}",
        partial.stderr
    );
    assert_eq!(partial.stdout.lines().count(), 3, "{}", partial.stdout);
    // Name resolution lists every page: 1001+ items are not needed to prove it, the
    // resolver asks for pages of 1000 and follows tokens (see the stub tests).
    cli.run(&["namespace", "list", "c", "--page-size", "0"])
        .await
        .fails(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2_and_missing_settings_are_explained() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    cli.run(&["catalog", "create"]).await.fails(2);
    cli.run(&["catalog", "create", "c", "--props", "novalue"])
        .await
        .fails(2);
    cli.run(&["catalog", "frobnicate"]).await.fails(2);
    cli.run(&["catalog", "list", "-o", "yaml"]).await.fails(2);
    let no_account = cli
        .clone()
        .without_env("FLOTILLA_ACCOUNT")
        .run(&["catalog", "list"])
        .await
        .fails(2);
    assert!(
        no_account.stderr.contains("FLOTILLA_ACCOUNT"),
        "{}",
        no_account.stderr
    );
    let nothing = cli.run(&["catalog", "update", "c"]).await.fails(2);
    assert!(
        nothing.stderr.contains("nothing to update"),
        "{}",
        nothing.stderr
    );
    // No token: the API's 401 is an error (exit 1) with its code.
    let unauth = cli
        .clone()
        .without_env("FLOTILLA_TOKEN")
        .run(&["catalog", "list"])
        .await
        .fails(1);
    assert!(
        unauth.stderr.starts_with("error: UNAUTHENTICATED: "),
        "{}",
        unauth.stderr
    );
    // Nothing listens: a transport error, exit 1.
    let down = cli
        .clone()
        .env("FLOTILLA_ENDPOINT", "http://127.0.0.1:9")
        .run(&["catalog", "list"])
        .await
        .fails(1);
    assert!(
        down.stderr.starts_with("error: cannot reach"),
        "{}",
        down.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_supply_settings_and_the_environment_overrides_them() {
    let s = Server::local().await;
    with_account(&s, "acme").await;
    with_account(&s, "beta").await;
    s.cli("acme")
        .run(&["catalog", "create", "acme-cat"])
        .await
        .ok();
    s.cli("beta")
        .run(&["catalog", "create", "beta-cat"])
        .await
        .ok();
    let token_file = write(s.dir.path(), "token", &format!("{TOKEN}\n"));
    let config = write(
        s.dir.path(),
        "config.toml",
        &format!(
            "default_profile = \"local\"\n[profiles.local]\nendpoint = \"{}\"\ntoken_file = \"{token_file}\"\naccount = \"acme\"\n[profiles.broken]\nendpoint = \"http://127.0.0.1:9\"\ntoken_env = \"NOT_SET_ANYWHERE\"\n",
            s.endpoint
        ),
    );
    let bare = Cli::new("unused", s.dir.path())
        .without_env("FLOTILLA_ENDPOINT")
        .env("FLOTILLA_CONFIG", &config);
    let out = bare
        .run(&["catalog", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(out["items"][0]["display_name"], "acme-cat");
    // FLOTILLA_ACCOUNT overrides the profile's account; --account overrides both.
    let out = bare
        .clone()
        .env("FLOTILLA_ACCOUNT", "beta")
        .run(&["catalog", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(out["items"][0]["display_name"], "beta-cat");
    let out = bare
        .clone()
        .env("FLOTILLA_ACCOUNT", "beta")
        .run(&["catalog", "list", "--account", "acme", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(out["items"][0]["display_name"], "acme-cat");
    // A profile whose token variable is unset is explained, naming the variable.
    let e = bare
        .run(&["--profile", "broken", "catalog", "list"])
        .await
        .fails(2);
    assert!(e.stderr.contains("NOT_SET_ANYWHERE"), "{}", e.stderr);
    let e = bare
        .run(&["--profile", "nope", "catalog", "list"])
        .await
        .fails(2);
    assert!(e.stderr.contains("no profile named"), "{}", e.stderr);
    // The same config in JSON.
    let json_config = write(
        s.dir.path(),
        "config.json",
        &json!({"profiles": {"default": {"endpoint": s.endpoint, "token_file": token_file, "account": "beta"}}}).to_string(),
    );
    let out = Cli::new("unused", s.dir.path())
        .without_env("FLOTILLA_ENDPOINT")
        .env("FLOTILLA_CONFIG", &json_config)
        .run(&["catalog", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(out["items"][0]["display_name"], "beta-cat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_shows_requests_on_stderr_only() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    let out = cli
        .run(&["-v", "catalog", "create", "c", "-o", "json"])
        .await
        .ok();
    assert!(
        out.stderr.contains("> POST ") && out.stderr.contains("/v1/accounts/acme/catalogs"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("< 201"), "{}", out.stderr);
    assert!(!out.stderr.contains(TOKEN));
    assert_eq!(out.json()["display_name"], "c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_generated_for_each_shell() {
    let s = Server::local().await;
    for shell in ["bash", "zsh", "fish"] {
        let out = s.cli("acme").run(&["completions", shell]).await.ok();
        assert!(
            out.stdout.contains("flotilla") && out.stdout.contains("integration"),
            "{shell}"
        );
    }
    s.cli("acme").run(&["completions", "tcsh"]).await.fails(2);
}

/// Integrations and overlays against the real server: write-only credentials from stdin,
/// rotation, overlay binding by names, refused and cascading deletes. The secret never
/// reaches stdout or stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integrations_and_overlays_against_the_real_server() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    let secret = format!("canary-{}", std::process::id());
    cli.run(&["catalog", "create", "analytics", "-o", "json"])
        .await
        .ok();
    let created = cli
        .clone()
        .stdin(&format!("token={secret}\n"))
        .run(&[
            "integration",
            "create",
            "prod",
            "ICEBERG_REST",
            "http://127.0.0.1:9/catalog",
            "--auth-type",
            "bearer",
            "--props",
            "warehouse=wh",
            "--cred-stdin",
            "-o",
            "json",
        ])
        .await
        .ok();
    assert!(!created.stdout.contains(&secret) && !created.stderr.contains(&secret));
    let integration = created.json();
    assert_eq!(integration["credentials_configured"], true);
    assert_eq!(integration["credential_generation"], 1);
    let rotated = cli
        .clone()
        .stdin(&format!("token={secret}-2\n"))
        .run(&[
            "integration",
            "update-auth",
            "prod",
            "--cred-stdin",
            "-o",
            "json",
        ])
        .await
        .ok();
    assert!(!rotated.stdout.contains(&secret));
    assert_eq!(rotated.json()["credential_generation"], 2);
    let overlay = cli
        .run(&[
            "overlay",
            "create",
            "crm-import",
            "prod",
            "analytics",
            "--include",
            "crm",
            "--include",
            "crm.eu",
            "--exclude",
            "crm.tmp",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    // Subsumed includes collapse; the binding uses ids.
    assert_eq!(overlay["include_namespaces"], json!([["crm"]]));
    assert_eq!(overlay["exclude_namespaces"], json!([["crm", "tmp"]]));
    assert_eq!(overlay["integration_id"], integration["id"]);
    let listed = cli
        .run(&["overlay", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(listed["items"][0]["display_name"], "crm-import");
    // Selection and connection changes need an etag: the CLI sends the one it reads, and
    // `--if-match` pins one (a stale one is a precondition failure, exit 3).
    let narrowed = cli
        .run(&[
            "overlay",
            "update",
            "crm-import",
            "--exclude",
            "crm.old",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(narrowed["exclude_namespaces"], json!([["crm", "old"]]));
    let stale = cli
        .run(&[
            "overlay",
            "update",
            "crm-import",
            "--exclude",
            "crm.tmp",
            "--if-match",
            overlay["etag"].as_str().expect("etag"),
        ])
        .await
        .fails(3);
    assert!(
        stale.stderr.starts_with("error: PRECONDITION_FAILED: "),
        "{}",
        stale.stderr
    );
    let moved = cli
        .run(&[
            "integration",
            "update",
            "prod",
            "--props",
            "warehouse=w2",
            "-o",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(moved["properties"], json!({"warehouse": "w2"}));
    // The integration cannot be deleted while the overlay uses it; a cascade can.
    let refused = cli.run(&["integration", "delete", "prod"]).await.fails(3);
    assert!(
        refused.stderr.starts_with("error: HAS_DEPENDENTS: "),
        "{}",
        refused.stderr
    );
    cli.run(&["integration", "delete", "prod", "--cascade", "-o", "json"])
        .await
        .ok();
    let overlays = cli
        .run(&["overlay", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(overlays["items"], json!([]));
    // The target catalog remains.
    let catalogs = cli
        .run(&["catalog", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(catalogs["items"][0]["display_name"], "analytics");
}

/// `principal`, `role`, `grant` and `whoami` against the real server: a service principal's
/// secret is printed once, grants name catalogs by name, `grant explain` answers where a
/// privilege comes from, and the principal's token (exchanged from its credentials) reads
/// only what it was granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_roles_and_grants_through_the_cli() {
    let s = Server::local().await;
    let cli = with_account(&s, "acme").await;
    let run = |args: &'static [&'static str]| {
        let cli = s.cli("acme");
        async move { cli.run(args).await.ok().json() }
    };
    cli.run(&["catalog", "create", "lake", "-o", "json"])
        .await
        .ok();
    cli.run(&["catalog", "create", "hidden", "-o", "json"])
        .await
        .ok();
    let me = run(&["whoami", "-o", "json"]).await;
    assert_eq!(me["operator"], true);
    let p = run(&["principal", "create", "etl", "-o", "json"]).await;
    let (client_id, secret) = (
        p["client_id"].as_str().unwrap().to_owned(),
        p["client_secret"].as_str().unwrap().to_owned(),
    );
    let got = run(&["principal", "list", "-o", "json"]).await;
    assert!(
        !got.to_string().contains(&secret),
        "the secret is shown only once"
    );
    run(&["role", "create", "readers", "-o", "json"]).await;
    run(&["role", "add-member", "readers", "etl", "-o", "json"]).await;
    let g = run(&[
        "grant",
        "create",
        "--role",
        "readers",
        "--privilege",
        "read",
        "--catalog",
        "lake",
        "-o",
        "json",
    ])
    .await;
    assert_eq!(g["privilege"], "READ");
    let listed = run(&["grant", "list", "--role", "readers", "-o", "json"]).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    // The principal's own view, through a token from the token route.
    let token = reqwest::Client::new()
        .post(format!("{}/v1/oauth/tokens", s.endpoint))
        .basic_auth(&client_id, Some(&secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let as_etl = Cli::new(&s.endpoint, s.dir.path())
        .env("FLOTILLA_TOKEN", &token)
        .env("FLOTILLA_ACCOUNT", "acme");
    let me = as_etl.run(&["whoami", "-o", "json"]).await.ok().json();
    assert_eq!(
        (me["principal"].clone(), me["roles"].clone()),
        (json!("etl"), json!(["readers"]))
    );
    let cats = as_etl
        .run(&["catalog", "list", "-o", "json"])
        .await
        .ok()
        .json();
    let names: Vec<&str> = cats["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["display_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lake"]);
    let why = as_etl
        .run(&["grant", "explain", "--catalog", "lake", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(why["privileges"][0]["grant"]["id"], g["id"]);
    // Refused: a write it holds no grant for exits with the API's code.
    let refused = as_etl.run(&["catalog", "create", "mine"]).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("PERMISSION_DENIED"),
        "{}",
        refused.stderr
    );
    let id = g["id"].as_str().unwrap();
    let revoked = s
        .cli("acme")
        .run(&["grant", "revoke", id, "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(revoked["deleted"], true);
    let cats = as_etl
        .run(&["catalog", "list", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(cats["items"], json!([]));
}
