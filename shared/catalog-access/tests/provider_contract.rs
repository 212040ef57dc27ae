//! The provider contract suite: one body per behaviour every catalog provider owes the
//! reconciler, run over the Iceberg REST, Unity Catalog and Delta Sharing providers against
//! their fixture servers (`flotilla-testkit`). A provider joins by implementing
//! [`support::Contract`] (and [`support::RealServerSwitches`] when its fixture reproduces the
//! real-server behaviours) and adding a line to the `contract!` invocations at the bottom.
//!
//! Protocol-specific behaviour (Iceberg config and SigV4, Unity's two-level catalogs, Delta
//! Sharing access modes...) stays in the per-provider files.

mod support;

use std::sync::Arc;
use std::time::Duration;

use flotilla_catalog_access::http::{AdvancingSleep, Waiter};
use flotilla_catalog_access::{
    CatalogAccessError, CatalogClient, Clock, RETRY_AFTER_DETAIL, SystemClock, VendingErrorKind,
};
use flotilla_domain::clock::ManualClock;
use flotilla_error::{Error, ErrorKind};
use flotilla_testkit::fixture::conditions::{RetryAfter, Throttle};
use support::{
    Contract, DeltaSharing, IcebergRest, OAuthContract, RealServerSwitches, Unity, statuses,
};

// ---- not-found answers --------------------------------------------------------------------

async fn missing_table_is_not_found<P: Contract>() {
    let p = P::start().await;
    let c = p.client().await;
    let (namespace, _) = p.sample();
    let err = c.load_table(&namespace, "nope", None).await.unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
    let err = c
        .list_tables(&p.missing_namespace(), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
    let err = c
        .list_namespaces(Some(&p.missing_top()), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
}

// ---- pagination --------------------------------------------------------------------------

async fn table_pages_follow_tokens_and_send_the_page_size<P: Contract>() {
    let p = P::start().await;
    let namespace = p.add_namespace("paged");
    for i in 0..5 {
        p.add_table(&namespace, &format!("t{i}"));
    }
    let c = p.client().await;
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = c
            .list_tables(&namespace, token.as_deref(), Some(2))
            .await
            .unwrap();
        pages += 1;
        names.extend(page.items.into_iter().map(|t| t.name));
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(names, ["t0", "t1", "t2", "t3", "t4"]);
    assert_eq!(pages, 3);
    let reqs = p.requests_to("/tables");
    assert_eq!(reqs.len(), 3, "one request per page");
    assert!(
        reqs.iter()
            .all(|r| r.query_param(P::PAGE_SIZE_PARAM) == Some("2")),
        "{reqs:?}"
    );
    assert_eq!(
        reqs[0].query_param(P::PAGE_TOKEN_PARAM),
        P::FIRST_PAGE_TOKEN
    );
    for later in &reqs[1..] {
        let sent = later.query_param(P::PAGE_TOKEN_PARAM);
        assert!(sent.is_some_and(|t| !t.is_empty()), "{later:?}");
    }
}

// ---- credential vending -------------------------------------------------------------------

async fn vended_credentials_are_cached_then_renewed_near_expiry<P: Contract>() {
    let p = P::start().await;
    let clock = Arc::new(ManualClock::starting_now());
    let lifetime = Duration::from_secs(3600);
    p.set_vend_lifetime(clock.now(), lifetime);
    let mut options = support::options();
    options.clock = clock.clone();
    let c = p.client_with(options).await;
    let (namespace, table) = p.sample();
    let first = c.vend_storage_credentials(&namespace, table).await.unwrap();
    assert!(first.expires_at.is_some());
    let again = c.vend_storage_credentials(&namespace, table).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(p.vend_count(), 1, "fresh credentials are reused");
    // A minute before they expire they are renewed.
    clock.advance(lifetime - Duration::from_secs(60));
    p.set_vend_lifetime(clock.now(), lifetime);
    let renewed = c.vend_storage_credentials(&namespace, table).await.unwrap();
    assert_eq!(p.vend_count(), 2, "renewed near expiry");
    assert_ne!(renewed, first);
    assert_secret_free(&p, &format!("{first:?} {renewed:?}"));
}

async fn already_expired_credentials_are_refused_without_leaking_them<P: Contract>() {
    let p = P::start().await;
    p.vend_expired();
    let c = p.client().await;
    let (namespace, table) = p.sample();
    let err = c
        .vend_storage_credentials(&namespace, table)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CatalogAccessError::CredentialVending {
                kind: VendingErrorKind::Expired,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(p.vend_count(), 1);
    assert_secret_free(&p, &format!("{err} {err:?}"));
}

fn assert_secret_free<P: Contract>(p: &P, text: &str) {
    for secret in p.secrets() {
        assert!(!text.contains(&secret), "a secret leaked into: {text}");
    }
}

// ---- retryable vs permanent faults --------------------------------------------------------

async fn a_transient_500_is_retried<P: Contract>() {
    let p = P::start().await;
    let c = p.client().await;
    p.inject_status(500, Some(1), P::LIST_PATH);
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(
        statuses(&p.requests_to(P::LIST_PATH)),
        vec![Some(500), Some(200)]
    );
    let (namespace, table) = p.sample();
    p.inject_status(500, Some(1), P::LOAD_PATH);
    c.load_table(&namespace, table, None).await.unwrap();
    assert_eq!(
        statuses(&p.requests_to(P::LOAD_PATH)),
        vec![Some(500), Some(200)]
    );
}

async fn persistent_5xx_and_429_are_retryable_after_bounded_attempts<P: Contract>() {
    for status in [500u16, 502, 503, 429] {
        let p = P::start().await;
        let c = p.client().await;
        let before = p.requests().len();
        p.inject_status(status, None, P::LIST_PATH);
        let err = c.list_namespaces(None, None, None).await.unwrap_err();
        assert!(
            matches!(err, CatalogAccessError::Retryable { status: Some(s), .. } if s == status),
            "{err:?}"
        );
        assert!(err.is_retryable());
        assert_eq!(p.requests_to(P::LIST_PATH).len(), 3, "max_attempts = 3");
        assert_eq!(p.requests().len() - before, 3, "nothing but the attempts");
    }
}

async fn malformed_json_is_a_protocol_error<P: Contract>() {
    let p = P::start().await;
    let c = p.client().await;
    p.inject_malformed(P::LIST_PATH);
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(&err, CatalogAccessError::Protocol { field, .. } if field == "<body>"),
        "{err:?}"
    );
    let (namespace, table) = p.sample();
    p.inject_malformed(P::LOAD_PATH);
    let err = c.load_table(&namespace, table, None).await.unwrap_err();
    assert!(
        matches!(&err, CatalogAccessError::Protocol { field, .. } if field == "<body>"),
        "{err:?}"
    );
}

// ---- throttling (docs/reliability.md, "Upstream throttling is honoured") ----------------

/// A client whose waits advance a manual clock (at a whole second, so an HTTP-date
/// `Retry-After` names an exact wait) that the fixture also stamps its records and reads
/// its dates with. Answers the client, the clock and the sleeper holding every wait.
async fn throttle_client<P: Contract>(p: &P) -> (Box<dyn CatalogClient>, AdvancingSleep) {
    let clock = ManualClock::new(SystemClock.now_secs() * 1000);
    p.log().set_clock(Arc::new(clock.clone()));
    p.conditions().set_clock(Arc::new(clock.clone()));
    let (waiter, sleeps) = Waiter::advancing(&clock);
    let mut options = support::options();
    options.clock = Arc::new(clock);
    options.http.waiter = waiter;
    (p.client_with(options).await, sleeps)
}

async fn throttled_requests_are_retried_after_the_stated_retry_after<P: Contract>() {
    let p = P::start().await;
    let (c, sleeps) = throttle_client(&p).await;
    // 429 with delay-seconds on the listing.
    p.conditions().throttle(
        Throttle::next(1)
            .retry_after(RetryAfter::Seconds(7))
            .on_path(P::LIST_PATH),
    );
    c.list_namespaces(None, None, None).await.unwrap();
    let listed = p.requests_to(P::LIST_PATH);
    assert_eq!(statuses(&listed), vec![Some(429), Some(200)]);
    assert_eq!(listed[0].retry_after.as_deref(), Some("7"));
    assert_eq!(
        listed[1].at_ms - listed[0].at_ms,
        7_000,
        "retried 7 s later"
    );
    assert_eq!(sleeps.waits(), vec![Duration::from_secs(7)]);
    // 503 with an HTTP-date, twice, on the table load.
    p.conditions().throttle(
        Throttle::next(2)
            .with_status(503)
            .retry_after(RetryAfter::Date(Duration::from_secs(12)))
            .on_path(P::LOAD_PATH),
    );
    let (namespace, table) = p.sample();
    c.load_table(&namespace, table, None).await.unwrap();
    let loads = p.requests_to(P::LOAD_PATH);
    assert_eq!(statuses(&loads), vec![Some(503), Some(503), Some(200)]);
    assert!(
        loads[0]
            .retry_after
            .as_deref()
            .is_some_and(|d| d.ends_with(" GMT"))
    );
    for pair in loads.windows(2) {
        assert_eq!(pair[1].at_ms - pair[0].at_ms, 12_000, "{loads:?}");
    }
    assert_eq!(sleeps.waits().len(), 3);
    assert_eq!(p.conditions().throttled_requests(), 3);
}

async fn throttling_past_the_attempts_is_retryable_and_carries_the_hint<P: Contract>() {
    let p = P::start().await;
    let (c, sleeps) = throttle_client(&p).await;
    let before = p.requests_to(P::LIST_PATH).len();
    p.conditions().throttle(
        Throttle::next(usize::MAX)
            .retry_after(RetryAfter::Seconds(2))
            .on_path(P::LIST_PATH),
    );
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(err, CatalogAccessError::Throttled { status: 429, retry_after, .. }
            if retry_after == Duration::from_secs(2)),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let mapped = Error::from(&err);
    assert_eq!(mapped.kind, ErrorKind::Unavailable);
    assert!(mapped.is_retryable());
    assert_eq!(mapped.details[RETRY_AFTER_DETAIL], 2);
    assert_eq!(
        p.requests_to(P::LIST_PATH).len() - before,
        3,
        "max_attempts = 3"
    );
    assert_eq!(sleeps.waits(), vec![Duration::from_secs(2); 2]);
    // A stated wait beyond the cap (30 s) is not waited out: one attempt, the hint kept.
    p.conditions().clear_throttles();
    p.conditions().throttle(
        Throttle::next(1)
            .retry_after(RetryAfter::Seconds(120))
            .on_path(P::LIST_PATH),
    );
    let before = p.requests_to(P::LIST_PATH).len();
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(120)), "{err:?}");
    assert_eq!(p.requests_to(P::LIST_PATH).len() - before, 1);
    assert_eq!(sleeps.waits().len(), 2, "nothing waited");
    // No Retry-After: bounded, jittered backoff, then a retryable error without a hint.
    p.conditions().throttle(
        Throttle::next(usize::MAX)
            .retry_after(RetryAfter::Absent)
            .on_path(P::LIST_PATH),
    );
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            CatalogAccessError::Retryable {
                status: Some(429),
                ..
            }
        ),
        "{err:?}"
    );
    let backoffs = &sleeps.waits()[2..];
    assert_eq!(backoffs.len(), 2);
    assert!(
        backoffs
            .iter()
            .all(|d| *d <= support::policy().retry.max_delay),
        "{backoffs:?}"
    );
}

async fn a_throttled_token_request_is_resent_after_its_retry_after<P: OAuthContract>() {
    let p = P::start().await;
    let clock = ManualClock::new(SystemClock.now_secs() * 1000);
    p.log().set_clock(Arc::new(clock.clone()));
    p.conditions().set_clock(Arc::new(clock.clone()));
    let (waiter, sleeps) = Waiter::advancing(&clock);
    let mut options = support::options();
    options.clock = Arc::new(clock);
    options.http.waiter = waiter;
    p.conditions().throttle(
        Throttle::next(1)
            .retry_after(RetryAfter::Seconds(3))
            .on_path(P::TOKEN_PATH),
    );
    let c = p.oauth_client_with(options).await;
    c.list_namespaces(None, None, None).await.unwrap();
    let posts = p.requests_to(P::TOKEN_PATH);
    assert_eq!(statuses(&posts), vec![Some(429), Some(200)]);
    assert!(posts.iter().all(|r| r.method == "POST"));
    assert_eq!(posts[1].at_ms - posts[0].at_ms, 3_000);
    assert_eq!(p.token_requests(), 1, "one token minted");
    assert_eq!(sleeps.waits(), vec![Duration::from_secs(3)]);
    // A 5xx leaves a POST's outcome unknown: it is not resent.
    p.expire_issued_tokens();
    p.inject_status(500, Some(1), P::TOKEN_PATH);
    let before = p.requests_to(P::TOKEN_PATH).len();
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(p.requests_to(P::TOKEN_PATH).len() - before, 1, "sent once");
}

// ---- token acquisition and 401 renewal ----------------------------------------------------

async fn oauth_token_is_fetched_once_and_renewed_once_after_a_401<P: OAuthContract>() {
    let p = P::start().await;
    let c = p.oauth_client().await;
    c.list_namespaces(None, None, None).await.unwrap();
    let (namespace, _) = p.sample();
    c.list_tables(&namespace, None, None).await.unwrap();
    assert_eq!(p.token_requests(), 1);
    // The upstream expires the token server-side: one 401, one refresh, one resend.
    p.expire_issued_tokens();
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(p.token_requests(), 2);
    assert_eq!(
        statuses(&p.requests_to(P::LIST_PATH)),
        vec![Some(200), Some(401), Some(200)]
    );
    let refused = p
        .requests()
        .iter()
        .filter(|r| r.status == Some(401))
        .count();
    assert_eq!(refused, 1);
    p.assert_renewal_evidence();
    // A server that refuses every token: one refresh, one retry, then Authentication.
    p.refuse_every_token();
    let before = p.requests_to(P::LIST_PATH).len();
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            CatalogAccessError::Authentication {
                status: Some(401),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(p.requests_to(P::LIST_PATH).len() - before, 2);
    assert_eq!(p.token_requests(), 3);
}

async fn oauth_token_is_refreshed_before_expiry<P: OAuthContract>() {
    let p = P::start().await;
    p.set_token_lifetime_secs(600);
    let clock = Arc::new(ManualClock::starting_now());
    let mut options = support::options();
    options.clock = clock.clone();
    let c = p.oauth_client_with(options).await;
    c.list_namespaces(None, None, None).await.unwrap();
    clock.advance(Duration::from_secs(500));
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(p.token_requests(), 1, "still within lifetime minus margin");
    clock.advance(Duration::from_secs(60));
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(p.token_requests(), 2, "refreshed before the token expired");
    // No request was ever refused: the refresh happened before expiry.
    assert!(p.requests().iter().all(|r| r.status != Some(401)));
    let listed = p.requests_to(P::LIST_PATH);
    assert!(listed.iter().all(|r| r.status == Some(200)), "{listed:?}");
}

// ---- real-server behaviours (docs/catalog-access.md, "Real-server behaviours") -------------

async fn listings_drop_repeated_entries<P: RealServerSwitches>() {
    let p = P::start().await;
    let (namespace, table) = p.sample();
    let top = p.top_of(&namespace);
    let second = p.add_child(&top, "wholesale");
    p.add_table(&namespace, "returns");
    p.set_duplicate_listings(true);
    let c = p.client().await;
    let tops = c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(tops.items, vec![top.clone()]);
    let children = c.list_namespaces(Some(&top), None, None).await.unwrap();
    assert_eq!(children.items, vec![namespace.clone(), second]);
    let tables = c.list_tables(&namespace, None, None).await.unwrap();
    let names: Vec<&str> = tables.items.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec![table, "returns"]);
    // The fixture really did repeat them, in one answer each.
    assert_eq!(p.requests_to(P::CHILD_LIST_PATH).len(), 1);
}

async fn a_listing_under_a_missing_parent_answered_empty_is_not_found<P: RealServerSwitches>() {
    let p = P::start().await;
    let (namespace, _) = p.sample();
    let top = p.top_of(&namespace);
    let empty = p.add_child(&top, "empty");
    p.set_missing_parent_as_empty(true);
    let c = p.client().await;
    let gone = p.child(&top, "gone");
    let err = c.list_tables(&gone, None, None).await.unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
    assert!(err.to_string().contains(P::GONE_SHOWN), "{err}");
    let err = c
        .list_tables(&p.missing_namespace(), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
    let err = c
        .list_namespaces(Some(&p.missing_top()), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
    // An existing but empty namespace is simply empty.
    let listed = c.list_tables(&empty, None, None).await.unwrap();
    assert!(listed.items.is_empty());
    // Non-empty listings cost no extra request.
    let before = p.requests().len();
    c.list_tables(&namespace, None, None).await.unwrap();
    assert_eq!(p.requests().len(), before + 1);
}

async fn a_table_listed_but_gone_on_load_is_not_found<P: RealServerSwitches>() {
    let p = P::start().await;
    let (namespace, table) = p.sample();
    p.drop_but_keep_listed(&namespace, table);
    let c = p.client().await;
    let listed = c.list_tables(&namespace, None, None).await.unwrap();
    assert_eq!(listed.items.len(), 1, "the stale listing still names it");
    for etag in [None, Some("v3")] {
        let err = c.load_table(&namespace, table, etag).await.unwrap_err();
        assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
    }
}

async fn expiration_time_as_a_decimal_string_is_read<P: RealServerSwitches>() {
    let p = P::start().await;
    p.set_expiration_as_string(true);
    let c = p.client().await;
    let (namespace, table) = p.sample();
    let creds = c.vend_storage_credentials(&namespace, table).await.unwrap();
    let want = std::time::SystemTime::UNIX_EPOCH
        + std::time::Duration::from_millis(u64::try_from(p.first_vended_expiry_ms()).unwrap());
    assert_eq!(creds.expires_at, Some(want));
    assert_eq!(p.requests_to("/temporary-table-credentials").len(), 1);
}

/// `contract!(module, Provider; behaviour, ...)`: one `#[tokio::test]` per behaviour.
macro_rules! contract {
    ($module:ident, $provider:ty; $($behaviour:ident),+ $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $behaviour() {
                    super::$behaviour::<$provider>().await;
                }
            )+
        }
    };
}

contract!(iceberg_rest, IcebergRest;
    missing_table_is_not_found,
    table_pages_follow_tokens_and_send_the_page_size,
    vended_credentials_are_cached_then_renewed_near_expiry,
    already_expired_credentials_are_refused_without_leaking_them,
    a_transient_500_is_retried,
    persistent_5xx_and_429_are_retryable_after_bounded_attempts,
    malformed_json_is_a_protocol_error,
    throttled_requests_are_retried_after_the_stated_retry_after,
    throttling_past_the_attempts_is_retryable_and_carries_the_hint,
    oauth_token_is_fetched_once_and_renewed_once_after_a_401,
    oauth_token_is_refreshed_before_expiry,
    a_throttled_token_request_is_resent_after_its_retry_after,
);
contract!(unity, Unity;
    missing_table_is_not_found,
    table_pages_follow_tokens_and_send_the_page_size,
    vended_credentials_are_cached_then_renewed_near_expiry,
    already_expired_credentials_are_refused_without_leaking_them,
    a_transient_500_is_retried,
    persistent_5xx_and_429_are_retryable_after_bounded_attempts,
    malformed_json_is_a_protocol_error,
    throttled_requests_are_retried_after_the_stated_retry_after,
    throttling_past_the_attempts_is_retryable_and_carries_the_hint,
    oauth_token_is_fetched_once_and_renewed_once_after_a_401,
    oauth_token_is_refreshed_before_expiry,
    a_throttled_token_request_is_resent_after_its_retry_after,
    listings_drop_repeated_entries,
    a_listing_under_a_missing_parent_answered_empty_is_not_found,
    a_table_listed_but_gone_on_load_is_not_found,
    expiration_time_as_a_decimal_string_is_read,
);
contract!(delta_sharing, DeltaSharing;
    missing_table_is_not_found,
    table_pages_follow_tokens_and_send_the_page_size,
    vended_credentials_are_cached_then_renewed_near_expiry,
    already_expired_credentials_are_refused_without_leaking_them,
    a_transient_500_is_retried,
    persistent_5xx_and_429_are_retryable_after_bounded_attempts,
    malformed_json_is_a_protocol_error,
    throttled_requests_are_retried_after_the_stated_retry_after,
    throttling_past_the_attempts_is_retryable_and_carries_the_hint,
    listings_drop_repeated_entries,
    a_listing_under_a_missing_parent_answered_empty_is_not_found,
    a_table_listed_but_gone_on_load_is_not_found,
    expiration_time_as_a_decimal_string_is_read,
);
