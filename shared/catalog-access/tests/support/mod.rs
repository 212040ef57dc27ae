//! Per-provider adapters of the contract suite (`tests/provider_contract.rs`): how to start a
//! provider's fixture, connect its client with the right authentication, seed it, trigger a
//! fault and read the requests it recorded.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flotilla_catalog_access::delta_sharing::DeltaSharingProvider;
use flotilla_catalog_access::http::{HttpPolicy, RetryPolicy};
use flotilla_catalog_access::iceberg_rest::IcebergRestProvider;
use flotilla_catalog_access::unity::UnityProvider;
use flotilla_catalog_access::{
    CatalogAuthentication, CatalogClient, CatalogClientProvider, CatalogConnectionConfig,
    ConnectOptions, ResolvedCatalogCredentials, UpstreamNamespace,
};
use flotilla_testkit::delta_sharing_fixture::{
    DEFAULT_RECIPIENT_TOKEN, DeltaSharingFixture, SharingTable,
};
use flotilla_testkit::fixture::conditions::Conditions;
use flotilla_testkit::iceberg_fixture as iceberg;
use flotilla_testkit::iceberg_fixture::{
    FixtureAuth, IcebergFault, IcebergFaultRule, IcebergFixture,
};
use flotilla_testkit::recorder::{RecordedRequest, RequestLog};
use flotilla_testkit::unity_fixture::{
    API_PREFIX, DEFAULT_BEARER_TOKEN, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET, Fault, FaultRule,
    UnityFixture, UnityTable,
};

/// Three attempts with millisecond backoff: retries are observable and fast.
pub fn policy() -> HttpPolicy {
    HttpPolicy {
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
        ..HttpPolicy::local()
    }
}

/// The options every contract client connects with (the one place to change the clock).
pub fn options() -> ConnectOptions {
    ConnectOptions::with_http(policy())
}

/// A namespace from its levels.
pub fn ns(levels: &[&str]) -> UpstreamNamespace {
    UpstreamNamespace::new(levels.iter().copied())
}

/// The answered statuses of some recorded requests, in order.
pub fn statuses(requests: &[RecordedRequest]) -> Vec<Option<u16>> {
    requests.iter().map(|r| r.status).collect()
}

/// What the contract suite needs of a provider and its fixture.
pub trait Contract: Sized {
    /// Path suffix (and fault fragment) of the top-level namespace listing.
    const LIST_PATH: &'static str;
    /// Path suffix (and fault fragment) of loading the sample table.
    const LOAD_PATH: &'static str;
    /// The query parameters of a paged listing: the page size and the page token.
    const PAGE_SIZE_PARAM: &'static str;
    const PAGE_TOKEN_PARAM: &'static str;
    /// The page token the first request of a listing carries (`None`: no parameter).
    const FIRST_PAGE_TOKEN: Option<&'static str>;

    /// Starts the fixture holding the sample table.
    async fn start() -> Self;
    /// A client connected with `options`, its session set up (so later requests are
    /// catalog calls only).
    async fn client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient>;
    /// A connected client with the contract's [`options`].
    async fn client(&self) -> Box<dyn CatalogClient> {
        self.client_with(options()).await
    }
    /// The sample table's namespace and name.
    fn sample(&self) -> (UpstreamNamespace, &'static str);
    /// Creates an empty table namespace `name` beside the sample's and returns it.
    fn add_namespace(&self, name: &str) -> UpstreamNamespace;
    /// Adds a table to a table namespace.
    fn add_table(&self, namespace: &UpstreamNamespace, name: &str);
    /// Credentials vended from now on expire `lifetime` after `now` (the client's clock).
    fn set_vend_lifetime(&self, now: SystemTime, lifetime: Duration);
    /// Credentials vended from now on have already expired.
    fn vend_expired(&self);
    /// How many credentials the fixture vended.
    fn vend_count(&self) -> usize;
    /// What must never appear in an error or a debug print: the secrets the fixture vended
    /// and the client's own credentials.
    fn secrets(&self) -> Vec<String>;
    /// A table namespace under a missing top level.
    fn missing_namespace(&self) -> UpstreamNamespace;
    /// A missing top-level namespace.
    fn missing_top(&self) -> UpstreamNamespace;
    /// Answers `status` to the next `times` (`None`: every) request whose path holds `path`.
    fn inject_status(&self, status: u16, times: Option<usize>, path: &str);
    /// Answers a malformed JSON body to the next request whose path holds `path`.
    fn inject_malformed(&self, path: &str);
    /// Every request the fixture recorded, in arrival order.
    fn requests(&self) -> Vec<RecordedRequest>;
    /// The fixture's network conditions (latency, throttling).
    fn conditions(&self) -> &Conditions;
    /// The fixture's request log (to stamp arrivals with a test clock).
    fn log(&self) -> RequestLog;
    /// The recorded requests whose path ends with `suffix`.
    fn requests_to(&self, suffix: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with(suffix))
            .collect()
    }
}

/// Providers authenticating with OAuth2 client credentials against their fixture's token
/// endpoint.
pub trait OAuthContract: Contract {
    /// Path of the fixture's token endpoint.
    const TOKEN_PATH: &'static str;
    /// A client connected with `options`, authenticating with the fixture's client
    /// credentials (the fixture switched to OAuth where that is a mode).
    async fn oauth_client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient>;
    /// [`OAuthContract::oauth_client_with`] the contract's [`options`].
    async fn oauth_client(&self) -> Box<dyn CatalogClient> {
        self.oauth_client_with(options()).await
    }
    /// Tokens issued from now on expire after `secs`.
    fn set_token_lifetime_secs(&self, secs: u64);
    /// Token requests the fixture received.
    fn token_requests(&self) -> usize;
    /// Invalidates every issued token server-side.
    fn expire_issued_tokens(&self);
    /// Refuses every catalog request with 401 whatever token it carries.
    fn refuse_every_token(&self);
    /// Protocol-specific evidence after one 401 renewal (default: none).
    fn assert_renewal_evidence(&self) {}
}

/// The real-server behaviours a two-level Delta provider's fixture reproduces (repeated
/// entries, a missing parent answered empty, a table listed after it was dropped, expiry
/// times as strings).
pub trait RealServerSwitches: Contract {
    /// Path suffix of a child-namespace listing.
    const CHILD_LIST_PATH: &'static str;
    /// How the not-found error names the missing `<top>.gone` namespace.
    const GONE_SHOWN: &'static str;

    /// The top-level namespace of a two-level one.
    fn top_of(&self, namespace: &UpstreamNamespace) -> UpstreamNamespace {
        ns(&[namespace.levels()[0].as_str()])
    }
    /// The child namespace `name` of `top` (not created).
    fn child(&self, top: &UpstreamNamespace, name: &str) -> UpstreamNamespace {
        ns(&[top.levels()[0].as_str(), name])
    }
    /// Creates the child namespace `name` of `top` and returns it.
    fn add_child(&self, top: &UpstreamNamespace, name: &str) -> UpstreamNamespace;
    fn set_duplicate_listings(&self, on: bool);
    fn set_missing_parent_as_empty(&self, on: bool);
    fn drop_but_keep_listed(&self, namespace: &UpstreamNamespace, name: &str);
    fn set_expiration_as_string(&self, on: bool);
    /// The expiry the fixture put on the first credentials it vended.
    fn first_vended_expiry_ms(&self) -> i64;
}

fn levels(namespace: &UpstreamNamespace) -> (&str, &str) {
    let l = namespace.levels();
    (l[0].as_str(), l[1].as_str())
}

fn unity_rule(fault: Fault, times: Option<usize>) -> FaultRule {
    match times {
        Some(n) => FaultRule::times(fault, n),
        None => FaultRule::always(fault),
    }
}

fn epoch_ms(at: SystemTime) -> i64 {
    i64::try_from(at.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// The [`Contract`] items the Unity and Delta Sharing fixtures answer alike (one fault rule
/// type, one recorder, relative credential lifetimes), inside each `impl Contract`.
macro_rules! two_level_contract {
    () => {
        const FIRST_PAGE_TOKEN: Option<&'static str> = None;

        fn inject_status(&self, status: u16, times: Option<usize>, path: &str) {
            self.0
                .inject(unity_rule(Fault::Status(status), times).on_path(path));
        }

        fn inject_malformed(&self, path: &str) {
            self.0
                .inject(FaultRule::once(Fault::MalformedJson).on_path(path));
        }

        fn requests(&self) -> Vec<RecordedRequest> {
            self.0.requests()
        }

        fn conditions(&self) -> &Conditions {
            self.0.conditions()
        }

        fn log(&self) -> RequestLog {
            self.0.log()
        }

        fn set_vend_lifetime(&self, _now: SystemTime, lifetime: Duration) {
            self.0
                .set_credential_lifetime_ms(i64::try_from(lifetime.as_millis()).unwrap());
        }

        fn vend_expired(&self) {
            self.0.set_credential_lifetime_ms(-1000);
        }

        fn vend_count(&self) -> usize {
            self.0.vended().len()
        }

        fn secrets(&self) -> Vec<String> {
            let vended = self.0.vended().into_iter();
            vended
                .flat_map(|v| [v.access_key_id, v.secret_access_key, v.session_token])
                .chain(Self::OWN_SECRETS.iter().map(|s| (*s).to_owned()))
                .collect()
        }
    };
}

/// The [`RealServerSwitches`] items the Unity and Delta Sharing fixtures answer alike.
macro_rules! two_level_switches {
    () => {
        const CHILD_LIST_PATH: &'static str = "/schemas";

        fn add_child(&self, top: &UpstreamNamespace, name: &str) -> UpstreamNamespace {
            self.0.add_schema(top.levels()[0].as_str(), name);
            self.child(top, name)
        }

        fn set_duplicate_listings(&self, on: bool) {
            self.0.set_duplicate_listings(on);
        }

        fn set_missing_parent_as_empty(&self, on: bool) {
            self.0.set_missing_parent_as_empty(on);
        }

        fn drop_but_keep_listed(&self, namespace: &UpstreamNamespace, name: &str) {
            let (top, schema) = levels(namespace);
            self.0.drop_but_keep_listed(top, schema, name);
        }

        fn set_expiration_as_string(&self, on: bool) {
            self.0.set_expiration_as_string(on);
        }

        fn first_vended_expiry_ms(&self) -> i64 {
            self.0.vended()[0].expiration_time_ms
        }
    };
}

// ---- Iceberg REST -------------------------------------------------------------------------

pub struct IcebergRest(IcebergFixture);

impl IcebergRest {
    async fn connect(
        &self,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Box<dyn CatalogClient> {
        let config = CatalogConnectionConfig::new(self.0.uri()).with_property("warehouse", "demo");
        let c = IcebergRestProvider
            .connect(&config, auth, credentials, options)
            .expect("connect");
        c.capabilities().await.expect("the config endpoint answers");
        c
    }
}

impl Contract for IcebergRest {
    const LIST_PATH: &'static str = "/v1/wh/namespaces";
    const LOAD_PATH: &'static str = "/namespaces/hr/tables/people";
    const PAGE_SIZE_PARAM: &'static str = "pageSize";
    const PAGE_TOKEN_PARAM: &'static str = "pageToken";
    // An empty token asks a paginating server to paginate.
    const FIRST_PAGE_TOKEN: Option<&'static str> = Some("");

    async fn start() -> Self {
        Self(IcebergFixture::start_with_sample().await)
    }

    async fn client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient> {
        let token = ResolvedCatalogCredentials::Token("unused".into());
        self.connect(&CatalogAuthentication::Bearer, token, &options)
            .await
    }

    fn sample(&self) -> (UpstreamNamespace, &'static str) {
        (ns(&["hr"]), "people")
    }

    fn add_namespace(&self, name: &str) -> UpstreamNamespace {
        self.0.add_namespace(&[name]);
        ns(&[name])
    }

    fn add_table(&self, namespace: &UpstreamNamespace, name: &str) {
        let levels: Vec<&str> = namespace.levels().iter().map(String::as_str).collect();
        self.0.add_table(&levels, name);
    }

    fn set_vend_lifetime(&self, now: SystemTime, lifetime: Duration) {
        // The fixture vends an absolute expiry.
        self.0.set_vended_expiry_ms(Some(epoch_ms(now + lifetime)));
    }

    fn vend_expired(&self) {
        self.0
            .set_vended_expiry_ms(Some(epoch_ms(SystemTime::now()) - 1000));
    }

    fn vend_count(&self) -> usize {
        usize::try_from(self.0.vend_count()).unwrap()
    }

    fn secrets(&self) -> Vec<String> {
        // The fixture's vended secrets all start so.
        ["secret-", "session-", iceberg::DEFAULT_CLIENT_SECRET]
            .map(str::to_owned)
            .to_vec()
    }

    fn missing_namespace(&self) -> UpstreamNamespace {
        ns(&["nope"])
    }

    fn missing_top(&self) -> UpstreamNamespace {
        ns(&["nope"])
    }

    fn inject_status(&self, status: u16, times: Option<usize>, path: &str) {
        let fault = IcebergFault::Status(status);
        let rule = match times {
            Some(n) => IcebergFaultRule::times(fault, n),
            None => IcebergFaultRule::always(fault),
        };
        self.0.add_fault(rule.on_path(path));
    }

    fn inject_malformed(&self, path: &str) {
        self.0
            .add_fault(IcebergFaultRule::once(IcebergFault::MalformedJson).on_path(path));
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.0.log().entries()
    }

    fn conditions(&self) -> &Conditions {
        self.0.conditions()
    }

    fn log(&self) -> RequestLog {
        self.0.log().clone()
    }
}

impl OAuthContract for IcebergRest {
    const TOKEN_PATH: &'static str = iceberg::TOKEN_PATH;
    async fn oauth_client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient> {
        self.0.set_auth(FixtureAuth::OAuth);
        let auth = CatalogAuthentication::OauthClientCredentials {
            token_uri: self.0.token_url(),
            client_id: iceberg::DEFAULT_CLIENT_ID.to_owned(),
            scopes: vec!["catalog".to_owned(), "read".to_owned()],
        };
        let secret =
            ResolvedCatalogCredentials::ClientSecret(iceberg::DEFAULT_CLIENT_SECRET.into());
        self.connect(&auth, secret, &options).await
    }

    fn set_token_lifetime_secs(&self, secs: u64) {
        self.0.set_token_lifetime_secs(Some(secs));
    }

    fn token_requests(&self) -> usize {
        self.0.token_requests()
    }

    fn expire_issued_tokens(&self) {
        self.0.expire_issued_tokens();
    }

    fn refuse_every_token(&self) {
        self.0
            .add_fault(IcebergFaultRule::always(IcebergFault::Unauthorized).on_path("/v1/wh/"));
    }
}

// ---- Unity Catalog ------------------------------------------------------------------------

pub struct Unity(UnityFixture);

impl Unity {
    const OWN_SECRETS: &[&str] = &[DEFAULT_BEARER_TOKEN, DEFAULT_CLIENT_SECRET];
}

impl Contract for Unity {
    const LIST_PATH: &'static str = "/catalogs";
    const LOAD_PATH: &'static str = "/tables/main.default.orders";
    const PAGE_SIZE_PARAM: &'static str = "max_results";
    const PAGE_TOKEN_PARAM: &'static str = "page_token";
    two_level_contract!();

    async fn start() -> Self {
        Self(UnityFixture::start_with_sample().await)
    }

    async fn client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient> {
        UnityProvider
            .connect(
                &CatalogConnectionConfig::new(self.0.endpoint()),
                &CatalogAuthentication::Bearer,
                ResolvedCatalogCredentials::Token(DEFAULT_BEARER_TOKEN.into()),
                &options,
            )
            .expect("connect")
    }

    fn sample(&self) -> (UpstreamNamespace, &'static str) {
        (ns(&["main", "default"]), "orders")
    }

    fn add_namespace(&self, name: &str) -> UpstreamNamespace {
        self.0.add_schema("main", name);
        ns(&["main", name])
    }

    fn add_table(&self, namespace: &UpstreamNamespace, name: &str) {
        let (catalog, schema) = levels(namespace);
        let location = format!("s3://bucket/{catalog}/{name}");
        self.0
            .add_table(catalog, schema, UnityTable::delta(name, &location));
    }

    fn missing_namespace(&self) -> UpstreamNamespace {
        ns(&["nocatalog", "x"])
    }

    fn missing_top(&self) -> UpstreamNamespace {
        ns(&["nocatalog"])
    }
}

impl OAuthContract for Unity {
    const TOKEN_PATH: &'static str = flotilla_testkit::unity_fixture::TOKEN_PATH;
    async fn oauth_client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient> {
        UnityProvider
            .connect(
                &CatalogConnectionConfig::new(self.0.base_url()),
                &CatalogAuthentication::OauthClientCredentials {
                    token_uri: self.0.token_url(),
                    client_id: DEFAULT_CLIENT_ID.into(),
                    scopes: vec!["catalog.read".into()],
                },
                ResolvedCatalogCredentials::ClientSecret(DEFAULT_CLIENT_SECRET.into()),
                &options,
            )
            .expect("connect")
    }

    fn set_token_lifetime_secs(&self, secs: u64) {
        self.0.set_token_lifetime_secs(i64::try_from(secs).unwrap());
    }

    fn token_requests(&self) -> usize {
        self.0.token_requests()
    }

    fn expire_issued_tokens(&self) {
        self.0.expire_issued_tokens();
    }

    fn refuse_every_token(&self) {
        self.0
            .inject(FaultRule::always(Fault::Unauthorized).on_path(API_PREFIX));
    }

    fn assert_renewal_evidence(&self) {
        let token_req = &self.0.requests_to("/oauth/token")[0];
        assert_eq!(token_req.header("authorization"), Some("Basic ***"));
        assert_eq!(
            self.0.presented_token_ordinals(),
            vec![Some(1), Some(1), Some(2)]
        );
    }
}

impl RealServerSwitches for Unity {
    const GONE_SHOWN: &'static str = "main.gone";
    two_level_switches!();
}

// ---- Delta Sharing ------------------------------------------------------------------------

pub struct DeltaSharing(DeltaSharingFixture);

impl DeltaSharing {
    const OWN_SECRETS: &[&str] = &[DEFAULT_RECIPIENT_TOKEN];
}

impl Contract for DeltaSharing {
    const LIST_PATH: &'static str = "/shares";
    const LOAD_PATH: &'static str = "/metadata";
    const PAGE_SIZE_PARAM: &'static str = "maxResults";
    const PAGE_TOKEN_PARAM: &'static str = "pageToken";
    two_level_contract!();

    async fn start() -> Self {
        Self(DeltaSharingFixture::start_with_sample().await)
    }

    async fn client_with(&self, options: ConnectOptions) -> Box<dyn CatalogClient> {
        DeltaSharingProvider
            .connect(
                &CatalogConnectionConfig::new(self.0.base_url()),
                &CatalogAuthentication::Bearer,
                ResolvedCatalogCredentials::Token(DEFAULT_RECIPIENT_TOKEN.into()),
                &options,
            )
            .expect("connect")
    }

    fn sample(&self) -> (UpstreamNamespace, &'static str) {
        (ns(&["sales", "retail"]), "orders")
    }

    fn add_namespace(&self, name: &str) -> UpstreamNamespace {
        self.0.add_schema("sales", name);
        ns(&["sales", name])
    }

    fn add_table(&self, namespace: &UpstreamNamespace, name: &str) {
        let (share, schema) = levels(namespace);
        let location = format!("s3://b/{name}");
        self.0
            .add_table(share, schema, SharingTable::new(name, &location));
    }

    fn missing_namespace(&self) -> UpstreamNamespace {
        ns(&["noshare", "x"])
    }

    fn missing_top(&self) -> UpstreamNamespace {
        ns(&["noshare"])
    }
}

impl RealServerSwitches for DeltaSharing {
    const GONE_SHOWN: &'static str = "gone";
    two_level_switches!();
}
