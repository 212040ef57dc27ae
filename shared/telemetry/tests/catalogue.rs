//! `infra/metrics.json` is the metric catalogue exported: `scripts/check_template.py` reads
//! it to refuse an alarm or dashboard widget on a metric the code does not write. This test
//! keeps the file equal to the Rust definition (`FLOTILLA_BLESS=1` rewrites it).

use std::collections::HashSet;
use std::path::Path;

use flotilla_telemetry::catalog::{self, ALL};

#[test]
fn infra_metrics_json_is_the_exported_catalogue() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/metrics.json");
    let want = serde_json::to_string_pretty(&catalog::export_json()).expect("json") + "\n";
    if std::env::var_os("FLOTILLA_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write infra/metrics.json");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "infra/metrics.json differs from the catalogue; run \
         FLOTILLA_BLESS=1 cargo nextest run -p flotilla-telemetry --test catalogue"
    );
}

#[test]
fn names_are_unique_and_dimension_sets_are_declared_dimensions() {
    let mut prom = HashSet::new();
    let mut cw = HashSet::new();
    for m in ALL {
        assert!(prom.insert(m.name), "duplicate {}", m.name);
        assert!(cw.insert(m.cloudwatch), "duplicate {}", m.cloudwatch);
        let declared: Vec<&str> = [catalog::STAGE, catalog::FUNCTION]
            .into_iter()
            .chain(m.labels.iter().map(|l| l.dimension))
            .collect();
        for set in m.dimension_sets() {
            assert!(set.len() <= 30, "{}: EMF allows 30 dimensions", m.name);
            assert!(
                set.contains(&catalog::STAGE),
                "{}: every set has Stage",
                m.name
            );
            for d in set {
                assert!(
                    declared.contains(&d),
                    "{}: undeclared dimension {d}",
                    m.name
                );
            }
        }
        // Nothing that names a tenant, a secret or a generation is a label.
        for l in m.labels {
            for bad in [
                "account",
                "token",
                "secret",
                "generation",
                "integration_id",
                "catalog",
            ] {
                assert!(!l.key.contains(bad), "{}: label {}", m.name, l.key);
            }
        }
    }
}
