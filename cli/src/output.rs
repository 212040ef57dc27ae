//! Rendering: aligned tables and key/value blocks for people, one JSON document for scripts.
//!
//! Every text that came from the server or from upstream catalogs passes through [`clean`](crate::sanitize::clean)
//! before it reaches a terminal, so a name holding escape sequences cannot rewrite the screen.

use std::io::Write;

use serde_json::Value;

use crate::nspath;
use crate::sanitize::clean;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables and key/value blocks.
    Table,
    /// Exactly one JSON document on stdout.
    Json,
}

/// How one column reads its cell from an item.
pub type Cell = fn(&Value) -> String;

pub struct Column {
    pub header: &'static str,
    pub cell: Cell,
}

pub const fn col(header: &'static str, cell: Cell) -> Column {
    Column { header, cell }
}

/// A field as display text: strings bare, null empty, the rest as compact JSON.
pub fn text(v: &Value, field: &str) -> String {
    scalar(v.get(field).unwrap_or(&Value::Null))
}

pub fn scalar(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => clean(s),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_owned(),
        other => clean(&other.to_string()),
    }
}

/// A namespace path field in the CLI's own quoting.
pub fn path(v: &Value, field: &str) -> String {
    clean(&nspath::display_json(v.get(field).unwrap_or(&Value::Null)))
}

/// A list of namespace paths, comma separated.
pub fn paths(v: &Value, field: &str) -> String {
    match v.get(field).and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .map(|p| clean(&nspath::display_json(p)))
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    }
}

/// `k=v, k2=v2` for a string map.
pub fn props(v: &Value, field: &str) -> String {
    match v.get(field).and_then(Value::as_object) {
        Some(m) => m
            .iter()
            .map(|(k, v)| format!("{}={}", clean(k), scalar(v)))
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    }
}

pub fn render_table(columns: &[Column], rows: &[Value]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| (c.cell)(r)).collect())
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.chars().count()).collect();
    for row in &cells {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, values: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, v) in values.enumerate() {
            if i + 1 < widths.len() {
                l.push_str(v);
                l.push_str(&" ".repeat(widths[i] - v.chars().count() + 2));
            } else {
                l.push_str(v);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &mut columns.iter().map(|c| c.header));
    for row in &cells {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

/// `key: value` lines for one resource; nested objects and arrays as compact JSON.
pub fn render_object(v: &Value) -> String {
    let Some(obj) = v.as_object() else {
        return format!("{}\n", scalar(v));
    };
    let width = obj.keys().map(|k| k.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, val) in obj {
        let shown = match val {
            Value::Object(m)
                if m.values().all(|x| !x.is_object() && !x.is_array()) && !m.is_empty() =>
            {
                m.iter()
                    .map(|(k, v)| format!("{}={}", clean(k), scalar(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            // Namespace paths in the CLI's own syntax, so they can be pasted back.
            Value::Array(_) if matches!(k.as_str(), "path" | "namespace" | "default_namespace") => {
                path(v, k)
            }
            Value::Array(_) if k.ends_with("_namespaces") => paths(v, k),
            other => scalar(other),
        };
        out.push_str(&format!(
            "{:width$}  {}\n",
            format!("{}:", clean(k)),
            shown,
            width = width + 1
        ));
    }
    out
}

/// Where results go: stdout for the result, stderr for hints and progress.
pub struct Printer {
    pub format: Format,
}

impl Printer {
    /// Prints a single resource.
    pub fn object(&self, v: &Value) {
        match self.format {
            Format::Json => self.json(v),
            Format::Table => print_out(&render_object(v)),
        }
    }

    /// Prints a list answer (`{"items": [...], "next_page_token": ...}`).
    pub fn list(&self, v: &Value, columns: &[Column]) {
        match self.format {
            Format::Json => self.json(v),
            Format::Table => {
                let items = v
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                print_out(&render_table(columns, &items));
                if let Some(t) = v.get("next_page_token").and_then(Value::as_str) {
                    eprintln!(
                        "more results: repeat with --page-token {} (or --all)",
                        clean(t)
                    );
                }
            }
        }
    }

    /// Prints the result of an action without a representation (e.g. a delete).
    pub fn done(&self, v: &Value, message: &str) {
        match self.format {
            Format::Json => self.json(v),
            Format::Table => print_out(&format!("{}\n", clean(message))),
        }
    }

    pub fn json(&self, v: &Value) {
        let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".to_owned());
        print_out(&format!("{text}\n"));
    }
}

/// Writes to stdout, ignoring a closed pipe (`flotilla ... | head`) instead of panicking.
pub fn print_out(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_and_clean_cells() {
        let cols = [
            col("NAME", |v| text(v, "name")),
            col("PATH", |v| path(v, "path")),
        ];
        let rows = vec![
            json!({"name": "a", "path": ["x", "y.z"]}),
            json!({"name": "long\u{1b}[2Jname", "path": ["q"]}),
        ];
        let t = render_table(&cols, &rows);
        let lines: Vec<&str> = t.lines().collect();
        // The widest NAME cell is 12 characters once cleaned, plus two spaces of gutter.
        assert_eq!(lines[0], format!("NAME{}PATH", " ".repeat(10)));
        assert_eq!(lines[1], format!("a{}x.\"y.z\"", " ".repeat(13)));
        assert!(!t.contains('\u{1b}'));
    }

    #[test]
    fn objects_render_as_key_value_lines() {
        let t = render_object(&json!({"id": "1", "properties": {"a": "b"}, "flag": true}));
        assert!(t.contains("id:          1"), "{t}");
        assert!(t.contains("properties:  a=b"), "{t}");
        assert!(t.contains("flag:        yes"), "{t}");
        let t = render_object(
            &json!({"path": ["a", "b.c"], "include_namespaces": [["crm"], ["x.y", "z"]]}),
        );
        assert!(t.contains("path:") && t.contains("  a.\"b.c\"\n"), "{t}");
        assert!(t.contains("crm, \"x.y\".z"), "{t}");
    }
}
