//! The metastore contract on DynamoDB, against the moto server the test script starts
//! (`FLOTILLA_MOTO_ENDPOINT`). Each test gets its own table, because moto's state is shared
//! by every test process.

#[macro_use]
mod common;

use flotilla_metastore::dynamo::{self, DynamoMetastore};

async fn fresh_table() -> Box<DynamoMetastore> {
    let endpoint = match std::env::var("FLOTILLA_MOTO_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ => panic!(
            "FLOTILLA_MOTO_ENDPOINT is not set: DynamoDB contract tests need a moto server \
             (run them through scripts/test.sh, which starts one)"
        ),
    };
    let client = dynamo::connect(Some(&endpoint)).await;
    let table = format!("contract-{}", uuid_like());
    if let Err(e) = DynamoMetastore::create_table(&client, &table).await {
        panic!("cannot create table {table} on {endpoint}: {e}");
    }
    Box::new(DynamoMetastore::new(client, table))
}

/// A unique enough table suffix without another dependency: time plus process id plus a counter.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{nanos:x}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

contract_tests!(fresh_table);

#[tokio::test]
async fn create_table_is_idempotent() {
    let store = fresh_table().await;
    let client = store.client().clone();
    let again = DynamoMetastore::create_table(&client, store.table_name()).await;
    assert!(
        again.is_ok(),
        "creating an existing table again must succeed: {again:?}"
    );
}

#[tokio::test]
async fn missing_table_is_a_backend_error() {
    let endpoint = std::env::var("FLOTILLA_MOTO_ENDPOINT").unwrap_or_default();
    assert!(!endpoint.is_empty(), "FLOTILLA_MOTO_ENDPOINT is not set");
    let client = dynamo::connect(Some(&endpoint)).await;
    let store = DynamoMetastore::new(client, format!("missing-{}", uuid_like()));
    let got = flotilla_metastore::Metastore::get(
        &store,
        &flotilla_metastore::Key::new("p", "s"),
        flotilla_metastore::Consistency::Strong,
    )
    .await;
    assert!(
        matches!(got, Err(flotilla_metastore::MetastoreError::Backend(_))),
        "got {got:?}"
    );
}
