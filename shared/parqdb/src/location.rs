//! Location syntax: warehouse-relative locations inside metadata, the warehouse URI of an
//! index catalog, and absolute metadata locations that must lie inside that warehouse.
//!
//! Every location names exactly one object (or, with a trailing `/`, one directory) on every
//! backend, so nothing here percent-decodes or normalises: a location either is already in
//! the one accepted spelling or it is refused. That is what lets the garbage collector compare
//! listed object keys with referenced locations as plain strings.

use std::fmt;

/// Why a location was refused; the text names the broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationError(pub String);

impl fmt::Display for LocationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err(msg: impl Into<String>) -> LocationError {
    LocationError(msg.into())
}

/// Checks a warehouse-relative location (`docs/parqdb.md`, "Locations").
///
/// Refused: empty; a leading `/`; any `:` in the first segment (this covers every URI
/// scheme, `s3:` and `file:` included, and the relative references RFC 3986 forbids for the
/// same reason); a `\`; a `?` or `#`; an empty, `.` or `..` segment. A single trailing `/`
/// marks a directory and is the only place an empty segment may appear.
pub fn validate_relative(location: &str) -> Result<(), LocationError> {
    if location.is_empty() {
        return Err(err("a warehouse-relative location must not be empty"));
    }
    if location.starts_with('/') {
        return Err(err("a warehouse-relative location must not start with '/'"));
    }
    if location.contains('\\') {
        return Err(err(
            "a warehouse-relative location uses '/' separators, never '\\'",
        ));
    }
    if location.contains('?') || location.contains('#') {
        return Err(err(
            "a warehouse-relative location must not contain '?' or '#'",
        ));
    }
    let body = location.strip_suffix('/').unwrap_or(location);
    let mut segments = body.split('/');
    if segments.next().is_some_and(|first| first.contains(':')) {
        return Err(err(
            "a warehouse-relative location must not carry a scheme (':' in its first segment)",
        ));
    }
    for segment in body.split('/') {
        match segment {
            "" => {
                return Err(err(
                    "a warehouse-relative location must not contain an empty segment",
                ));
            }
            "." | ".." => {
                return Err(err(
                    "a warehouse-relative location must not contain a '.' or '..' segment",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Characters refused anywhere in a warehouse URI or in the part of a metadata location
/// below the warehouse: escapes and reserved delimiters would give one object two spellings.
fn has_refused_char(s: &str) -> Option<char> {
    s.chars()
        .find(|c| matches!(c, '%' | '?' | '#' | '\\' | ' ') || c.is_control())
}

/// Which store a warehouse lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarehouseKind {
    /// `s3://bucket/prefix/`: `prefix` has no leading `/` and is empty or ends with `/`.
    S3 { bucket: String, prefix: String },
    /// `file:///path/`: `root` is absolute and ends with `/`.
    File { root: String },
}

/// The single warehouse of an index catalog, in its canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warehouse {
    uri: String,
    kind: WarehouseKind,
}

/// S3 bucket names: 3-63 lowercase letters, digits, `.` and `-`, starting and ending with a
/// letter or digit.
fn valid_bucket(bucket: &str) -> bool {
    let bytes = bucket.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-')
        && bytes.first().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// Checks the directory part of a warehouse URI: `path` is either empty or a sequence of
/// non-empty segments each followed by `/`.
fn valid_directory_path(path: &str) -> Result<(), LocationError> {
    if path.is_empty() {
        return Ok(());
    }
    let Some(body) = path.strip_suffix('/') else {
        return Err(err("a warehouse URI must end with '/'"));
    };
    for segment in body.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(err(
                "a warehouse URI must not contain an empty, '.' or '..' segment",
            ));
        }
    }
    Ok(())
}

impl Warehouse {
    /// Parses `s3://bucket/prefix/` (the prefix may be empty: `s3://bucket/`) or
    /// `file:///absolute/path/`. Schemes are lowercase; the URI ends with `/`; no escapes,
    /// query, fragment, user info or port.
    pub fn parse(uri: &str) -> Result<Self, LocationError> {
        if let Some(c) = has_refused_char(uri) {
            return Err(err(format!("a warehouse URI must not contain {c:?}")));
        }
        if let Some(rest) = uri.strip_prefix("s3://") {
            let Some((bucket, prefix)) = rest.split_once('/') else {
                return Err(err("an s3 warehouse URI must be s3://bucket/prefix/"));
            };
            if !valid_bucket(bucket) {
                return Err(err(
                    "the warehouse bucket name is not a valid S3 bucket name",
                ));
            }
            valid_directory_path(prefix)?;
            return Ok(Self {
                uri: uri.to_owned(),
                kind: WarehouseKind::S3 {
                    bucket: bucket.to_owned(),
                    prefix: prefix.to_owned(),
                },
            });
        }
        if let Some(rest) = uri.strip_prefix("file://") {
            let Some(path) = rest.strip_prefix('/') else {
                return Err(err(
                    "a file warehouse URI must be file:///absolute/path/ (no host)",
                ));
            };
            if path.is_empty() {
                return Err(err("a file warehouse must not be the filesystem root"));
            }
            valid_directory_path(path)?;
            return Ok(Self {
                uri: uri.to_owned(),
                kind: WarehouseKind::File {
                    root: format!("/{path}"),
                },
            });
        }
        Err(err("a warehouse URI must start with s3:// or file://"))
    }

    pub fn as_str(&self) -> &str {
        &self.uri
    }

    pub fn kind(&self) -> &WarehouseKind {
        &self.kind
    }

    /// The object key of an absolute metadata location relative to the warehouse root, or why
    /// the location is not a file inside this warehouse.
    pub fn relative_of(&self, location: &str) -> Result<String, LocationError> {
        let Some(rest) = location.strip_prefix(self.uri.as_str()) else {
            return Err(err(format!(
                "metadata location must lie inside the catalog's warehouse {}",
                self.uri
            )));
        };
        if rest.is_empty() || rest.ends_with('/') {
            return Err(err("metadata location must name a file, not a directory"));
        }
        if let Some(c) = has_refused_char(rest) {
            return Err(err(format!("metadata location must not contain {c:?}")));
        }
        validate_relative(rest)?;
        Ok(rest.to_owned())
    }

    /// The absolute URI of a warehouse-relative location.
    pub fn resolve(&self, relative: &str) -> String {
        format!("{}{relative}", self.uri)
    }

    /// Whether `other`'s objects can be addressed through this warehouse (one contains the
    /// other as a URI prefix). Collection of either must consider both catalogs' references.
    pub fn overlaps(&self, other: &Warehouse) -> bool {
        self.uri.starts_with(&other.uri) || other.uri.starts_with(&self.uri)
    }
}

impl fmt::Display for Warehouse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_locations_follow_format_rules() {
        for ok in ["a", "a/b.parquet", "ivf_postings/", "a/b/", "a/b:c", "ü/ж"] {
            assert_eq!(validate_relative(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "/", "/a", "s3://b/k", "file:/x", "s3:x", "a\\b", "a?b", "a#b", "a//b", "./a",
            "a/../b", "a/.", "..", "a//", "c:/x",
        ] {
            assert!(validate_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn warehouses_are_canonical() {
        assert!(Warehouse::parse("s3://bucket/prefix/").is_ok());
        assert!(Warehouse::parse("s3://bucket/").is_ok());
        assert!(Warehouse::parse("s3://bucket/a/b/").is_ok());
        assert!(Warehouse::parse("file:///tmp/wh/").is_ok());
        for bad in [
            "s3://bucket/prefix",
            "s3://bucket",
            "S3://bucket/p/",
            "s3://Bucket/p/",
            "s3://bucket/a//",
            "s3://bucket/a/../",
            "s3://bucket/a%20b/",
            "s3://bucket/p/?x",
            "file://host/tmp/",
            "file:///",
            "file:///tmp/wh",
            "gs://bucket/p/",
            "",
        ] {
            assert!(Warehouse::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_locations_must_be_files_inside_the_warehouse() {
        let wh = Warehouse::parse("s3://bucket/wh/").unwrap();
        assert_eq!(
            wh.relative_of("s3://bucket/wh/m/v1.json").unwrap(),
            "m/v1.json"
        );
        for bad in [
            "s3://bucket/wh2/v1.json",
            "s3://bucket/other/v1.json",
            "s3://other/wh/v1.json",
            "s3://bucket/wh/",
            "s3://bucket/wh/m/",
            "s3://bucket/wh/../x.json",
            "s3://bucket/wh/a//x.json",
            "s3://bucket/wh/%2e%2e/x.json",
            "file:///bucket/wh/x.json",
        ] {
            assert!(wh.relative_of(bad).is_err(), "{bad}");
        }
    }
}
