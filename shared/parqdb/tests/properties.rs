//! Property tests: location syntax and a validator that never panics.

use flotilla_parqdb::location::{Warehouse, validate_relative};
use flotilla_parqdb::metadata::validate_bytes;
use proptest::prelude::*;

/// A segment that is valid on its own: no separators, no reserved characters, not `.`/`..`.
fn segment() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.\\-éж]{1,12}".prop_filter("dot segments", |s| s != "." && s != "..")
}

proptest! {
    #[test]
    fn joined_valid_segments_are_valid(segs in prop::collection::vec(segment(), 1..6), dir in any::<bool>()) {
        let mut loc = segs.join("/");
        if dir { loc.push('/'); }
        prop_assert_eq!(validate_relative(&loc), Ok(()));
    }

    #[test]
    fn any_forbidden_feature_is_refused(
        segs in prop::collection::vec(segment(), 1..6),
        at in 0usize..6,
        bad in prop::sample::select(vec!["", ".", "..", "a\\b", "a?b", "a#b"]),
    ) {
        let mut segs = segs;
        // A trailing empty segment is the legal directory marker, so an empty one goes
        // before the last segment.
        let at = if bad.is_empty() { at.min(segs.len() - 1) } else { at.min(segs.len()) };
        segs.insert(at, bad.to_string());
        let loc = segs.join("/");
        prop_assert!(validate_relative(&loc).is_err(), "{}", loc);
    }

    #[test]
    fn absolute_and_scheme_locations_are_refused(
        segs in prop::collection::vec(segment(), 1..4),
        scheme in "[a-z][a-z0-9+.\\-]{0,6}",
    ) {
        let rest = segs.join("/");
        let leading_slash = format!("/{rest}");
        prop_assert!(validate_relative(&leading_slash).is_err());
        let with_scheme = format!("{scheme}://{rest}");
        prop_assert!(validate_relative(&with_scheme).is_err());
        let opaque = format!("{scheme}:{rest}");
        prop_assert!(validate_relative(&opaque).is_err());
    }

    #[test]
    fn inside_the_warehouse_means_prefix_plus_valid_file(
        segs in prop::collection::vec(segment(), 1..4),
        other in "[a-z]{1,8}",
    ) {
        let wh = Warehouse::parse("s3://bucket-a/wh/").unwrap();
        let rel = segs.join("/");
        let inside = wh.resolve(&rel);
        prop_assert_eq!(wh.relative_of(&inside), Ok(rel.clone()));
        let sibling = format!("s3://bucket-a/wh{other}/{rel}");
        prop_assert!(wh.relative_of(&sibling).is_err());
        let escaped = format!("s3://bucket-a/wh/../{rel}");
        prop_assert!(wh.relative_of(&escaped).is_err());
        let other_bucket = format!("s3://bucket-b/wh/{rel}");
        prop_assert!(wh.relative_of(&other_bucket).is_err());
    }

    #[test]
    fn validate_bytes_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = validate_bytes(&bytes);
    }

    #[test]
    fn validate_bytes_never_panics_on_mutated_documents(
        cut in 0usize..2000,
        pos in 0usize..2000,
        byte in any::<u8>(),
    ) {
        let doc = include_bytes!("../fixtures/v1/valid/metadata-next.json");
        let mut v = doc.to_vec();
        let pos = pos % v.len();
        v[pos] = byte;
        v.truncate(cut.max(1).min(v.len()));
        let _ = validate_bytes(&v);
    }
}
