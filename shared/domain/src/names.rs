//! Identifier rules shared by every resource.
//!
//! Names compare as exact Unicode code point sequences: no case folding, no normalization
//! (NFC and NFD spellings are different names). What is refused is what cannot be shown or
//! stored unambiguously: empty segments, control characters (which also keeps the storage
//! separators `0x1E`/`0x1F` out of names), bidirectional controls that make a name display
//! as another, and invisible format characters (zero-width space, joiners, word joiner,
//! byte order mark, ...) that make two names that look the same differ.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest name segment, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;
/// Deepest namespace path.
pub const MAX_NAMESPACE_DEPTH: usize = 16;
/// The separator of a multi-level namespace in a URL path segment (Iceberg REST's `%1F`).
pub const NAMESPACE_URL_SEPARATOR: char = '\u{1F}';

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub String);

/// Checks one name segment (a namespace level, a table, view, catalog or index name).
pub fn validate_segment(what: &str, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError(format!("{what} must not be empty")));
    }
    if name.len() > MAX_SEGMENT_BYTES {
        return Err(NameError(format!(
            "{what} is longer than {MAX_SEGMENT_BYTES} bytes"
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(NameError(format!(
            "{what} contains the control character U+{:04X}",
            c as u32
        )));
    }
    if let Some(c) = name.chars().find(|c| is_bidi_control(*c)) {
        return Err(NameError(format!(
            "{what} contains the bidirectional formatting character U+{:04X}",
            c as u32
        )));
    }
    if let Some(c) = name.chars().find(|c| is_invisible_format(*c)) {
        return Err(NameError(format!(
            "{what} contains the invisible formatting character U+{:04X}",
            c as u32
        )));
    }
    Ok(())
}

/// Format characters that render as nothing: zero-width space, non-joiner and joiner
/// (U+200B..U+200D), word joiner and the invisible operators (U+2060..U+2064), the
/// deprecated format controls (U+206A..U+206F), the byte order mark / zero-width no-break
/// space (U+FEFF), the soft hyphen (U+00AD), the Mongolian vowel separator (U+180E),
/// interlinear annotation controls (U+FFF9..U+FFFB) and the tag characters
/// (U+E0000..U+E007F).
pub fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}'
        | '\u{180E}'
        | '\u{200B}'..='\u{200D}'
        | '\u{2060}'..='\u{2064}'
        | '\u{206A}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{E0000}'..='\u{E007F}')
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// A display name of a resource (catalog, integration, overlay): one segment.
pub fn validate_display_name(name: &str) -> Result<(), NameError> {
    validate_segment("display_name", name)
}

/// A namespace path: ordered segments from root to leaf.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NamespacePath(Vec<String>);

impl NamespacePath {
    pub fn new(segments: Vec<String>) -> Result<Self, NameError> {
        if segments.is_empty() {
            return Err(NameError(
                "a namespace path needs at least one segment".into(),
            ));
        }
        if segments.len() > MAX_NAMESPACE_DEPTH {
            return Err(NameError(format!(
                "a namespace path has at most {MAX_NAMESPACE_DEPTH} levels"
            )));
        }
        for s in &segments {
            validate_segment("namespace segment", s)?;
        }
        Ok(Self(segments))
    }

    /// Decodes a URL path segment in which levels are joined by `0x1F`. Axum has already
    /// percent-decoded it.
    pub fn from_url_segment(segment: &str) -> Result<Self, NameError> {
        Self::new(
            segment
                .split(NAMESPACE_URL_SEPARATOR)
                .map(str::to_owned)
                .collect(),
        )
    }

    pub fn to_url_segment(&self) -> String {
        self.0.join(&NAMESPACE_URL_SEPARATOR.to_string())
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    pub fn depth(&self) -> usize {
        self.0.len()
    }

    pub fn parent(&self) -> Option<NamespacePath> {
        if self.0.len() <= 1 {
            None
        } else {
            Some(Self(self.0[..self.0.len() - 1].to_vec()))
        }
    }

    pub fn child(&self, segment: &str) -> Result<NamespacePath, NameError> {
        let mut s = self.0.clone();
        s.push(segment.to_owned());
        Self::new(s)
    }

    /// True when `self` is `other` or one of its ancestors.
    pub fn is_prefix_of(&self, other: &NamespacePath) -> bool {
        other.0.len() >= self.0.len() && other.0[..self.0.len()] == self.0[..]
    }
}

impl fmt::Debug for NamespacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for NamespacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // For messages only: quoted segments so that dots inside names stay unambiguous.
        let parts: Vec<String> = self.0.iter().map(|s| format!("{s:?}")).collect();
        write!(f, "{}", parts.join("."))
    }
}

/// Caller-chosen account ids: `[a-z0-9-]{1,63}`.
pub fn validate_account_id(id: &str) -> Result<(), NameError> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(NameError("account id must match [a-z0-9-]{1,63}".into()))
    }
}

/// Server-generated ids: time-ordered UUIDv7 in simple hex form, so that id-ordered
/// listings follow creation order.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// Ids arriving in URLs are checked for shape before they reach a storage key.
pub fn validate_resource_id(id: &str) -> Result<(), NameError> {
    if !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(())
    } else {
        Err(NameError("malformed resource id".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfc_and_nfd_are_distinct_valid_names() {
        let nfc = "caf\u{e9}";
        let nfd = "cafe\u{301}";
        assert!(validate_segment("n", nfc).is_ok());
        assert!(validate_segment("n", nfd).is_ok());
        assert_ne!(nfc, nfd);
    }

    #[test]
    fn control_and_bidi_characters_are_refused() {
        assert!(validate_segment("n", "a\u{1F}b").is_err());
        assert!(validate_segment("n", "a\nb").is_err());
        assert!(validate_segment("n", "abc\u{202E}fdp").is_err());
        assert!(validate_segment("n", "").is_err());
        assert!(validate_segment("n", &"x".repeat(256)).is_err());
        assert!(validate_segment("n", &"x".repeat(255)).is_ok());
    }

    #[test]
    fn invisible_format_characters_are_refused() {
        for c in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{2060}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{2066}',
            '\u{202E}',
            '\u{200E}',
            '\u{E0041}',
        ] {
            let name = format!("admin{c}");
            let e = validate_segment("n", &name).unwrap_err();
            assert!(e.0.contains(&format!("U+{:04X}", c as u32)), "{e}");
            assert!(validate_display_name(&name).is_err());
            assert!(NamespacePath::new(vec![name.clone()]).is_err());
        }
        // Visible non-ASCII letters stay allowed.
        assert!(validate_segment("n", "Zürich-東京").is_ok());
    }

    #[test]
    fn url_segment_round_trips_and_refuses_empty_levels() {
        let p = NamespacePath::from_url_segment("a\u{1F}b.c").unwrap();
        assert_eq!(p.segments(), ["a", "b.c"]);
        assert_eq!(p.to_url_segment(), "a\u{1F}b.c");
        assert!(NamespacePath::from_url_segment("a\u{1F}\u{1F}b").is_err());
        assert!(NamespacePath::from_url_segment("").is_err());
    }

    #[test]
    fn prefix_respects_segment_boundaries() {
        let ab = NamespacePath::new(vec!["a".into(), "b".into()]).unwrap();
        let abc = NamespacePath::new(vec!["a".into(), "bc".into()]).unwrap();
        let a = NamespacePath::new(vec!["a".into()]).unwrap();
        assert!(a.is_prefix_of(&ab));
        assert!(!ab.is_prefix_of(&abc));
    }

    #[test]
    fn account_ids() {
        assert!(validate_account_id("acme-1").is_ok());
        assert!(validate_account_id("Acme").is_err());
        assert!(validate_account_id(&"a".repeat(64)).is_err());
    }
}
