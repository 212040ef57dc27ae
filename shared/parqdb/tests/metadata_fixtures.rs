//! The validator against the fixture sets (see `fixture_sets`) and the format rules.

mod fixture_sets;

use std::path::Path;

use flotilla_parqdb::metadata::{MetadataError, Rule, validate_bytes, validate_successor};
use serde_json::{Value, json};

fn read(rel: &str) -> Vec<u8> {
    fixture_sets::read(&fixture_sets::own(), rel)
}

fn doc(rel: &str) -> Value {
    serde_json::from_slice(&read(rel)).unwrap()
}

fn check(v: &Value) -> Result<flotilla_parqdb::IndexMetadata, MetadataError> {
    validate_bytes(&serde_json::to_vec(v).unwrap())
}

fn rule_of(v: &Value) -> Rule {
    match check(v) {
        Err(e) => e
            .rule()
            .unwrap_or_else(|| panic!("expected INVALID_INDEX_METADATA, got {e}")),
        Ok(_) => panic!("document was accepted: {v}"),
    }
}

#[test]
fn every_valid_fixture_passes() {
    for dir in fixture_sets::all() {
        let files = fixture_sets::json_files(&dir, "valid");
        assert!(
            files.len() >= 3,
            "{}: too few valid fixtures",
            dir.display()
        );
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            validate_bytes(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

/// One invalid document and what it must be refused with.
struct Expectation {
    file: String,
    code: String,
    rule: Option<String>,
}

/// The project's manifest names the code and rule of every invalid document.
fn own_expectations(dir: &Path) -> Vec<Expectation> {
    let manifest: Value =
        serde_json::from_slice(&fixture_sets::read(dir, "invalid/manifest.json")).unwrap();
    manifest
        .as_array()
        .expect("manifest is a list")
        .iter()
        .map(|e| Expectation {
            file: e["file"].as_str().unwrap().to_owned(),
            code: e["code"].as_str().unwrap().to_owned(),
            rule: e["rule"].as_str().map(str::to_owned),
        })
        .collect()
}

/// The conformance set's manifest names each violation in prose only; this table maps its
/// files to the rule the validator reports.
fn conformance_expectations(dir: &Path) -> Vec<Expectation> {
    let table: &[(&str, Option<Rule>)] = &[
        (
            "absolute-index-relation.metadata.json",
            Some(Rule::RelativeLocation),
        ),
        ("unknown-ivf-role.metadata.json", Some(Rule::IvfRoles)),
        ("unsupported-format-version.metadata.json", None),
        (
            "current-snapshot-not-retained.metadata.json",
            Some(Rule::CurrentSnapshotId),
        ),
        (
            "duplicate-source-key-field.metadata.json",
            Some(Rule::SourceKeyFields),
        ),
        ("missing-ivf-role.metadata.json", Some(Rule::IvfRoles)),
        (
            "noncanonical-positive-parameter.metadata.json",
            Some(Rule::IvfPositiveInteger),
        ),
        (
            "unsupported-store-vectors.metadata.json",
            Some(Rule::IvfParameters),
        ),
        (
            "unsupported-flat-encoding.metadata.json",
            Some(Rule::IvfPostingEncoding),
        ),
        (
            "missing-required-field.metadata.json",
            Some(Rule::MissingField),
        ),
        (
            "duplicate-snapshot-id.metadata.json",
            Some(Rule::SnapshotId),
        ),
        (
            "unknown-metadata-field.metadata.json",
            Some(Rule::UnknownField),
        ),
    ];
    let manifest: Value =
        serde_json::from_slice(&fixture_sets::read(dir, "invalid/manifest.json")).unwrap();
    manifest
        .as_array()
        .expect("manifest is a list")
        .iter()
        .map(|e| {
            let file = e["file"].as_str().unwrap();
            let (_, rule) = table.iter().find(|(f, _)| *f == file).unwrap_or_else(|| {
                panic!("conformance manifest names {file}, unknown to this test")
            });
            Expectation {
                file: file.to_owned(),
                code: if rule.is_some() {
                    "INVALID_INDEX_METADATA"
                } else {
                    "UNSUPPORTED_FORMAT_VERSION"
                }
                .to_owned(),
                rule: rule.map(|r| r.as_str().to_owned()),
            }
        })
        .collect()
}

fn check_invalid_set(dir: &Path, expected: &[Expectation]) {
    let on_disk = fixture_sets::json_files(dir, "invalid")
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .count();
    assert_eq!(
        on_disk,
        expected.len(),
        "{}: an invalid fixture is not in the manifest",
        dir.display()
    );
    for e in expected {
        let bytes = fixture_sets::read(dir, &format!("invalid/{}", e.file));
        let err = validate_bytes(&bytes)
            .err()
            .unwrap_or_else(|| panic!("{} was accepted", e.file));
        assert_eq!(err.code(), e.code, "{}: {err}", e.file);
        assert_eq!(
            err.rule().map(Rule::as_str),
            e.rule.as_deref(),
            "{}: {err}",
            e.file
        );
        let prefix = err.rule().map_or("format-version", Rule::as_str);
        assert!(
            err.to_string().starts_with(&format!("{prefix}:")),
            "{}: {err}",
            e.file
        );
        if e.code == "UNSUPPORTED_FORMAT_VERSION" {
            assert_eq!(err, MetadataError::UnsupportedFormatVersion { found: 2 });
        }
    }
}

#[test]
fn every_invalid_fixture_fails_with_the_manifest_rule() {
    let own = fixture_sets::own();
    check_invalid_set(&own, &own_expectations(&own));
    if let Some(dir) = fixture_sets::conformance() {
        check_invalid_set(&dir, &conformance_expectations(&dir));
    }
}

#[test]
fn the_own_set_covers_every_rule_a_document_can_break() {
    // Size is checked in code (a 16 MiB file does not belong in the repository); Successor
    // and Identity-on-commit by the successor pairs; MetadataLocation concerns the location,
    // not the document, and is covered by the catalog tests.
    let own = fixture_sets::own();
    let covered: std::collections::BTreeSet<String> = own_expectations(&own)
        .into_iter()
        .filter_map(|e| e.rule)
        .collect();
    for rule in [
        Rule::Json,
        Rule::DuplicateKey,
        Rule::UnknownField,
        Rule::MissingField,
        Rule::Type,
        Rule::IntRange,
        Rule::Uuid,
        Rule::SnapshotId,
        Rule::SequenceNumber,
        Rule::EmptyString,
        Rule::SourceKeyFields,
        Rule::IndexedRows,
        Rule::IndexSchemaVersion,
        Rule::SnapshotLog,
        Rule::CurrentSnapshotId,
        Rule::LastUpdatedMs,
        Rule::Identity,
        Rule::RelativeLocation,
        Rule::IvfSchemaVersion,
        Rule::IvfMetric,
        Rule::IvfParameters,
        Rule::IvfPositiveInteger,
        Rule::IvfPostingEncoding,
        Rule::IvfNlist,
        Rule::IvfNtotal,
        Rule::IvfRoles,
    ] {
        assert!(
            covered.contains(rule.as_str()),
            "no invalid fixture for rule {}",
            rule.as_str()
        );
    }
}

#[test]
fn every_successor_pair_has_its_manifest_outcome() {
    let own = fixture_sets::own();
    let manifest: Value =
        serde_json::from_slice(&fixture_sets::read(&own, "successors/manifest.json")).unwrap();
    let pairs = manifest.as_array().unwrap();
    assert!(pairs.len() >= 8);
    let mut rejected = std::collections::BTreeSet::new();
    for p in pairs {
        let name = p["name"].as_str().unwrap();
        let load = |k: &str| {
            let rel = format!("successors/{}", p[k].as_str().unwrap());
            validate_bytes(&fixture_sets::read(&own, &rel))
                .unwrap_or_else(|e| panic!("{name}: {k} invalid on its own: {e}"))
        };
        let outcome = validate_successor(&load("base"), &load("new"));
        match (p["code"].as_str().unwrap(), outcome) {
            ("OK", Ok(())) => {}
            ("OK", Err(e)) => panic!("{name}: refused: {e}"),
            (code, Ok(())) => panic!("{name}: accepted, expected {code}"),
            (code, Err(e)) => {
                assert_eq!(e.code(), code, "{name}: {e}");
                assert_eq!(
                    e.rule().map(Rule::as_str),
                    p["rule"].as_str(),
                    "{name}: {e}"
                );
                rejected.insert(code.to_owned());
            }
        }
    }
    assert!(
        rejected.contains("INDEX_UUID_MISMATCH") && rejected.contains("INVALID_INDEX_METADATA")
    );
}

#[test]
fn fixture_next_is_a_valid_successor_of_base() {
    for dir in fixture_sets::all() {
        let load = |rel: &str| validate_bytes(&fixture_sets::read(&dir, rel)).unwrap();
        let base = load("valid/metadata.json");
        let next = load("valid/metadata-next.json");
        validate_successor(&base, &next).unwrap();
        // Going back drops a snapshot log entry and decreases sequence numbers.
        assert!(validate_successor(&next, &base).is_err());
        // Committing a document of another index.
        let other = load("valid/lvq4/metadata.json");
        let e = validate_successor(&base, &other).unwrap_err();
        assert_eq!(e.code(), "INDEX_UUID_MISMATCH");
    }
}

#[test]
fn duplicate_keys_are_detected_in_every_object() {
    let text = String::from_utf8(read("valid/metadata.json")).unwrap();
    let cases = [
        text.replacen(
            "\"format-version\": 1,",
            "\"format-version\": 1, \"format-version\": 1,",
            1,
        ),
        text.replacen(
            "\"metric\": \"l2_squared\",",
            "\"metric\": \"l2_squared\", \"metric\": \"cosine\",",
            1,
        ),
        text.replacen(
            "\"nlist\": \"2\",",
            "\"nlist\": \"2\", \"nlist\": \"2\",",
            1,
        ),
        text.replacen(
            "\"snapshot-id\": 4101,\n      \"timestamp-ms\"",
            "\"snapshot-id\": 4101, \"snapshot-id\": 4101,\n      \"timestamp-ms\"",
            1,
        ),
        text.replacen(
            "\"owner\": \"search-team\"",
            "\"owner\": \"a\", \"owner\": \"b\"",
            1,
        ),
    ];
    for (i, case) in cases.iter().enumerate() {
        assert_ne!(case, &text, "case {i} did not change the document");
        let e = validate_bytes(case.as_bytes()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::DuplicateKey), "case {i}: {e}");
    }
}

fn base() -> Value {
    doc("valid/metadata.json")
}

#[test]
fn types_ranges_and_uuids_are_strict() {
    let mut v = base();
    v["format-version"] = json!(1.0);
    assert_eq!(rule_of(&v), Rule::Type);
    let mut v = base();
    v["format-version"] = json!(4294967297u64);
    assert_eq!(rule_of(&v), Rule::IntRange);
    let mut v = base();
    v.as_object_mut().unwrap().remove("format-version");
    assert_eq!(rule_of(&v), Rule::MissingField);
    let mut v = base();
    v["last-updated-ms"] = json!(u64::MAX);
    assert_eq!(rule_of(&v), Rule::IntRange);
    let mut v = base();
    v["snapshots"][0]["index-schema-version"] = json!(2147483648i64);
    assert_eq!(rule_of(&v), Rule::IntRange);
    let mut v = base();
    v["last-sequence-number"] = json!("1");
    assert_eq!(rule_of(&v), Rule::Type);
    let mut v = base();
    v["index-uuid"] = json!("2F1C7F5E-3C43-4A44-8F2A-CF560C4DB8D1");
    assert_eq!(rule_of(&v), Rule::Uuid);
    let mut v = base();
    v["index-uuid"] = json!("00000000-0000-0000-0000-000000000000");
    assert_eq!(rule_of(&v), Rule::Uuid);
    let mut v = base();
    v["index-uuid"] = json!("2f1c7f5e3c434a448f2acf560c4db8d1");
    assert_eq!(rule_of(&v), Rule::Uuid);
    let mut v = base();
    v["snapshots"][0]["parameters"]["ivf_centroids_uuid"] = json!("not-a-uuid");
    assert_eq!(rule_of(&v), Rule::Uuid);
    let mut v = base();
    v["properties"] = json!({"a": 1});
    assert_eq!(rule_of(&v), Rule::Type);
    let mut v = base();
    v["snapshots"][0]["summary"] = json!({"a": null});
    assert_eq!(rule_of(&v), Rule::Type);
    let mut v = base();
    v["snapshots"][0]["extra"] = json!(1);
    assert_eq!(rule_of(&v), Rule::UnknownField);
    let mut v = base();
    v["snapshot-log"][0]["extra"] = json!(1);
    assert_eq!(rule_of(&v), Rule::UnknownField);
    // properties is optional
    let mut v = base();
    v.as_object_mut().unwrap().remove("properties");
    check(&v).unwrap();
    assert_eq!(validate_bytes(b"[]").unwrap_err().rule(), Some(Rule::Type));
    assert_eq!(validate_bytes(b"{").unwrap_err().rule(), Some(Rule::Json));
    assert_eq!(
        validate_bytes(b"\xff").unwrap_err().rule(),
        Some(Rule::Json)
    );
    let big = vec![b' '; flotilla_parqdb::metadata::MAX_METADATA_BYTES + 1];
    assert_eq!(validate_bytes(&big).unwrap_err().rule(), Some(Rule::Size));
}

#[test]
fn snapshot_and_log_invariants() {
    let mut v = base();
    v["snapshot-log"] = json!([]);
    let e = check(&v).unwrap_err();
    assert_eq!(
        e.to_string(),
        "snapshot-log: last entry must name current-snapshot-id"
    );
    let mut v = doc("valid/metadata-next.json");
    v["current-snapshot-id"] = json!(4101);
    assert_eq!(rule_of(&v), Rule::SnapshotLog);
    let mut v = doc("valid/metadata-next.json");
    v["snapshot-log"][1]["timestamp-ms"] = json!(1759999999999i64);
    assert_eq!(rule_of(&v), Rule::SnapshotLog);
    let mut v = base();
    v["snapshot-log"] = json!([{"snapshot-id": 5, "timestamp-ms": 1}, {"snapshot-id": 4101, "timestamp-ms": 1760000000000i64}]);
    assert_eq!(rule_of(&v), Rule::SnapshotLog);
    let mut v = base();
    v["last-updated-ms"] = json!(1759999999999i64);
    assert_eq!(rule_of(&v), Rule::LastUpdatedMs);
    let mut v = base();
    v["last-sequence-number"] = json!(0);
    assert_eq!(rule_of(&v), Rule::SequenceNumber);
    let mut v = base();
    v["snapshots"][0]["snapshot-id"] = json!(0);
    assert_eq!(rule_of(&v), Rule::SnapshotId);
    let mut v = doc("valid/metadata-next.json");
    v["snapshots"][1]["sequence-number"] = json!(1);
    assert_eq!(rule_of(&v), Rule::SequenceNumber);
    let mut v = base();
    v["snapshots"][0]["indexed-rows"] = json!(0);
    assert_eq!(rule_of(&v), Rule::IndexedRows);
    let mut v = base();
    v["snapshots"][0]["source-key-fields"] = json!([]);
    assert_eq!(rule_of(&v), Rule::SourceKeyFields);
    let mut v = doc("valid/metadata-next.json");
    v["snapshots"][1]["vector-field"] = json!("other");
    assert_eq!(rule_of(&v), Rule::Identity);
    let mut v = doc("valid/metadata-next.json");
    v["snapshots"][1]["source-key-fields"] = json!(["tenant"]);
    assert_eq!(rule_of(&v), Rule::Identity);
    let mut v = base();
    v["snapshots"] = json!([]);
    assert_eq!(rule_of(&v), Rule::CurrentSnapshotId);
}

#[test]
fn ivf_family_rules() {
    let set = |f: &dyn Fn(&mut Value)| {
        let mut v = base();
        f(&mut v["snapshots"][0]);
        rule_of(&v)
    };
    assert_eq!(set(&|s| s["metric"] = json!("dot")), Rule::IvfMetric);
    let mut v = base();
    v["snapshots"][0]["metric"] = json!("cosine");
    check(&v).unwrap();
    assert_eq!(
        set(&|s| s["index-schema-version"] = json!(2)),
        Rule::IvfSchemaVersion
    );
    assert_eq!(
        set(&|s| s["parameters"]["ntotal"] = json!("+3")),
        Rule::IvfPositiveInteger
    );
    assert_eq!(
        set(&|s| s["parameters"]["dimension"] = json!("0")),
        Rule::IvfPositiveInteger
    );
    assert_eq!(
        set(&|s| s["parameters"]["dimension"] = json!("2147483648")),
        Rule::IvfPositiveInteger
    );
    assert_eq!(
        set(&|s| s["parameters"]["nlist"] = json!("")),
        Rule::IvfPositiveInteger
    );
    assert_eq!(
        set(&|s| s["parameters"]["nlist"] = json!("2.0")),
        Rule::IvfPositiveInteger
    );
    assert_eq!(
        set(&|s| s["parameters"]["nlist"] = json!("6")),
        Rule::IvfNlist
    );
    assert_eq!(set(&|s| s["indexed-rows"] = json!(4)), Rule::IvfNtotal);
    assert_eq!(
        set(&|s| {
            s["parameters"]
                .as_object_mut()
                .unwrap()
                .remove("ivf_centroids_uuid");
        }),
        Rule::IvfParameters
    );
    assert_eq!(
        set(&|s| s["parameters"]["ivf_centroids_metadata_location"] = json!("../x.json")),
        Rule::RelativeLocation
    );
    assert_eq!(
        set(&|s| s["index-relations"]["ivf_postings"] = json!("a\\b")),
        Rule::RelativeLocation
    );
    // dimension and nlist may be as large as 2^31-1, ntotal as large as a long.
    let mut v = base();
    let s = &mut v["snapshots"][0];
    s["parameters"]["dimension"] = json!("2147483647");
    s["parameters"]["ntotal"] = json!("9223372036854775807");
    s["indexed-rows"] = json!(i64::MAX);
    check(&v).unwrap();
}

#[test]
fn other_families_get_the_generic_rules_only() {
    let mut v = base();
    let s = &mut v["snapshots"][0];
    s["index-family"] = json!("hnsw");
    s["index-schema-version"] = json!(3);
    s["metric"] = json!("inner_product");
    s["parameters"] = json!({"m": "16", "anything": "goes"});
    s["index-relations"] = json!({"graph": "hnsw/graph.parquet", "vectors": "hnsw/vectors/"});
    check(&v).unwrap();
    // ...but generic rules still apply.
    v["snapshots"][0]["index-relations"]["graph"] = json!("/abs/graph.parquet");
    assert_eq!(rule_of(&v), Rule::RelativeLocation);
    // A family name is case-sensitive: "IVF" is not "ivf".
    let mut v = base();
    v["snapshots"][0]["index-family"] = json!("IVF");
    v["snapshots"][0]["parameters"]["store_vectors"] = json!("true");
    check(&v).unwrap();
}

fn successor_err(base: &Value, new: &Value) -> MetadataError {
    let b = check(base).unwrap();
    let n = check(new).unwrap_or_else(|e| panic!("new document invalid on its own: {e}"));
    validate_successor(&b, &n).unwrap_err()
}

#[test]
fn successor_rules() {
    let b = base();
    let next = doc("valid/metadata-next.json");
    // Retained snapshot changed.
    let mut n = next.clone();
    n["snapshots"][0]["summary"] = json!({"operation": "changed"});
    assert_eq!(successor_err(&b, &n).rule(), Some(Rule::Successor));
    // Added snapshot with the wrong sequence number.
    let mut n = next.clone();
    n["snapshots"][1]["sequence-number"] = json!(3);
    n["last-sequence-number"] = json!(3);
    assert_eq!(successor_err(&b, &n).rule(), Some(Rule::Successor));
    // last-updated-ms decreases.
    let mut b2 = b.clone();
    b2["last-updated-ms"] = json!(1760000000005i64);
    assert_eq!(successor_err(&b2, &next).rule(), Some(Rule::Successor));
    // Identity change (metric).
    let mut n = b.clone();
    n["snapshots"][0]["metric"] = json!("cosine");
    assert_eq!(successor_err(&b, &n).rule(), Some(Rule::Identity));
    // Rollback: from next back to 4101 without adding a snapshot is allowed.
    let mut rollback = next.clone();
    rollback["current-snapshot-id"] = json!(4101);
    rollback["last-updated-ms"] = json!(1760000000002i64);
    rollback["snapshot-log"]
        .as_array_mut()
        .unwrap()
        .push(json!({"snapshot-id": 4101, "timestamp-ms": 1760000000002i64}));
    validate_successor(&check(&next).unwrap(), &check(&rollback).unwrap()).unwrap();
    // Appending two entries is refused.
    let mut two = rollback.clone();
    two["snapshot-log"]
        .as_array_mut()
        .unwrap()
        .push(json!({"snapshot-id": 4101, "timestamp-ms": 1760000000002i64}));
    assert_eq!(successor_err(&next, &two).rule(), Some(Rule::SnapshotLog));
    // Expiring 4101 while keeping the log consistent is allowed.
    let mut expired = next.clone();
    expired["snapshots"].as_array_mut().unwrap().remove(0);
    expired["snapshot-log"].as_array_mut().unwrap().remove(0);
    validate_successor(&check(&next).unwrap(), &check(&expired).unwrap()).unwrap();
    // Reusing an id: expire 4101 and add a different snapshot 4101.
    let mut reuse = b.clone();
    reuse["snapshots"][0]["sequence-number"] = json!(2);
    reuse["last-sequence-number"] = json!(2);
    assert_eq!(successor_err(&b, &reuse).rule(), Some(Rule::Successor));
    // Nothing changed at all is a valid (if pointless) successor.
    validate_successor(&check(&b).unwrap(), &check(&b).unwrap()).unwrap();
}
