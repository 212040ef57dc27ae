//! Entry points shared by the cargo-fuzz targets (`fuzz/`, nightly) and the proptest
//! "fuzz smoke" tests (`tests/fuzz_smoke.rs`, every CI run). Each takes arbitrary bytes and
//! panics only when the code under test breaks its contract: a panic inside the parser, or a
//! refusal that is not a 4xx. A refusal is the expected outcome for almost every input.

use bytes::Bytes;
use flotilla_domain::names::NamespacePath;

use crate::error::Error;
use crate::http::extract::parse_json;
use crate::service::{accounts, catalogs, integrations, namespaces, overlays, relations};

fn assert_client_error(what: &str, e: &Error) {
    let status = crate::http::error::status_of(e.kind);
    assert!(
        status.is_client_error(),
        "{what}: refused with {status} ({:?}), not a 4xx",
        e.kind
    );
}

fn body<T: serde::de::DeserializeOwned>(what: &str, data: &Bytes) {
    if let Err(e) = parse_json::<T>(data) {
        assert_client_error(what, &e);
    }
}

/// Every create, patch and rotation body the API parses, through the same extractor logic
/// (`JsonBody`: nesting bound, unknown fields, typed deserialization).
pub fn request_bodies(data: &[u8]) {
    let data = Bytes::copy_from_slice(data);
    body::<accounts::CreateAccount>("CreateAccount", &data);
    body::<catalogs::CreateCatalog>("CreateCatalog", &data);
    body::<catalogs::PatchCatalog>("PatchCatalog", &data);
    body::<namespaces::CreateNamespace>("CreateNamespace", &data);
    body::<namespaces::PatchNamespace>("PatchNamespace", &data);
    body::<relations::CreateTable>("CreateTable", &data);
    body::<relations::CreateView>("CreateView", &data);
    body::<relations::PatchRelation>("PatchRelation", &data);
    body::<integrations::CreateIntegration>("CreateIntegration", &data);
    body::<integrations::PatchIntegration>("PatchIntegration", &data);
    body::<integrations::RotateAuthentication>("RotateAuthentication", &data);
    body::<overlays::CreateOverlay>("CreateOverlay", &data);
    body::<overlays::PatchOverlay>("PatchOverlay", &data);
    body::<crate::directory::FinalizeRequest>("FinalizeRequest", &data);
    // The integration fingerprint (secret bytes blanked) must accept anything parse_json did.
    let _ = integrations::fingerprint_body(&data);
}

/// `%1F`-joined namespace segments as they arrive in a URL (already percent-decoded).
/// An accepted path has non-empty segments, none containing the separator, and joins back to
/// the input.
pub fn namespace_segment(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(path) = NamespacePath::from_url_segment(text) {
        let segments = path.segments();
        assert!(!segments.is_empty(), "accepted an empty path from {text:?}");
        for s in segments {
            assert!(
                !s.is_empty() && !s.contains('\u{1f}'),
                "segment {s:?} from {text:?}"
            );
        }
        assert_eq!(
            segments.join("\u{1f}"),
            text,
            "the path does not round-trip"
        );
    }
}

/// API page tokens (`service::decode_page_token`) and upstream-listing page tokens
/// (`access::upstream::check_page_token`): a forged or foreign token is a 400, and an
/// accepted API token resumes inside the listing's prefix.
pub fn page_tokens(data: &[u8]) {
    let token = String::from_utf8_lossy(data);
    match crate::service::decode_page_token("fuzz|ACCT#a|CAT#", "CAT#", &token) {
        Ok(k) => assert!(k.starts_with("CAT#"), "resumes outside the prefix: {k:?}"),
        Err(e) => assert_client_error("decode_page_token", &e),
    }
    if let Err(e) = crate::access::upstream::check_page_token(&token, "fuzz-binding", 2) {
        assert_client_error("upstream page token", &e);
    }
}

/// ParqDB metadata validation: any bytes, never a panic.
pub fn parqdb_metadata(data: &[u8]) {
    let _ = flotilla_parqdb::metadata::validate_bytes(data);
}
