//! Conformance of the validator with `shared/parqdb/fixtures/v1` and the FORMAT.md rules.

use std::path::PathBuf;

use flotilla_parqdb::metadata::{MetadataError, Rule, validate_bytes, validate_successor};
use serde_json::{Value, json};

/// The fixtures live in the brief's `shared/parqdb`, laid out beside the clone in CI.
fn fixtures() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/parqdb/fixtures/v1"
    ));
    assert!(
        dir.join("catalog.json").is_file(),
        "ParqDB fixtures not found at {}: shared/ must be laid out beside the repository clone",
        dir.display()
    );
    dir
}

fn read(rel: &str) -> Vec<u8> {
    let path = fixtures().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()))
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
    let mut count = 0;
    for rel in [
        "valid/metadata.json",
        "valid/metadata-next.json",
        "valid/composite/metadata.json",
        "valid/lvq4/metadata.json",
        "valid/lvq8/metadata.json",
    ] {
        validate_bytes(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        count += 1;
    }
    // Every document under valid/ is covered by the list above.
    let mut found = 0;
    let mut stack = vec![fixtures().join("valid")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                found += 1;
            }
        }
    }
    assert_eq!(found, count, "a valid fixture is not covered");
}

#[test]
fn every_invalid_fixture_fails_with_the_manifest_rule() {
    // file -> (expected code, expected rule); the manifest names the violation in prose.
    let expected: &[(&str, &str, Option<Rule>)] = &[
        (
            "absolute-index-relation.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::RelativeLocation),
        ),
        (
            "unknown-ivf-role.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::IvfRoles),
        ),
        (
            "unsupported-format-version.metadata.json",
            "UNSUPPORTED_FORMAT_VERSION",
            None,
        ),
        (
            "current-snapshot-not-retained.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::CurrentSnapshotId),
        ),
        (
            "duplicate-source-key-field.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::SourceKeyFields),
        ),
        (
            "missing-ivf-role.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::IvfRoles),
        ),
        (
            "noncanonical-positive-parameter.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::IvfPositiveInteger),
        ),
        (
            "unsupported-store-vectors.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::IvfParameters),
        ),
        (
            "unsupported-flat-encoding.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::IvfPostingEncoding),
        ),
        (
            "missing-required-field.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::MissingField),
        ),
        (
            "duplicate-snapshot-id.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::SnapshotId),
        ),
        (
            "unknown-metadata-field.metadata.json",
            "INVALID_INDEX_METADATA",
            Some(Rule::UnknownField),
        ),
    ];
    let manifest = doc("invalid/manifest.json");
    let entries = manifest.as_array().expect("manifest is a list");
    assert_eq!(
        entries.len(),
        expected.len(),
        "manifest and test table differ"
    );
    let on_disk = std::fs::read_dir(fixtures().join("invalid"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".metadata.json")
        })
        .count();
    assert_eq!(
        on_disk,
        expected.len(),
        "an invalid fixture is not in the manifest"
    );
    for entry in entries {
        let file = entry["file"].as_str().unwrap();
        let violates = entry["violates"].as_str().unwrap();
        let (_, code, rule) = expected
            .iter()
            .find(|(f, _, _)| *f == file)
            .unwrap_or_else(|| panic!("manifest names {file}, unknown to this test"));
        let err = validate_bytes(&read(&format!("invalid/{file}")))
            .err()
            .unwrap_or_else(|| panic!("{file} was accepted; it violates: {violates}"));
        assert_eq!(err.code(), *code, "{file}: {err}");
        assert_eq!(err.rule(), *rule, "{file}: {err}");
        if *code == "UNSUPPORTED_FORMAT_VERSION" {
            assert_eq!(err, MetadataError::UnsupportedFormatVersion { found: 2 });
        }
        assert!(
            err.to_string().starts_with(&format!(
                "{}:",
                rule.map_or("format-version", |r| r.as_str())
            )),
            "{err}"
        );
    }
}

#[test]
fn fixture_next_is_a_valid_successor_of_base() {
    let base = validate_bytes(&read("valid/metadata.json")).unwrap();
    let next = validate_bytes(&read("valid/metadata-next.json")).unwrap();
    validate_successor(&base, &next).unwrap();
    // Going back drops a snapshot log entry and decreases sequence numbers.
    assert!(validate_successor(&next, &base).is_err());
    // Committing a document of another index.
    let other = validate_bytes(&read("valid/lvq4/metadata.json")).unwrap();
    let e = validate_successor(&base, &other).unwrap_err();
    assert_eq!(e.code(), "INDEX_UUID_MISMATCH");
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
            "\"snapshot-id\": 701,\n      \"timestamp-ms\"",
            "\"snapshot-id\": 701, \"snapshot-id\": 701,\n      \"timestamp-ms\"",
            1,
        ),
        text.replacen(
            "\"fixture\": \"ivf-parquet\"",
            "\"fixture\": \"a\", \"fixture\": \"b\"",
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
    v["current-snapshot-id"] = json!(701);
    assert_eq!(rule_of(&v), Rule::SnapshotLog);
    let mut v = doc("valid/metadata-next.json");
    v["snapshot-log"][1]["timestamp-ms"] = json!(1749999999999i64);
    assert_eq!(rule_of(&v), Rule::SnapshotLog);
    let mut v = base();
    v["snapshot-log"] = json!([{"snapshot-id": 5, "timestamp-ms": 1}, {"snapshot-id": 701, "timestamp-ms": 1750000000000i64}]);
    assert_eq!(rule_of(&v), Rule::SnapshotLog);
    let mut v = base();
    v["last-updated-ms"] = json!(1749999999999i64);
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
    v["snapshots"][1]["source-key-fields"] = json!(["tenant_id"]);
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
        set(&|s| s["parameters"]["nlist"] = json!("4")),
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
    b2["last-updated-ms"] = json!(1750000000005i64);
    assert_eq!(successor_err(&b2, &next).rule(), Some(Rule::Successor));
    // Identity change (metric).
    let mut n = b.clone();
    n["snapshots"][0]["metric"] = json!("cosine");
    assert_eq!(successor_err(&b, &n).rule(), Some(Rule::Identity));
    // Rollback: from next back to 701 without adding a snapshot is allowed.
    let mut rollback = next.clone();
    rollback["current-snapshot-id"] = json!(701);
    rollback["last-updated-ms"] = json!(1750000000002i64);
    rollback["snapshot-log"]
        .as_array_mut()
        .unwrap()
        .push(json!({"snapshot-id": 701, "timestamp-ms": 1750000000002i64}));
    validate_successor(&check(&next).unwrap(), &check(&rollback).unwrap()).unwrap();
    // Appending two entries is refused.
    let mut two = rollback.clone();
    two["snapshot-log"]
        .as_array_mut()
        .unwrap()
        .push(json!({"snapshot-id": 701, "timestamp-ms": 1750000000002i64}));
    assert_eq!(successor_err(&next, &two).rule(), Some(Rule::SnapshotLog));
    // Expiring 701 while keeping the log consistent is allowed.
    let mut expired = next.clone();
    expired["snapshots"].as_array_mut().unwrap().remove(0);
    expired["snapshot-log"].as_array_mut().unwrap().remove(0);
    validate_successor(&check(&next).unwrap(), &check(&expired).unwrap()).unwrap();
    // Reusing an id: expire 701 and add a different snapshot 701.
    let mut reuse = b.clone();
    reuse["snapshots"][0]["sequence-number"] = json!(2);
    reuse["last-sequence-number"] = json!(2);
    assert_eq!(successor_err(&b, &reuse).rule(), Some(Rule::Successor));
    // Nothing changed at all is a valid (if pointless) successor.
    validate_successor(&check(&b).unwrap(), &check(&b).unwrap()).unwrap();
}
