//! The capture message kind of the reconcile queue (`docs/capture.md`, "When a table is
//! captured"): its sample event parses, it round-trips, and anything malformed is a poison
//! message with a reason saying what is wrong.

use flotilla_reconcile::schedule::WorkMessage;
use flotilla_reconcile::work::CaptureMessage;

fn message(revalidate: bool) -> CaptureMessage {
    CaptureMessage {
        account_id: "acme".into(),
        overlay_id: "ovl-01".into(),
        observed_generation: 3,
        revalidate,
    }
}

#[test]
fn the_sample_capture_event_parses_into_capture_messages() {
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/capture/batch.json"
    ))
    .expect("sample");
    let v: serde_json::Value = serde_json::from_str(&raw).expect("json");
    let records = v["Records"].as_array().expect("records");
    assert_eq!(records.len(), 2);
    let parsed: Vec<WorkMessage> = records
        .iter()
        .map(|r| WorkMessage::parse(r["body"].as_str().expect("body")).expect("message"))
        .collect();
    assert_eq!(parsed[0], WorkMessage::Capture(message(false)));
    assert!(matches!(&parsed[1], WorkMessage::Capture(m) if m.revalidate));
}

#[test]
fn capture_messages_round_trip_and_are_told_apart() {
    for revalidate in [false, true] {
        let m = message(revalidate);
        let body = m.to_body();
        assert_eq!(CaptureMessage::parse(&body), Ok(m.clone()));
        let w = WorkMessage::parse(&body).expect("work message");
        assert_eq!(w, WorkMessage::Capture(m.clone()));
        assert_eq!(w.to_body(), body);
        assert_eq!(m.to_json()["kind"], "capture");
    }
    // A capture and a revalidation of the same overlay and generation are distinct jobs;
    // neither is confused with the overlay's reconcile message.
    let idents: std::collections::HashSet<_> = [
        WorkMessage::Capture(message(false)).ident(),
        WorkMessage::Capture(message(true)).ident(),
        WorkMessage::Overlay(flotilla_reconcile::work::ReconcileMessage {
            account_id: "acme".into(),
            overlay_id: "ovl-01".into(),
            observed_generation: 3,
        })
        .ident(),
    ]
    .into_iter()
    .collect();
    assert_eq!(idents.len(), 3);
}

#[test]
fn malformed_capture_messages_are_rejected_with_a_reason() {
    let ok = r#"{"kind":"capture","account_id":"acme","overlay_id":"ovl-01","observed_generation":3,"revalidate":false}"#;
    assert!(WorkMessage::parse(ok).is_ok());
    let cases: &[(&str, &str)] = &[
        (
            r#"{"kind":"compact","account_id":"acme","overlay_id":"ovl-01","observed_generation":3,"revalidate":false}"#,
            "unknown kind",
        ),
        (
            r#"{"kind":"capture","account_id":"acme","overlay_id":"ovl-01","observed_generation":3}"#,
            "revalidate",
        ),
        (
            r#"{"kind":"capture","account_id":"acme","overlay_id":"ovl-01","revalidate":true}"#,
            "observed_generation",
        ),
        (
            r#"{"kind":"capture","account_id":"acme","overlay_id":"ovl-01","observed_generation":3,"revalidate":false,"extra":1}"#,
            "unknown field",
        ),
        (
            r#"{"kind":"capture","account_id":"acme","overlay_id":"ovl-01","observed_generation":-1,"revalidate":false}"#,
            "malformed capture message",
        ),
        (
            r#"{"kind":"capture","account_id":"acme","overlay_id":"ovl-01","observed_generation":3,"revalidate":"yes"}"#,
            "malformed capture message",
        ),
        (
            r#"{"kind":"capture","account_id":"ACME!","overlay_id":"ovl-01","observed_generation":3,"revalidate":false}"#,
            "malformed account_id",
        ),
        (
            r#"{"kind":"capture","account_id":"acme","overlay_id":"../x","observed_generation":3,"revalidate":false}"#,
            "malformed overlay_id",
        ),
        (
            r#"{"kind":7,"account_id":"acme","overlay_id":"ovl-01","observed_generation":3,"revalidate":false}"#,
            "malformed capture message",
        ),
    ];
    for (body, reason) in cases {
        let err = WorkMessage::parse(body).expect_err(body);
        assert!(err.contains(reason), "{body}: {err}");
        assert!(CaptureMessage::parse(body).is_err(), "{body}");
    }
}
