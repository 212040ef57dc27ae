//! `flotilla_upstream_requests_total{protocol=...}`: every request a provider sends is
//! counted under its protocol, retries included, checked against what each fixture server
//! actually received. The counters are process-wide, so this binary holds a single test that
//! compares deltas and never runs concurrently with another counting test.

use std::time::Duration;

use flotilla_catalog_access::delta_sharing::DeltaSharingProvider;
use flotilla_catalog_access::http::{HttpPolicy, RetryPolicy, upstream_requests};
use flotilla_catalog_access::iceberg_rest::IcebergRestProvider;
use flotilla_catalog_access::unity::UnityProvider;
use flotilla_catalog_access::{
    CatalogAuthentication, CatalogClientProvider, CatalogConnectionConfig, CatalogProtocol,
    ConnectOptions, ResolvedCatalogCredentials,
};
use flotilla_testkit::delta_sharing_fixture::{DEFAULT_RECIPIENT_TOKEN, DeltaSharingFixture};
use flotilla_testkit::iceberg_fixture::{IcebergFault, IcebergFaultRule, IcebergFixture};
use flotilla_testkit::unity_fixture::{DEFAULT_BEARER_TOKEN, UnityFixture};

fn options() -> ConnectOptions {
    ConnectOptions::with_http(HttpPolicy {
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
        ..HttpPolicy::local()
    })
}

fn counts() -> [u64; 3] {
    let c = upstream_requests();
    [
        c.get(CatalogProtocol::IcebergRest),
        c.get(CatalogProtocol::Unity),
        c.get(CatalogProtocol::DeltaSharing),
    ]
}

fn delta(before: [u64; 3]) -> [u64; 3] {
    let now = counts();
    [now[0] - before[0], now[1] - before[1], now[2] - before[2]]
}

#[tokio::test]
async fn every_sent_request_is_counted_under_its_protocol_only() {
    // Iceberg REST, with one injected 503 that the client retries: both attempts count.
    let fx = IcebergFixture::start_with_sample().await;
    fx.add_fault(IcebergFaultRule::once(IcebergFault::Status(503)).on_path("/namespaces"));
    let before = counts();
    let client = IcebergRestProvider
        .connect(
            &CatalogConnectionConfig::new(fx.uri()).with_property("warehouse", "demo"),
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("unused".into()),
            &options(),
        )
        .expect("connect");
    client
        .list_namespaces(None, None, None)
        .await
        .expect("list after one retry");
    let seen = fx.log().entries().len() as u64;
    assert!(
        seen >= 3,
        "config, the failed and the retried listing: {seen}"
    );
    assert_eq!(delta(before), [seen, 0, 0]);

    // Unity Catalog.
    let unity = UnityFixture::start_with_sample().await;
    let before = counts();
    let client = UnityProvider
        .connect(
            &CatalogConnectionConfig::new(unity.endpoint()),
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token(DEFAULT_BEARER_TOKEN.into()),
            &options(),
        )
        .expect("connect");
    client
        .list_namespaces(None, None, None)
        .await
        .expect("list");
    let seen = unity.requests().len() as u64;
    assert!(seen >= 1);
    assert_eq!(delta(before), [0, seen, 0]);

    // Delta Sharing.
    let sharing = DeltaSharingFixture::start_with_sample().await;
    let before = counts();
    let client = DeltaSharingProvider
        .connect(
            &CatalogConnectionConfig::new(sharing.base_url()),
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token(DEFAULT_RECIPIENT_TOKEN.into()),
            &options(),
        )
        .expect("connect");
    client
        .list_namespaces(None, None, None)
        .await
        .expect("list");
    let seen = sharing.requests().len() as u64;
    assert!(seen >= 1);
    assert_eq!(delta(before), [0, 0, seen]);

    // A request refused by the address policy never reaches the network and is not counted.
    let before = counts();
    if let Ok(client) = IcebergRestProvider.connect(
        &CatalogConnectionConfig::new("http://169.254.169.254/catalog"),
        &CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token("unused".into()),
        &options(),
    ) {
        assert!(client.list_namespaces(None, None, None).await.is_err());
    }
    assert_eq!(delta(before), [0, 0, 0]);

    // The rendered family names every protocol and no other label.
    let text = upstream_requests().render_prometheus();
    for p in ["iceberg_rest", "unity", "delta_sharing"] {
        assert!(
            text.contains(&format!(
                "flotilla_upstream_requests_total{{protocol=\"{p}\"}} "
            )),
            "{text}"
        );
    }
    assert!(text.contains("# TYPE flotilla_upstream_requests_total counter"));
    assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 3);
}
