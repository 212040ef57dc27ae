//! Namespace paths on the command line.
//!
//! A path is written with `.` between segments (`sales.eu`). A segment that itself contains a
//! dot is either quoted (`"eu.west".retail`) or escaped (`eu\.west.retail`); inside quotes, and
//! outside them, `\` escapes the next character (`\"`, `\\`, `\.`). Empty segments are refused,
//! so `a..b`, `.a` and `a.` are errors rather than silently different paths. Printing uses the
//! same rules, so what the CLI shows can be pasted back.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid namespace path {input:?}: {reason}")]
pub struct PathError {
    input: String,
    reason: &'static str,
}

/// Parses `a.b`, `"a.b".c` or `a\.b.c` into its segments.
pub fn parse(input: &str) -> Result<Vec<String>, PathError> {
    let err = |reason| PathError {
        input: input.to_owned(),
        reason,
    };
    let mut segments = Vec::new();
    let mut current = String::new();
    // Whether the current segment had any content written (quotes make "" explicit, refused below).
    let mut started = false;
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let next = chars
                    .next()
                    .ok_or_else(|| err("a trailing backslash escapes nothing"))?;
                current.push(next);
                started = true;
            }
            '"' => {
                if started {
                    return Err(err("a quote may only open a segment"));
                }
                started = true;
                let mut closed = false;
                while let Some(q) = chars.next() {
                    match q {
                        '\\' => {
                            let next = chars
                                .next()
                                .ok_or_else(|| err("a trailing backslash escapes nothing"))?;
                            current.push(next);
                        }
                        '"' => {
                            closed = true;
                            break;
                        }
                        other => current.push(other),
                    }
                }
                if !closed {
                    return Err(err("unterminated quote"));
                }
                match chars.clone().next() {
                    None | Some('.') => {}
                    Some(_) => return Err(err("a closing quote must end the segment")),
                }
            }
            '.' => {
                if current.is_empty() {
                    return Err(err("empty segment"));
                }
                segments.push(std::mem::take(&mut current));
                started = false;
            }
            other => {
                current.push(other);
                started = true;
            }
        }
    }
    if current.is_empty() {
        return Err(err("empty segment"));
    }
    segments.push(current);
    Ok(segments)
}

/// Joins a namespace path into one URL segment with the unit separator, as the API expects.
pub fn ns_segment(path: &[String]) -> String {
    path.join("\u{1f}")
}

/// A parsed namespace path argument (a newtype, so clap treats it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsPath(pub Vec<String>);

impl NsPath {
    /// The path as one URL segment, joined with the unit separator.
    pub fn segment(&self) -> String {
        ns_segment(&self.0)
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::Value::from(self.0.clone())
    }
}

impl fmt::Display for NsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display(&self.0).fmt(f)
    }
}

/// A clap value parser for namespace path arguments.
pub fn parse_arg(input: &str) -> Result<NsPath, String> {
    parse(input).map(NsPath).map_err(|e| e.to_string())
}

/// Formats segments so that [`parse`] reads them back unchanged.
pub struct Display<'a>(pub &'a [String]);

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            if seg.contains(['.', '"', '\\']) {
                f.write_str("\"")?;
                for c in seg.chars() {
                    if c == '"' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("\"")?;
            } else {
                f.write_str(seg)?;
            }
        }
        Ok(())
    }
}

/// Formats a JSON array of strings (as the API answers paths); anything else is shown raw.
pub fn display_json(v: &serde_json::Value) -> String {
    match v.as_array() {
        Some(items) => {
            let segs: Option<Vec<String>> = items
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect();
            match segs {
                Some(segs) => Display(&segs).to_string(),
                None => v.to_string(),
            }
        }
        None if v.is_null() => String::new(),
        None => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn dots_split_segments() {
        assert_eq!(p("sales"), ["sales"]);
        assert_eq!(p("sales.eu"), ["sales", "eu"]);
    }

    #[test]
    fn quoted_and_escaped_dots_stay_in_the_segment() {
        assert_eq!(p("\"eu.west\".retail"), ["eu.west", "retail"]);
        assert_eq!(p("eu\\.west.retail"), ["eu.west", "retail"]);
        assert_eq!(p("sales.\"eu.west\""), ["sales", "eu.west"]);
        assert_eq!(p("\"a\\\"b\""), ["a\"b"]);
        assert_eq!(p("a\\\\b"), ["a\\b"]);
    }

    #[test]
    fn malformed_paths_are_refused() {
        for bad in [
            "", ".", "a.", ".a", "a..b", "\"a", "a\\", "a\"b\"", "\"a\"b", "\"\"",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn namespaces_join_with_the_unit_separator() {
        assert_eq!(ns_segment(&["a.b".into(), "c/d".into()]), "a.b\u{1f}c/d");
        assert_eq!(NsPath(vec!["x".into(), "y".into()]).segment(), "x\u{1f}y");
    }

    #[test]
    fn display_round_trips() {
        for segs in [
            vec!["a"],
            vec!["eu.west", "retail"],
            vec!["q\"uote", "back\\slash"],
            vec!["caf\u{e9}"],
        ] {
            let segs: Vec<String> = segs.into_iter().map(str::to_owned).collect();
            let shown = Display(&segs).to_string();
            assert_eq!(p(&shown), segs, "{shown}");
        }
        assert_eq!(
            Display(&["eu.west".to_owned(), "x".to_owned()]).to_string(),
            "\"eu.west\".x"
        );
    }
}
