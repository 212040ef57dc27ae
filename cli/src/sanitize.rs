//! Text that came from the server or from upstream catalogs, made safe to print.
//!
//! The one rule both the output formatting and the client's error messages apply, so neither
//! depends on the other for it.

/// Replaces control and bidi-override characters, which could spoof or rewrite terminal output.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn control_and_bidi_characters_are_replaced() {
        assert_eq!(
            clean("a\u{1b}[31mb\u{202e}c\td"),
            "a\u{fffd}[31mb\u{fffd}c\u{fffd}d"
        );
        assert_eq!(clean("caf\u{e9} plain"), "caf\u{e9} plain");
    }
}
