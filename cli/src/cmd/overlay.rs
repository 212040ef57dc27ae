//! `flotilla overlay`: bind an integration's upstream namespaces into an existing catalog,
//! and reconcile them.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt};
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::nspath::{self, NsPath};
use crate::output::{Column, Format, col, path, paths, render_object, render_table, text};
use crate::resolve::{self, Kind};

#[derive(Debug, Subcommand)]
pub enum OverlayCmd {
    /// Create an overlay of INTEGRATION into CATALOG (names or ids).
    Create {
        name: String,
        integration: String,
        catalog: String,
        /// An upstream namespace to include, with its descendants (repeatable; none = all).
        #[arg(long, value_parser = nspath::parse_arg)]
        include: Vec<NsPath>,
        /// An upstream namespace to leave out, with its descendants (repeatable).
        #[arg(long, value_parser = nspath::parse_arg)]
        exclude: Vec<NsPath>,
        /// Scheduled reconciliation interval in seconds (server default when omitted).
        #[arg(long, value_name = "SECS")]
        refresh_interval: Option<u64>,
        /// Create the overlay paused (no scheduled reconciliation).
        #[arg(long)]
        paused: bool,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show an overlay and its last reconciliation.
    Get { overlay: String },
    /// List overlays, optionally only those of one integration.
    List {
        #[arg(long)]
        integration: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Rename an overlay or replace its namespace selection.
    Update {
        overlay: String,
        #[arg(long)]
        name: Option<String>,
        /// Replaces the include list (repeatable).
        #[arg(long, value_parser = nspath::parse_arg, conflicts_with = "clear_include")]
        include: Vec<NsPath>,
        /// Replaces the exclude list (repeatable).
        #[arg(long, value_parser = nspath::parse_arg, conflicts_with = "clear_exclude")]
        exclude: Vec<NsPath>,
        /// Empties the include list (include everything).
        #[arg(long)]
        clear_include: bool,
        /// Empties the exclude list.
        #[arg(long)]
        clear_exclude: bool,
        /// Scheduled reconciliation interval in seconds.
        #[arg(long, value_name = "SECS")]
        refresh_interval: Option<u64>,
        /// Stop scheduled reconciliation.
        #[arg(long, conflicts_with = "resume")]
        pause: bool,
        /// Resume scheduled reconciliation.
        #[arg(long)]
        resume: bool,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete an overlay (its materialized objects are retired by the server).
    Delete {
        overlay: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Reconcile now and print the summary; shows progress on stderr while it runs.
    Reconcile {
        overlay: String,
        /// Answer once the capture of what the run changed completed (the server waits at
        /// most 20 s, then answers what is still pending).
        #[arg(long)]
        wait_for_capture: bool,
    },
    /// Show the overlay's health: state, failures, tables by state and staleness.
    Status { overlay: String },
}

const FAILURE_COLUMNS: &[Column] = &[
    col("OBJECT", |v| path(v, "object")),
    col("KIND", |v| text(v, "kind")),
    col("CODE", |v| text(v, "code")),
    col("SINCE", |v| text(v, "since")),
    col("ATTEMPTS", |v| text(v, "attempts")),
    col("MESSAGE", |v| text(v, "message")),
];

/// `overlay status` for people: the state, table counts and staleness, the failures as a
/// table, then the last run.
pub fn render_status(v: &Value) -> String {
    let t = &v["tables"];
    let st = &v["staleness_ms"];
    let ms = |x: &Value| {
        x.as_i64()
            .map_or_else(|| "-".to_owned(), |n| format!("{n} ms"))
    };
    let mut out = format!(
        "state:      {}\ntables:     total {}, visible {}, pending {}, invalid {}, not readable {}\n\
         staleness:  p50 {}, p99 {}, max {}\n",
        text(v, "state"),
        crate::output::scalar(&t["total"]),
        crate::output::scalar(&t["visible"]),
        crate::output::scalar(&t["pending"]),
        crate::output::scalar(&t["invalid"]),
        crate::output::scalar(&t["not_readable"]),
        ms(&st["p50"]),
        ms(&st["p99"]),
        ms(&st["max"]),
    );
    let failures = v["failures"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!(
        "failures:   {}\n",
        crate::output::scalar(&v["failures_total"])
    ));
    if !failures.is_empty() {
        out.push_str(&render_table(FAILURE_COLUMNS, &failures));
    }
    out.push_str(&render_last_run(&v["last_reconcile"]));
    out
}

const COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("NAME", |v| text(v, "display_name")),
    col("INTEGRATION", |v| text(v, "integration_id")),
    col("CATALOG", |v| text(v, "catalog_id")),
    col("INCLUDE", |v| paths(v, "include_namespaces")),
    col("EXCLUDE", |v| paths(v, "exclude_namespaces")),
    col("GENERATION", |v| text(v, "generation")),
];

const CONFLICT_COLUMNS: &[Column] = &[
    col("PATH", |v| path(v, "path")),
    col("KIND", |v| text(v, "kind")),
    col("HOLDER", holder),
    col("CODE", |v| text(v, "code")),
    col("REASON", |v| text(v, "reason")),
];

/// Who holds a conflicting destination path: `local TABLE`, `overlay <id> VIEW`, `upstream`.
fn holder(v: &Value) -> String {
    let h = &v["holder"];
    let kind = h["kind"].as_str().unwrap_or("");
    let shown = match h["type"].as_str() {
        Some("LOCAL") => format!("local {kind}"),
        Some("OVERLAY") => format!("overlay {} {kind}", h["overlay_id"].as_str().unwrap_or("?")),
        Some("UPSTREAM") => "upstream".to_owned(),
        _ => String::new(),
    };
    crate::sanitize::clean(shown.trim())
}

fn yes_no(v: &Value) -> &'static str {
    if v.as_bool() == Some(true) {
        "yes"
    } else {
        "no"
    }
}

fn counts(v: &Value) -> String {
    format!(
        "created {}, updated {}, unchanged {}, retired {}",
        crate::output::scalar(&v["created"]),
        crate::output::scalar(&v["updated"]),
        crate::output::scalar(&v["unchanged"]),
        crate::output::scalar(&v["retired"])
    )
}

/// The overlay's last run for people: outcome, why it failed, failures in a row, last
/// success, what it wrote, and its conflicts.
pub fn render_last_run(run: &Value) -> String {
    if run.is_null() {
        return "last reconcile:  never\n".to_owned();
    }
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| lines.push((k.to_owned(), v));
    add("outcome", text(run, "outcome"));
    add("started_at", text(run, "started_at"));
    add("duration_ms", text(run, "duration_ms"));
    let err = &run["error"];
    if err.is_object() {
        add(
            "error",
            format!(
                "{} in {} (retryable: {})",
                text(err, "code"),
                text(err, "stage"),
                yes_no(&err["retryable"])
            ),
        );
        add("cause", text(err, "message"));
        if err["object"].is_array() {
            add("object", path(err, "object"));
        }
    }
    add("consecutive_failures", text(run, "consecutive_failures"));
    add(
        "last_success_time",
        run["last_success_time"]
            .as_str()
            .map_or_else(|| "never".to_owned(), crate::sanitize::clean),
    );
    for kind in ["namespaces", "tables", "views"] {
        if run[kind].is_object() {
            add(kind, counts(&run[kind]));
        }
    }
    if let Some(d) = run["dropped"].as_object()
        && d.values().any(|n| n.as_u64().unwrap_or(0) > 0)
    {
        add("dropped", counts_of(&run["dropped"]));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::from("last reconcile:\n");
    for (k, v) in lines {
        out.push_str(&format!(
            "  {:width$}  {}\n",
            format!("{k}:"),
            v,
            width = width
        ));
    }
    let conflicts = run["conflicts"].as_array().cloned().unwrap_or_default();
    if !conflicts.is_empty() {
        let total = run["conflicts_total"]
            .as_u64()
            .unwrap_or(conflicts.len() as u64);
        out.push_str(&format!("  conflicts: {total}\n"));
        for line in render_table(CONFLICT_COLUMNS, &conflicts).lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
}

fn counts_of(v: &Value) -> String {
    format!(
        "namespaces {}, tables {}, views {}",
        crate::output::scalar(&v["namespaces"]),
        crate::output::scalar(&v["tables"]),
        crate::output::scalar(&v["views"])
    )
}

/// `overlay get` for people: the overlay's fields, then its last run.
pub fn render_overlay(v: &Value) -> String {
    let mut head = v.as_object().cloned().unwrap_or_default();
    let run = head.remove("last_reconcile").unwrap_or(Value::Null);
    let mut out = render_object(&Value::Object(head));
    out.push_str(&render_last_run(&run));
    out
}

fn path_list(p: &[NsPath]) -> Value {
    Value::Array(p.iter().map(NsPath::json).collect())
}

/// The reconcile summary for people: counts, then conflicts and skipped branches as tables.
pub fn render_summary(v: &Value) -> String {
    let mut head = Map::new();
    for k in [
        "created",
        "updated",
        "unchanged",
        "retired",
        "duration_ms",
        "generation",
    ] {
        if let Some(x) = v.get(k) {
            head.insert(k.to_owned(), x.clone());
        }
    }
    // Unknown scalar fields still show, so a richer server summary is not hidden.
    if let Some(obj) = v.as_object() {
        for (k, x) in obj {
            if !head.contains_key(k)
                && !x.is_array()
                && !matches!(k.as_str(), "conflicts" | "skipped")
            {
                head.insert(k.clone(), x.clone());
            }
        }
    }
    let mut out = render_object(&Value::Object(head));
    let conflicts = v
        .get("conflicts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    out.push_str(&format!("\nconflicts: {}\n", conflicts.len()));
    if !conflicts.is_empty() {
        out.push_str(&render_table(CONFLICT_COLUMNS, &conflicts));
    }
    let skipped = v
        .get("skipped")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    out.push_str(&format!("skipped: {}\n", skipped.len()));
    for s in &skipped {
        let shown = if s.is_array() {
            crate::sanitize::clean(&nspath::display_json(s))
        } else if s.get("path").is_some() {
            format!("{} {}", path(s, "path"), text(s, "reason"))
        } else {
            crate::output::scalar(s)
        };
        out.push_str(&format!("  {shown}\n"));
    }
    out
}

pub async fn run(ctx: &Ctx, cmd: OverlayCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        OverlayCmd::Create {
            name,
            integration,
            catalog,
            include,
            exclude,
            refresh_interval,
            paused,
            create,
        } => {
            let integration_id = resolve::id(api, Kind::Integration, &integration).await?;
            let catalog_id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let mut body = json!({
                "display_name": name,
                "integration_id": integration_id,
                "catalog_id": catalog_id,
                "include_namespaces": path_list(&include),
                "exclude_namespaces": path_list(&exclude),
            });
            // Optional fields are sent only when asked for.
            if let Some(secs) = refresh_interval {
                body["refresh_interval_secs"] = json!(secs);
            }
            if paused {
                body["paused"] = json!(true);
            }
            let req = create.apply(Req::new(Method::POST, api.acct(&["overlays"])?).body(body));
            ctx.out.object(&api.send(req).await?.body);
        }
        OverlayCmd::Get { overlay } => {
            let id = resolve::id(api, Kind::Overlay, &overlay).await?;
            let body = api
                .send(Req::get(api.acct(&["overlays", &id])?))
                .await?
                .body;
            match ctx.out.format {
                Format::Json => ctx.out.json(&body),
                Format::Table => crate::output::print_out(&render_overlay(&body)),
            }
        }
        OverlayCmd::List {
            integration,
            paging,
        } => {
            let integration_id = match integration {
                Some(i) => Some(resolve::id(api, Kind::Integration, &i).await?),
                None => None,
            };
            let req =
                Req::get(api.acct(&["overlays"])?).query_opt("integration_id", integration_id);
            ctx.out.list(&api.list(req, &paging).await?, COLUMNS);
        }
        OverlayCmd::Update {
            overlay,
            name,
            include,
            exclude,
            clear_include,
            clear_exclude,
            refresh_interval,
            pause,
            resume,
            etag,
        } => {
            let mut body = Map::new();
            if let Some(n) = name {
                body.insert("display_name".into(), Value::String(n));
            }
            if !include.is_empty() || clear_include {
                body.insert("include_namespaces".into(), path_list(&include));
            }
            if !exclude.is_empty() || clear_exclude {
                body.insert("exclude_namespaces".into(), path_list(&exclude));
            }
            if let Some(secs) = refresh_interval {
                body.insert("refresh_interval_secs".into(), json!(secs));
            }
            super::set_paused(&mut body, pause, resume);
            if body.is_empty() {
                return Err(CliError::usage(
                    "nothing to update: pass --name, --include, --exclude or a --clear-* flag",
                ));
            }
            let id = resolve::id(api, Kind::Overlay, &overlay).await?;
            let path = api.acct(&["overlays", &id])?;
            super::patch_guarded(
                ctx,
                path,
                body,
                etag.etag,
                &["include_namespaces", "exclude_namespaces"],
            )
            .await?;
        }
        OverlayCmd::Delete { overlay, etag } => {
            let id = resolve::id(api, Kind::Overlay, &overlay).await?;
            let req = Req::new(Method::DELETE, api.acct(&["overlays", &id])?)
                .if_match(etag.etag.as_deref());
            api.send(req).await?;
            ctx.out.done(
                &deleted("overlay", "id", json!(id)),
                &format!("overlay {id} deleted"),
            );
        }
        OverlayCmd::Status { overlay } => {
            let id = resolve::id(api, Kind::Overlay, &overlay).await?;
            let body = api
                .send(Req::get(api.acct(&["overlays", &id, "status"])?))
                .await?
                .body;
            match ctx.out.format {
                Format::Json => ctx.out.json(&body),
                Format::Table => crate::output::print_out(&render_status(&body)),
            }
        }
        OverlayCmd::Reconcile {
            overlay,
            wait_for_capture,
        } => {
            let id = resolve::id(api, Kind::Overlay, &overlay).await?;
            // An empty JSON object: the API answers 415 to a body-less POST on JSON routes.
            let req = Req::new(Method::POST, api.acct(&["overlays", &id, "reconcile"])?)
                .query_opt("wait_for_capture", wait_for_capture.then_some("true"))
                .body(json!({}));
            let summary = match with_progress(&id, api.send(req)).await {
                Ok(r) => r.body,
                Err(CliError::Api(f)) => {
                    // A conflicting run lists every conflict; show them before the error line.
                    if let Some(list) = f.details.get("conflicts").and_then(Value::as_array)
                        && ctx.out.format == Format::Table
                    {
                        eprint!("{}", render_table(CONFLICT_COLUMNS, list));
                    }
                    return Err(CliError::Api(f));
                }
                Err(e) => return Err(e),
            };
            match ctx.out.format {
                Format::Json => ctx.out.json(&summary),
                Format::Table => crate::output::print_out(&render_summary(&summary)),
            }
        }
    }
    Ok(())
}

/// Runs `fut`, reporting elapsed time on stderr every few seconds (a live line on a terminal,
/// sparse lines otherwise), so a long synchronous reconciliation does not look hung. Progress
/// never goes to stdout, which stays one JSON document under `--output json`.
async fn with_progress<T>(id: &str, fut: impl std::future::Future<Output = T>) -> T {
    let tty = std::io::stderr().is_terminal();
    let every = if tty {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    let started = Instant::now();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tokio::pin!(fut);
    let mut reported = false;
    let out = loop {
        tokio::select! {
            out = &mut fut => break out,
            _ = tick.tick() => {
                reported = true;
                let secs = started.elapsed().as_secs();
                if tty {
                    eprint!("\rreconciling overlay {id}: {secs}s elapsed");
                } else {
                    eprintln!("reconciling overlay {id}: {secs}s elapsed");
                }
            }
        }
    };
    if reported && tty {
        eprintln!(
            "\rreconciling overlay {id}: done after {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_status_shows_state_counts_staleness_and_failures() {
        let v = json!({
            "state": "DEGRADED",
            "last_reconcile": null,
            "failures": [{"object": ["sales", "orders"], "kind": "TABLE", "code": "NOT_READABLE",
                          "message": "no credentials", "since": "2026-12-01T00:00:00Z", "attempts": 3}],
            "failures_total": 1,
            "tables": {"total": 4, "visible": 2, "pending": 1, "invalid": 0, "not_readable": 1},
            "staleness_ms": {"p50": 1200, "p99": 5000, "max": 5000},
        });
        let out = render_status(&v);
        assert!(out.contains("state:      DEGRADED"), "{out}");
        assert!(
            out.contains("total 4, visible 2, pending 1, invalid 0, not readable 1"),
            "{out}"
        );
        assert!(
            out.contains("p50 1200 ms, p99 5000 ms, max 5000 ms"),
            "{out}"
        );
        assert!(
            out.contains("NOT_READABLE") && out.contains("sales.orders"),
            "{out}"
        );
        assert!(out.contains("last reconcile:  never"), "{out}");
        let empty = render_status(&json!({"state": "HEALTHY", "tables": {}, "staleness_ms": {}}));
        assert!(empty.contains("p50 -, p99 -, max -"), "{empty}");
    }

    #[test]
    fn overlay_get_shows_the_last_failed_run() {
        let v = json!({
            "id": "o1", "display_name": "crm",
            "last_reconcile": {
                "outcome": "FAILED", "started_at": "2026-01-01T00:00:00.000Z", "duration_ms": 5,
                "error": {"code": "MAPPING_CONFLICT", "message": "1 destination paths conflict",
                          "retryable": false, "stage": "PREFLIGHT", "object": null},
                "consecutive_failures": 2, "last_success_time": null,
                "namespaces": {"created": 0, "updated": 0, "unchanged": 0, "retired": 0},
                "conflicts": [{"path": ["crm", "orders"], "kind": "TABLE",
                               "holder": {"type": "OVERLAY", "overlay_id": "o2", "kind": "TABLE"},
                               "code": "MAPPING_CONFLICT", "reason": "managed by overlay o2"}],
                "conflicts_total": 1
            }
        });
        let t = render_overlay(&v);
        assert!(t.contains("display_name:") && t.contains("crm"), "{t}");
        assert!(t.contains("outcome:") && t.contains("FAILED"), "{t}");
        assert!(
            t.contains("MAPPING_CONFLICT in PREFLIGHT (retryable: no)"),
            "{t}"
        );
        assert!(
            t.contains("consecutive_failures:") && t.contains("2"),
            "{t}"
        );
        assert!(
            t.contains("last_success_time:") && t.contains("never"),
            "{t}"
        );
        assert!(
            t.contains("crm.orders") && t.contains("overlay o2 TABLE"),
            "{t}"
        );
        let never = render_overlay(&json!({"id": "o1", "last_reconcile": null}));
        assert!(never.contains("last reconcile:  never"), "{never}");
    }

    #[test]
    fn summary_shows_counts_conflicts_and_skips() {
        let v = json!({
            "created": 3, "updated": 1, "unchanged": 7, "retired": 0, "duration_ms": 42,
            "conflicts": [{"path": ["crm", "orders"], "kind": "TABLE",
                           "holder": {"type": "LOCAL", "kind": "VIEW"},
                           "code": "MAPPING_CONFLICT", "reason": "exists"}],
            "skipped": [["tmp"]]
        });
        let t = render_summary(&v);
        assert!(t.contains("created:") && t.contains("3"), "{t}");
        assert!(t.contains("conflicts: 1"), "{t}");
        assert!(
            t.contains("crm.orders") && t.contains("TABLE") && t.contains("local VIEW"),
            "{t}"
        );
        assert!(t.contains("skipped: 1") && t.contains("  tmp"), "{t}");
    }
}
