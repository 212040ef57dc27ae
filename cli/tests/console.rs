//! The web console, driven in a real headless Chromium (through `chromedriver`, the WebDriver
//! protocol) against the `flotilla serve` binary, with an Iceberg REST fixture as the
//! upstream catalog. One walk through the console as an operator would use it:
//!
//! sign in → create an account and a catalog → create an integration (its secret typed once,
//! never shown) → validate it and read each check → browse the upstream catalog page by page
//! → create an overlay and reconcile it → see the tables appear and a conflict explained →
//! table and view pages (schema tree, provenance, SQL per dialect) → a hostile upstream name
//! rendered as inert text → directory health and engine recipes → pause, and the API's
//! refusal shown as its message → sign in with an account-scoped token and find another
//! account's data unreachable.
//!
//! Screenshots of the main pages go to `.ci/out/console/` (docs/console.md shows copies).
//! Needs Debian's `chromium` and `chromium-driver` (scripts/test.sh installs them);
//! `FLOTILLA_CHROMEDRIVER` / `FLOTILLA_CHROMIUM` override the binaries' paths.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use flotilla_testkit::iceberg_fixture::IcebergFixture;
use serde_json::{Value, json};

const OPERATOR: &str = "console-operator-token-0001";
const ACME: &str = "console-acme-token-0001";
/// A token naming principal `rita` in `acme`: what it sees comes from its roles' grants.
const RITA: &str = "console-rita-token-0001";
const UPSTREAM_SECRET: &str = "upstream-bearer-secret-7f3a";
const HOSTILE: &str = "<img src=x onerror=alert(1)>";
const WAIT: Duration = Duration::from_secs(45);

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/out/console");
    std::fs::create_dir_all(&dir).expect("create .ci/out/console");
    dir
}

/// A child process killed when dropped; its output is copied to a log file by a thread.
struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd`, copies stdout and stderr to `log`, and answers the first stdout line for
/// which `ready` gives a value (bounded by [`WAIT`]).
fn spawn_until(
    mut cmd: Command,
    log: &Path,
    ready: impl Fn(&str) -> Option<String> + Send + 'static,
) -> (Proc, String) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let file = std::fs::File::create(log).expect("log file");
    let err_file = file.try_clone().expect("log file");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut file = file;
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
            if let Some(v) = tx.as_ref().and_then(|_| ready(&line)) {
                let _ = tx.take().map(|t| t.send(v));
            }
        }
    });
    std::thread::spawn(move || {
        let mut file = err_file;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
        }
    });
    let proc = Proc { child };
    match rx.recv_timeout(WAIT) {
        Ok(v) => (proc, v),
        Err(_) => panic!("{cmd:?} did not become ready; see {}", log.display()),
    }
}

fn chromedriver(out: &Path) -> (Proc, String) {
    let bin = std::env::var("FLOTILLA_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    let mut cmd = Command::new(&bin);
    cmd.arg("--port=0");
    if Command::new(&bin).arg("--version").output().is_err() {
        panic!(
            "`{bin}` not found: install Debian's chromium and chromium-driver \
             (scripts/test.sh does: apt-get install -y chromium chromium-driver)"
        );
    }
    let (p, port) = spawn_until(cmd, &out.join("chromedriver.log"), |line| {
        line.split("started successfully on port ")
            .nth(1)
            .map(|p| p.trim().trim_end_matches('.').to_owned())
    });
    (p, format!("http://127.0.0.1:{port}"))
}

fn serve(dir: &Path, out: &Path) -> (Proc, String) {
    let tokens = dir.join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [
            {"token": ACME, "operator": false, "accounts": ["acme"]},
            {"token": RITA, "accounts": ["acme"], "principal": "rita"},
        ]})
        .to_string(),
    )
    .expect("tokens file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--log-json",
        "--allow-insecure-upstreams",
    ])
    .arg("--data-dir")
    .arg(dir.join("data"))
    .env("FLOTILLA_BOOTSTRAP_TOKEN", OPERATOR)
    .env("FLOTILLA_TOKENS_FILE", &tokens)
    .env_remove("RUST_LOG");
    let (p, addr) = spawn_until(cmd, &out.join("serve.log"), |line| {
        let v: Value = serde_json::from_str(line).ok()?;
        let msg = v.get("message")?.as_str()?;
        msg.contains("ready on")
            .then(|| v.get("address")?.as_str().map(str::to_owned))
            .flatten()
    });
    (p, format!("http://{addr}"))
}

/// The browser, with helpers that wait for what a user would wait for.
struct Ui {
    c: Client,
    base: String,
    out: PathBuf,
}

impl Ui {
    async fn wait(&self, loc: Locator<'_>) -> Element {
        let what = format!("{loc:?}");
        match self.c.wait().at_most(WAIT).for_element(loc).await {
            Ok(e) => e,
            Err(e) => {
                let _ = self.shot("failure").await;
                let text = self.body_text().await;
                panic!("waiting for {what}: {e}\n---- page text ----\n{text}");
            }
        }
    }

    async fn css(&self, css: &str) -> Element {
        self.wait(Locator::Css(css)).await
    }

    /// An element matching the XPath step `step` whose text contains `text` (no quotes).
    async fn with_text(&self, step: &str, text: &str) -> Element {
        let xp = format!("//{step}[contains(normalize-space(.), \"{text}\")]");
        self.wait(Locator::XPath(&xp)).await
    }

    async fn heading(&self, text: &str) {
        let xp = format!("//main//div[@class='page-head']/h1[normalize-space(.)=\"{text}\"]");
        self.wait(Locator::XPath(&xp)).await;
    }

    async fn click(&self, css: &str) {
        self.css(css).await.click().await.expect("click");
    }

    async fn fill(&self, css: &str, text: &str) {
        let e = self.css(css).await;
        e.clear().await.expect("clear");
        e.send_keys(text).await.expect("type");
    }

    async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.c.execute(script, args).await.expect("script")
    }

    async fn body_text(&self) -> String {
        self.js("return document.body.innerText", vec![])
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    async fn go(&self, hash: &str) {
        self.js("location.hash = arguments[0]", vec![json!(hash)])
            .await;
    }

    async fn hash(&self) -> String {
        self.js("return location.hash", vec![])
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Scrolls the card titled `title` to the top of the viewport (for screenshots).
    async fn scroll_to_card(&self, title: &str) {
        self.js(
            "const h = [...document.querySelectorAll('section.card h2')].find(e => e.textContent === arguments[0]);\
             if (h) h.closest('section').scrollIntoView({block: 'start'});",
            vec![json!(title)],
        )
        .await;
    }

    async fn rows(&self, css: &str) -> usize {
        let n = self
            .js(
                "return document.querySelectorAll(arguments[0]).length",
                vec![json!(css)],
            )
            .await;
        n.as_u64().unwrap_or_default() as usize
    }

    async fn shot(&self, name: &str) -> Result<(), fantoccini::error::CmdError> {
        let png = self.c.screenshot().await?;
        std::fs::write(self.out.join(format!("{name}.png")), png).expect("write screenshot");
        Ok(())
    }

    async fn sign_in(&self, token: &str, account: &str) {
        self.fill("#signin-token", token).await;
        self.fill("#signin-account", account).await;
        self.click("form.signin-form button[type=submit]").await;
    }
}

/// A `reqwest` call to the API (setup that the console does not offer, and checks).
async fn api(base: &str, token: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let client = reqwest::Client::new();
    let mut req = client
        .request(method.parse().expect("method"), format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("api call");
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{method} {path}: {status} {v}");
    v
}

fn upstream_fixture_schema() -> Value {
    json!({
        "type": "struct", "schema-id": 0,
        "fields": [
            {"id": 1, "name": "customer_id", "required": true, "type": "long"},
            {"id": 2, "name": "email", "required": false, "type": "string", "doc": "primary contact"},
            {"id": 3, "name": "address", "required": false, "type": {
                "type": "struct", "fields": [
                    {"id": 4, "name": "city", "required": false, "type": "string"},
                    {"id": 5, "name": "country", "required": true, "type": "string"}
                ]}},
            {"id": 6, "name": "tags", "required": false, "type": {
                "type": "list", "element-id": 7, "element": "string", "element-required": false}}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_end_to_end_in_headless_chromium() {
    let out = out_dir();
    let _ = std::fs::remove_file(out.join("failure.png"));
    let work = tempfile::tempdir().expect("tempdir");

    // ---- the upstream catalog -------------------------------------------------------------
    let fx = IcebergFixture::start().await;
    fx.add_namespace(&["sales"]);
    fx.add_table_with_schema(&["sales"], "customers", upstream_fixture_schema());
    fx.add_table(&["sales"], "orders");
    fx.add_view_with_dialects(
        &["sales"],
        "big_orders",
        &[
            ("spark", "SELECT * FROM sales.orders WHERE id > 1000"),
            (
                "trino",
                "SELECT * FROM \"sales\".\"orders\" WHERE id > 1000",
            ),
        ],
        &["sales"],
    );
    fx.add_namespace(&["web"]);
    fx.add_table(&["web"], HOSTILE);
    // More root namespaces than one page of the upstream browser (25).
    for i in 0..30 {
        fx.add_namespace(&[&format!("archive_{i:02}")]);
    }

    // ---- flotilla serve and the browser -----------------------------------------------------
    let (_server, base) = serve(work.path(), &out);
    let (_driver, driver_url) = chromedriver(&out);
    let mut caps = serde_json::Map::new();
    let mut chrome = json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1440,1040", "--hide-scrollbars", "--force-device-scale-factor=1",
                 "--no-first-run", "--disable-extensions"],
    });
    let binary = std::env::var("FLOTILLA_CHROMIUM").ok().or_else(|| {
        Path::new("/usr/bin/chromium")
            .exists()
            .then(|| "/usr/bin/chromium".to_owned())
    });
    if let Some(b) = binary {
        chrome["binary"] = json!(b);
    }
    caps.insert("goog:chromeOptions".into(), chrome);
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver_url)
        .await
        .expect("a WebDriver session in chromium");
    let ui = Ui {
        c: client,
        base: base.clone(),
        out: out.clone(),
    };

    // ---- sign in as the operator ------------------------------------------------------------
    ui.c.goto(&format!("{}/console", ui.base))
        .await
        .expect("open");
    ui.css("#signin-token").await;
    ui.shot("signin").await.expect("shot");
    // A wrong token is refused with the API's message, and nothing is stored.
    ui.sign_in("not-a-real-token", "").await;
    ui.css(".signin-form .error").await;
    let stored = ui
        .js("return sessionStorage.length + localStorage.length", vec![])
        .await;
    assert_eq!(stored, json!(0), "a refused token is not kept");
    ui.sign_in(OPERATOR, "").await;
    ui.heading("Accounts").await;

    // ---- accounts: create acme in the console; globex (another tenant) through the API -----
    ui.click("details.disclosure > summary").await;
    ui.fill("input[name=id]", "acme").await;
    ui.fill("input[name=display_name]", "Acme Corp").await;
    ui.click("form.form button[type=submit]").await;
    ui.heading("Catalogs").await;
    api(
        &base,
        OPERATOR,
        "POST",
        "/v1/accounts",
        Some(json!({"id": "globex", "display_name": "Globex"})),
    )
    .await;
    let globex_cat = api(
        &base,
        OPERATOR,
        "POST",
        "/v1/accounts/globex/catalogs",
        Some(json!({"display_name": "globex-secret-plans"})),
    )
    .await;
    // Lists page through the API's page tokens: 13 accounts at 10 per page.
    for i in 0..11 {
        api(
            &base,
            OPERATOR,
            "POST",
            "/v1/accounts",
            Some(json!({"id": format!("team-{i:02}")})),
        )
        .await;
    }
    ui.go("#/accounts").await;
    ui.css("tr[data-id=acme]").await;
    ui.css(".pager select")
        .await
        .select_by_value("10")
        .await
        .expect("page size");
    ui.with_text("span[@class='pager-status muted']", "10 accounts")
        .await;
    assert_eq!(ui.rows("tr[data-id]").await, 10);
    ui.click("button[data-action=next-page]").await;
    ui.with_text("span[@class='pager-status muted']", "Page 2")
        .await;
    assert_eq!(ui.rows("tr[data-id]").await, 3);
    ui.css("tr[data-id=team-10]").await;
    ui.click("button[data-action=previous-page]").await;
    ui.css("tr[data-id=acme]").await;
    ui.shot("accounts").await.expect("shot");

    // ---- a catalog ---------------------------------------------------------------------------
    ui.go("#/a/acme/catalogs").await;
    ui.heading("Catalogs").await;
    ui.click("details.disclosure > summary").await;
    ui.fill("input[name=display_name]", "analytics").await;
    ui.fill("input[name=description]", "Curated sales data")
        .await;
    ui.click("form.form button[type=submit]").await;
    ui.heading("analytics").await;
    let hash = ui.hash().await;
    let catalog_id = hash.rsplit('/').next().expect("catalog id").to_owned();
    // A table created directly at a path the overlay will want: the conflict to explain.
    let cat = format!("/v1/accounts/acme/catalogs/{catalog_id}");
    api(
        &base,
        ACME,
        "POST",
        &format!("{cat}/namespaces"),
        Some(json!({"path": ["sales"]})),
    )
    .await;
    api(
        &base,
        ACME,
        "POST",
        &format!("{cat}/namespaces/sales/tables"),
        Some(json!({"name": "orders", "format": "PARQUET",
            "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}})),
    )
    .await;

    // ---- an integration: created with its secret, which never comes back --------------------
    ui.go("#/a/acme/integrations").await;
    ui.heading("Integrations").await;
    ui.click("details.disclosure > summary").await;
    ui.fill("input[name=display_name]", "lakehouse-rest").await;
    ui.fill("input[name=uri]", &fx.uri()).await;
    ui.css("select[name=auth_type]")
        .await
        .select_by_value("BEARER")
        .await
        .expect("select bearer");
    ui.fill("input[name=secret_token]", UPSTREAM_SECRET).await;
    ui.click("form.form button[type=submit]").await;
    ui.heading("lakehouse-rest").await;
    let integration_id = ui.hash().await.rsplit('/').next().expect("id").to_owned();
    let page = ui
        .js("return document.documentElement.outerHTML", vec![])
        .await;
    assert!(
        !page.as_str().unwrap_or_default().contains(UPSTREAM_SECRET),
        "the upstream secret is not on the page"
    );

    // Validate: every check with its status.
    ui.click("button[data-action=validate]").await;
    ui.css("tr[data-check=CATALOG_CONNECTION][data-status=PASSED]")
        .await;
    let checks = ui
        .js("return [...document.querySelectorAll('tr[data-check]')].map(r => r.dataset.check + '=' + r.dataset.status)", vec![])
        .await;
    let checks: Vec<String> = serde_json::from_value(checks).expect("checks");
    assert_eq!(checks.len(), 5, "{checks:?}");
    assert!(
        checks.contains(&"CATALOG_AUTHENTICATION=PASSED".to_owned()),
        "{checks:?}"
    );
    assert!(
        checks.contains(&"DISCOVERY=PASSED".to_owned()),
        "{checks:?}"
    );
    ui.scroll_to_card("Validation").await;
    ui.shot("integration").await.expect("shot");

    // Upstream browsing, one page at a time.
    ui.click("button[data-action=browse-upstream]").await;
    ui.css("button[data-upstream-ns=archive_00]").await;
    let web_on_first_page = ui
        .js(
            "return !!document.querySelector('button[data-upstream-ns=web]')",
            vec![],
        )
        .await;
    assert_eq!(
        web_on_first_page,
        json!(false),
        "the first page holds 25 namespaces"
    );
    ui.click(".tree button[data-action=more]").await;
    ui.click("button[data-upstream-ns=web]").await;
    let object = ui.css("[data-upstream-object]").await;
    assert_eq!(object.text().await.expect("text"), HOSTILE);
    ui.click("button[data-upstream-ns=sales]").await;
    ui.with_text("td", "big_orders").await;
    ui.scroll_to_card("Upstream catalog").await;
    ui.shot("integration-upstream").await.expect("shot");

    // ---- an overlay, reconciled: tables appear, the conflict is explained --------------------
    ui.go("#/a/acme/overlays").await;
    ui.heading("Overlays").await;
    ui.click("details.disclosure > summary").await;
    ui.fill("input[name=display_name]", "lakehouse").await;
    ui.css(&format!(
        "select[name=integration_id] option[value='{integration_id}']"
    ))
    .await;
    ui.css("select[name=integration_id]")
        .await
        .select_by_value(&integration_id)
        .await
        .expect("integration");
    ui.css(&format!(
        "select[name=catalog_id] option[value='{catalog_id}']"
    ))
    .await;
    ui.css("select[name=catalog_id]")
        .await
        .select_by_value(&catalog_id)
        .await
        .expect("catalog");
    ui.fill("textarea[name=include]", "sales\nweb").await;
    ui.click("form.form button[type=submit]").await;
    ui.heading("lakehouse").await;
    ui.with_text("*[@data-field='last-run']", "has not run yet")
        .await;
    ui.click("button[data-action=reconcile]").await;
    ui.css("[data-field=last-run] .counts-table tr[data-kind=tables]")
        .await;
    let conflict = ui.css("[data-field=conflicts] .problem").await;
    let conflict_text = conflict.text().await.expect("text");
    assert!(
        conflict_text.contains("MAPPING_CONFLICT"),
        "{conflict_text}"
    );
    assert!(conflict_text.contains("orders"), "{conflict_text}");
    assert!(
        conflict_text.contains("directly managed"),
        "{conflict_text}"
    );
    let created = ui
        .css("[data-field=last-run] tr[data-kind=tables] td")
        .await
        .text()
        .await
        .expect("text");
    assert_eq!(created, "0", "a run with a conflict publishes nothing");
    ui.shot("overlay-conflict").await.expect("shot");
    // The operator resolves the conflict (the directly managed table goes) and runs again:
    // customers, orders and the hostile name appear.
    api(
        &base,
        ACME,
        "DELETE",
        &format!("{cat}/namespaces/sales/tables/orders"),
        None,
    )
    .await;
    ui.click("button[data-action=reconcile]").await;
    ui.wait(Locator::XPath(
        "//*[@data-field='last-run']//tr[@data-kind='tables']/td[1][normalize-space(.)='3']",
    ))
    .await;
    ui.shot("overlay").await.expect("shot");

    // ---- the catalog: namespace tree, tables, provenance -----------------------------------
    ui.go(&format!("#/a/acme/catalogs/{catalog_id}")).await;
    ui.heading("analytics").await;
    ui.click("button[data-ns=sales]").await;
    ui.css("a[data-relation=customers]").await;
    ui.css("a[data-relation=orders]").await;
    ui.css("a[data-relation=big_orders]").await;
    ui.shot("catalog").await.expect("shot");
    ui.click("a[data-relation=customers]").await;
    ui.heading("customers").await;
    let provenance = ui
        .css("[data-field=provenance]")
        .await
        .text()
        .await
        .expect("text");
    assert!(
        provenance.contains("Materialized by an overlay"),
        "{provenance}"
    );
    ui.css(&format!(
        "[data-field=provenance] a[href$='{integration_id}']"
    ))
    .await;
    ui.with_text("li//li", "country").await;
    ui.shot("table").await.expect("shot");
    ui.go(&format!(
        "#/a/acme/catalogs/{catalog_id}/views/sales/big_orders"
    ))
    .await;
    ui.heading("big_orders").await;
    ui.css(".sql[data-dialect=spark]").await;
    ui.css(".sql[data-dialect=trino]").await;
    ui.shot("view").await.expect("shot");

    // ---- a hostile upstream name is text ------------------------------------------------------
    ui.go(&format!("#/a/acme/catalogs/{catalog_id}")).await;
    ui.heading("analytics").await;
    ui.click("button[data-ns=web]").await;
    let link = ui.css("a[data-relation]").await;
    assert_eq!(link.text().await.expect("text"), HOSTILE);
    link.click().await.expect("open the hostile table");
    ui.heading(HOSTILE).await;
    let injected = ui
        .js(
            "return document.querySelectorAll('img:not([src$=\"icon.svg\"]), [onerror]').length",
            vec![],
        )
        .await;
    assert_eq!(injected, json!(0), "no element was made from the name");
    assert!(ui.c.get_alert_text().await.is_err(), "no script ran");
    ui.shot("hostile-name").await.expect("shot");

    // ---- directory health and engine recipes --------------------------------------------------
    ui.go(&format!("#/a/acme/catalogs/{catalog_id}")).await;
    ui.heading("analytics").await;
    ui.click("button[data-tab=directory]").await;
    ui.with_text("div[@class='health-summary']", "tables").await;
    ui.shot("directory").await.expect("shot");
    ui.click("button[data-tab=engines]").await;
    let uri = ui
        .css("[data-field=iceberg-uri]")
        .await
        .text()
        .await
        .expect("text");
    assert_eq!(uri, format!("{base}/iceberg"));
    let warehouse = ui
        .css("[data-field=warehouse]")
        .await
        .text()
        .await
        .expect("text");
    assert_eq!(warehouse, "acme/analytics");
    for engine in ["pyiceberg", "DuckDB", "Spark"] {
        ui.css(&format!(".recipe[data-engine={engine}] pre")).await;
    }
    ui.shot("engines").await.expect("shot");

    // ---- activity and audit ---------------------------------------------------------------------
    // The catalog's events: the directly created table and its drop (by a principal), then
    // the overlay's publications (its actor shown as an overlay).
    ui.click("button[data-tab=activity]").await;
    ui.css("[data-panel=activity] tr[data-type=drop-table]")
        .await;
    ui.css("[data-panel=activity] tr[data-type=create-namespace]")
        .await;
    ui.with_text("div[@data-panel='activity']//td", "overlay")
        .await;
    let hostile_rows = ui
        .js(
            "return [...document.querySelectorAll('[data-panel=activity] td')].filter(td => td.textContent.includes(arguments[0])).length",
            vec![json!(HOSTILE)],
        )
        .await;
    assert!(
        hostile_rows.as_u64().unwrap_or(0) >= 1,
        "the hostile name's event is listed as text"
    );
    assert_eq!(
        ui.js(
            "return document.querySelectorAll('[onerror]').length",
            vec![]
        )
        .await,
        json!(0)
    );
    ui.shot("activity").await.expect("shot");
    // The account's audit: the same mutations with their principal; a filter narrows it.
    ui.go("#/a/acme/audit").await;
    ui.heading("Audit").await;
    ui.css("tr[data-kind=mutation]").await;
    ui.shot("audit").await.expect("shot");
    ui.fill("input[name=principal]", "nobody-at-all").await;
    ui.click("form.inline button[type=submit]").await;
    ui.with_text("p[@class='empty']", "Nothing audited yet")
        .await;

    // ---- pause: the API's refusal is shown as its message -----------------------------------
    ui.go("#/a/acme/overlays").await;
    ui.heading("Overlays").await;
    ui.click("table.data a").await;
    ui.heading("lakehouse").await;
    ui.click("button[data-action=pause]").await;
    ui.with_text("table[@class='kv']//td", "paused").await;
    ui.click("button[data-action=reconcile]").await;
    let err = ui
        .css(".action-out .error")
        .await
        .text()
        .await
        .expect("text");
    assert!(err.contains("409"), "{err}");
    assert!(!err.contains("    at "), "no stack trace: {err}");
    ui.shot("overlay-paused").await.expect("shot");
    ui.click("button[data-action=pause]").await;
    ui.with_text("table[@class='kv']//td", "active").await;

    // ---- index catalogs ------------------------------------------------------------------------
    ui.go("#/a/acme/index-catalogs").await;
    ui.heading("Index catalogs").await;
    ui.click("details.disclosure > summary").await;
    ui.fill("input[name=name]", "search").await;
    ui.fill("input[name=warehouse]", "s3://acme-indexes/search/")
        .await;
    ui.click("form.form button[type=submit]").await;
    ui.heading("search").await;
    ui.with_text("div[@class='pane-main']", "Select a namespace")
        .await;
    ui.shot("index-catalog").await.expect("shot");

    // ---- access control: the admin's view, and a reader's -----------------------------------
    api(
        &base,
        ACME,
        "POST",
        "/v1/accounts/acme/roles",
        Some(json!({"name": "readers"})),
    )
    .await;
    api(
        &base,
        ACME,
        "PUT",
        "/v1/accounts/acme/roles/readers/members/rita",
        None,
    )
    .await;
    let grant = api(
        &base,
        ACME,
        "POST",
        "/v1/accounts/acme/grants",
        Some(json!({"role": "readers", "privilege": "READ",
            "securable": {"type": "CATALOG", "catalog_id": catalog_id}})),
    )
    .await;
    let grant_id = grant["id"].as_str().expect("grant id").to_owned();
    ui.go("#/a/acme/access").await;
    ui.heading("Access").await;
    ui.css("tr[data-role=readers]").await;
    ui.css(&format!("tr[data-grant='{grant_id}']")).await;
    ui.shot("access").await.expect("shot");
    ui.click("#sign-out").await;
    ui.css("#signin-token").await;
    ui.sign_in(RITA, "acme").await;
    ui.heading("Catalogs").await;
    ui.with_text("table[@class='data']//a", "analytics").await;
    // The reader may not create catalogs: the console does not offer it.
    let text = ui.body_text().await;
    assert!(!text.contains("Create a catalog"), "{text}");
    ui.go("#/a/acme/access").await;
    ui.heading("Access").await;
    ui.with_text("table[@class='kv']//td", "rita").await;
    let text = ui.body_text().await;
    assert!(
        text.contains("readers") && !text.contains("Service principals"),
        "{text}"
    );
    // Revoked: the catalog is gone from the reader's listing at the next load.
    api(
        &base,
        ACME,
        "DELETE",
        &format!("/v1/accounts/acme/grants/{grant_id}"),
        None,
    )
    .await;
    ui.go("#/a/acme/catalogs").await;
    ui.heading("Catalogs").await;
    ui.with_text("p[@class='empty']", "No catalogs").await;
    ui.click("#sign-out").await;
    ui.css("#signin-token").await;
    ui.sign_in(OPERATOR, "").await;
    ui.heading("Accounts").await;

    // ---- the token lives only in this tab's session ------------------------------------------
    let storage = ui
        .js(
            "return [sessionStorage.length, localStorage.length, document.cookie]",
            vec![],
        )
        .await;
    assert_eq!(storage, json!([1, 0, ""]));

    // ---- an account-scoped token reaches its account only -----------------------------------
    ui.click("#sign-out").await;
    ui.css("#signin-token").await;
    ui.sign_in(ACME, "globex").await;
    let refused = ui
        .css(".signin-form .error")
        .await
        .text()
        .await
        .expect("text");
    assert!(refused.contains("403"), "{refused}");
    ui.sign_in(ACME, "acme").await;
    ui.heading("Catalogs").await;
    ui.with_text("table[@class='data']//a", "analytics").await;
    let globex_id = globex_cat["id"].as_str().expect("id");
    for hash in [
        "#/a/globex/catalogs".to_owned(),
        format!("#/a/globex/catalogs/{globex_id}"),
    ] {
        ui.go(&hash).await;
        let err = ui.css("main .error").await.text().await.expect("text");
        assert!(err.contains("403") || err.contains("404"), "{err}");
        let text = ui.body_text().await;
        assert!(!text.contains("globex-secret-plans"), "{text}");
        ui.go("#/a/acme/catalogs").await;
        ui.heading("Catalogs").await;
    }
    ui.go("#/a/globex/catalogs").await;
    ui.css("main .error").await;
    ui.shot("isolation").await.expect("shot");

    ui.c.close().await.expect("close the browser");
}
