//! AWS authentication of integrations end to end and reuse of upstream sessions, through
//! the real router: AWS_ACCESS_KEYS, AWS_ASSUME_ROLE (STS on moto, reached through the
//! standard `AWS_ENDPOINT_URL_STS`), AWS_SIGV4 AMBIENT, the `rest.signing-*` properties, a
//! denied `AssumeRole` (moto with IAM enforcement), the process-wide session cache, and
//! rotation past leftover credential generations.

mod support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use flotilla_catalog_access::sigv4::AwsDeployment;
use flotilla_domain::keys;
use flotilla_domain::model::CredentialGenerationRecord;
use flotilla_metastore::{Key, Op, Transaction};
use flotilla_secrets::local::{LocalEncryptedStore, SecretKey};
use flotilla_testkit::iceberg_fixture::{self, FixtureAuth, IcebergFixture};
use flotilla_testkit::moto::{self, PrivateMoto};
use serde_json::{Value, json};
use support::{ACME, Harness, Resp};

const A: &str = "/v1/accounts/acme";

struct Env {
    h: Harness,
    _secrets: tempfile::TempDir,
}

impl Env {
    async fn new(aws: Option<Arc<AwsDeployment>>) -> Self {
        let mut h = Harness::redb();
        let secrets = tempfile::tempdir().expect("tempdir");
        let store =
            LocalEncryptedStore::with_key(secrets.path().join("secrets"), &SecretKey::generate())
                .expect("local credential store");
        let mut state = h.state.clone().with_credentials(Arc::new(store));
        state.config.allow_insecure_upstreams = true;
        if let Some(aws) = aws {
            state = state.with_aws(aws);
        }
        h.router = flotilla_core::router(state.clone());
        h.state = state;
        h.account("acme").await;
        Self {
            h,
            _secrets: secrets,
        }
    }

    async fn create(&self, body: Value) -> Resp {
        self.h.post(&format!("{A}/integrations"), ACME, body).await
    }

    async fn integration(&self, body: Value) -> String {
        let r = self.create(body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }

    async fn namespaces(&self, id: &str) -> Resp {
        self.h
            .get(&format!("{A}/integrations/{id}/upstream/namespaces"), ACME)
            .await
    }

    async fn validate(&self, id: &str) -> Resp {
        let r = self
            .h
            .call(
                Method::POST,
                &format!("{A}/integrations/{id}/validate"),
                Some(ACME),
                None,
                &[],
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r
    }

    async fn rotate(&self, id: &str, body: Value) -> Resp {
        let etag = self
            .h
            .get(&format!("{A}/integrations/{id}"), ACME)
            .await
            .etag();
        self.h
            .call(
                Method::PUT,
                &format!("{A}/integrations/{id}/authentication"),
                Some(ACME),
                Some(body),
                &[("if-match", etag.as_str())],
            )
            .await
    }
}

fn check<'a>(r: &'a Resp, kind: &str) -> &'a Value {
    r.body["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} check in {:?}", r.body))
}

async fn sigv4_fixture(service: &str) -> IcebergFixture {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::SigV4 {
        region: "us-east-1".to_owned(),
        service: service.to_owned(),
    });
    fx
}

fn glue_props() -> Value {
    json!({"rest.signing-name": "glue", "rest.signing-region": "us-east-1"})
}

fn role_body(fx: &IcebergFixture, name: &str, role: &str) -> Value {
    json!({"display_name": name, "type": "ICEBERG_REST", "uri": fx.uri(),
           "properties": glue_props(),
           "authentication": {"type": "AWS_ASSUME_ROLE",
                              "role_arn": format!("arn:aws:iam::123456789012:role/{role}"),
                              "external_id": "ext-0001", "duration_secs": 900}})
}

// ---- access keys, ambient ---------------------------------------------------------------

#[tokio::test]
async fn access_keys_sign_with_the_signing_properties_and_a_wrong_key_fails_its_own_entry() {
    let env = Env::new(None).await;
    let fx = sigv4_fixture("glue").await;
    fx.set_sigv4_keys("AKIDKEYS", "keys/secret");
    fx.add_sigv4_key("ASIAKEYS", "temp/secret", Some("temp-token"));
    let body = |name: &str, id: &str, creds: Value| {
        json!({"display_name": name, "type": "ICEBERG_REST", "uri": fx.uri(),
               "properties": glue_props(),
               "authentication": {"type": "AWS_ACCESS_KEYS", "access_key_id": id},
               "credentials": creds})
    };
    let good = env
        .integration(body(
            "k1",
            "AKIDKEYS",
            json!({"secret_access_key": "keys/secret"}),
        ))
        .await;
    let r = env.namespaces(&good).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(fx.sigv4_keys_used().iter().all(|k| k == "AKIDKEYS"));
    let temp = env
        .integration(body(
            "k2",
            "ASIAKEYS",
            json!({"secret_access_key": "temp/secret", "session_token": "temp-token"}),
        ))
        .await;
    assert_eq!(env.namespaces(&temp).await.status, StatusCode::OK);
    assert_eq!(
        fx.sigv4_keys_used().last().map(String::as_str),
        Some("ASIAKEYS")
    );

    let bad = env
        .integration(body(
            "k3",
            "AKIDKEYS",
            json!({"secret_access_key": "wrong"}),
        ))
        .await;
    let r = env.validate(&bad).await;
    assert_eq!(r.body["valid"], false);
    let c = check(&r, "CATALOG_AUTHENTICATION");
    assert_eq!(c["status"], "FAILED", "{:?}", r.body);
    assert_eq!(c["issue"], "AWS_AUTHENTICATION_FAILED", "{:?}", r.body);
    let text = r.body.to_string();
    assert!(
        !text.contains("keys/secret") && !text.contains("wrong\""),
        "{text}"
    );
}

#[tokio::test]
async fn ambient_is_an_explicit_choice_signed_by_the_deployment_chain() {
    let sdk = aws_config::SdkConfig::builder()
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(
                    "AKIDDEPLOY",
                    "deploy/secret",
                    None,
                    None,
                    "test",
                ),
            ),
        )
        .build();
    let env = Env::new(Some(Arc::new(AwsDeployment::from_config(sdk)))).await;
    let fx = sigv4_fixture("execute-api").await;
    fx.set_sigv4_keys("AKIDDEPLOY", "deploy/secret");
    let id = env
        .integration(
            json!({"display_name": "amb", "type": "ICEBERG_REST", "uri": fx.uri(),
            "authentication": {"type": "AWS_SIGV4", "region": "us-east-1",
                               "credential_source": "AMBIENT"}}),
        )
        .await;
    let r = env.namespaces(&id).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(fx.sigv4_keys_used().iter().all(|k| k == "AKIDDEPLOY"));
}

#[tokio::test]
async fn signing_properties_are_validated_at_create() {
    let env = Env::new(None).await;
    let keys = json!({"type": "AWS_ACCESS_KEYS", "access_key_id": "AKID", "region": "us-east-1"});
    let sak = json!({"secret_access_key": "s"});
    for (props, auth, creds, needle) in [
        (
            json!({"rest.signing-name": "Glue Service"}),
            &keys,
            &sak,
            "rest.signing-name",
        ),
        (
            json!({"rest.signing-region": "us_east_1!"}),
            &keys,
            &sak,
            "rest.signing-region",
        ),
        (
            json!({"rest.signing-region": "eu-west-1"}),
            &keys,
            &sak,
            "contradicts",
        ),
        (
            json!({"rest.signing-name": "glue"}),
            &json!({"type": "BEARER"}),
            &json!({"token": "t"}),
            "AWS authentication only",
        ),
        (
            json!({}),
            &json!({"type": "AWS_ASSUME_ROLE", "role_arn": "arn:aws:iam::1:role/r", "duration_secs": 60}),
            &json!({}),
            "duration_secs",
        ),
        (
            json!({}),
            &json!({"type": "AWS_ASSUME_ROLE", "role_arn": "arn:aws:iam::1:role/r", "session_name": "no spaces"}),
            &json!({}),
            "session_name",
        ),
    ] {
        let r = env
            .create(json!({"display_name": "x", "type": "ICEBERG_REST",
                           "uri": "https://glue.us-east-1.amazonaws.com/iceberg",
                           "properties": props, "authentication": auth, "credentials": creds}))
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{props} {auth}: {:?}",
            r.body
        );
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{needle}: {msg}");
    }
    let r = env
        .create(json!({"display_name": "ok", "type": "ICEBERG_REST",
                       "uri": "https://s3tables.us-east-1.amazonaws.com/iceberg",
                       "properties": {"warehouse": "arn:aws:s3tables:us-east-1:123456789012:bucket/b",
                                      "rest.signing-name": "s3tables", "rest.signing-region": "us-east-1"},
                       "authentication": {"type": "AWS_ASSUME_ROLE", "role_arn": "arn:aws:iam::123456789012:role/r"}}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

// ---- assume role ------------------------------------------------------------------------

#[tokio::test]
async fn assume_role_signs_with_its_session_and_a_rotation_stops_using_it() {
    let sts = moto::sts_endpoint();
    // The deployment's identity from the standard configuration: STS is moto.
    let env = Env::new(None).await;
    let fx = sigv4_fixture("glue").await;
    fx.set_sigv4_sts_lookup(Some(&sts));
    let id = env.integration(role_body(&fx, "role", "glue-reader")).await;
    for _ in 0..3 {
        let r = env.namespaces(&id).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    let r = env.validate(&id).await;
    assert_eq!(
        check(&r, "CATALOG_AUTHENTICATION")["status"],
        "PASSED",
        "{:?}",
        r.body
    );
    let used = fx.sigv4_keys_used();
    let old = used[0].clone();
    assert!(old.starts_with("ASIA"), "{old}");
    assert!(
        used.iter().all(|k| *k == old),
        "one session for every call: {used:?}"
    );

    // Rotation (another external id): a new session; the old one is never used again.
    let r = env
        .rotate(
            &id,
            json!({"authentication": {"type": "AWS_ASSUME_ROLE",
                    "role_arn": "arn:aws:iam::123456789012:role/glue-reader",
                    "external_id": "ext-0002"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let seen = fx.sigv4_keys_used().len();
    for _ in 0..2 {
        assert_eq!(env.namespaces(&id).await.status, StatusCode::OK);
    }
    let after = fx.sigv4_keys_used()[seen..].to_vec();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|k| *k != old && k.starts_with("ASIA")),
        "{after:?}"
    );
    // Nothing of the session reached an answer.
    let listing = env.namespaces(&id).await.body.to_string();
    assert!(
        !listing.contains(&old) && !listing.contains("ASIA"),
        "{listing}"
    );
}

/// A deployment identity that may assume `allowed` only: a private moto server with IAM
/// enforced (moto's STS honours no trust policy, but it does enforce the caller's IAM
/// policy once enforcement is on).
async fn restricted_deployment(moto: &PrivateMoto) -> AwsDeployment {
    // Three unauthenticated calls to set up the user, then IAM applies to everything.
    moto.enforce_iam_after(3).await;
    let iam = |params: Vec<(&'static str, String)>| {
        let endpoint = moto.endpoint().to_owned();
        async move {
            let mut form = vec![("Version", "2010-05-08".to_owned())];
            form.extend(params);
            let client = reqwest::Client::new();
            let mut req = client.post(&endpoint).form(&form).build().unwrap();
            flotilla_catalog_access::sigv4::SigV4Signer::new(
                "us-east-1",
                "iam",
                "test".into(),
                "test".into(),
                None,
            )
            .sign(&mut req, std::time::SystemTime::now())
            .await
            .unwrap();
            let r = client.execute(req).await.expect("iam call");
            assert!(r.status().is_success(), "{}", r.status());
            r.text().await.unwrap()
        }
    };
    iam(vec![
        ("Action", "CreateUser".into()),
        ("UserName", "deployer".into()),
    ])
    .await;
    let key = iam(vec![
        ("Action", "CreateAccessKey".into()),
        ("UserName", "deployer".into()),
    ])
    .await;
    let between = |open: &str, close: &str| {
        let start = key.find(open).expect(open) + open.len();
        key[start..][..key[start..].find(close).expect(close)].to_owned()
    };
    let (id, secret) = (
        between("<AccessKeyId>", "</AccessKeyId>"),
        between("<SecretAccessKey>", "</SecretAccessKey>"),
    );
    let policy = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Action": "sts:AssumeRole", "Resource": "arn:aws:iam::123456789012:role/allowed"}]});
    iam(vec![
        ("Action", "PutUserPolicy".into()),
        ("UserName", "deployer".into()),
        ("PolicyName", "assume-allowed".into()),
        ("PolicyDocument", policy.to_string()),
    ])
    .await;
    let sdk = aws_config::SdkConfig::builder()
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(moto.endpoint())
        .behavior_version(aws_config::BehaviorVersion::latest())
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(id, secret, None, None, "test"),
            ),
        )
        .build();
    AwsDeployment::from_config(sdk)
}

#[tokio::test]
async fn a_denied_assume_role_fails_validation_with_its_own_entry_and_publishes_nothing() {
    let moto = PrivateMoto::start().await;
    let deployment = Arc::new(restricted_deployment(&moto).await);
    let env = Env::new(Some(deployment)).await;
    let fx = sigv4_fixture("glue").await;
    fx.set_sigv4_sts_lookup(Some(moto.endpoint()));

    // The role the deployment may assume works ...
    let allowed = env.integration(role_body(&fx, "allowed", "allowed")).await;
    let r = env.namespaces(&allowed).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    // ... one it may not is AccessDenied, reported as its own entry with STS's message.
    let denied = env.integration(role_body(&fx, "denied", "denied")).await;
    let before = fx.log().filter(|r| r.path.starts_with("/v1/")).len();
    let r = env.validate(&denied).await;
    assert_eq!(r.body["valid"], false);
    let c = check(&r, "CATALOG_AUTHENTICATION");
    assert_eq!(c["status"], "FAILED", "{:?}", r.body);
    assert_eq!(c["issue"], "AWS_AUTHENTICATION_FAILED");
    let summary = c["summary"].as_str().unwrap();
    assert!(summary.contains("AccessDenied"), "{summary}");
    assert!(summary.chars().count() <= 401);
    assert_eq!(check(&r, "CATALOG_CONNECTION")["status"], "NOT_RUN");

    // A reconciliation of an overlay on it publishes nothing.
    let catalog = env.h.catalog("acme", ACME, "analytics").await;
    let overlay = env.h.overlay("acme", ACME, "imp", &denied, &catalog).await;
    let r = env
        .h
        .call(
            Method::POST,
            &format!("{A}/overlays/{overlay}/reconcile"),
            Some(ACME),
            None,
            &[],
        )
        .await;
    assert!(!r.status.is_success(), "{:?}", r.body);
    assert!(!r.body.to_string().contains("secret"), "{:?}", r.body);
    for path in [&["sales"][..], &["hr"][..]] {
        assert!(!support::has_namespace(env.h.state.store.as_ref(), &catalog, path).await);
    }
    assert_eq!(
        fx.log().filter(|r| r.path.starts_with("/v1/")).len(),
        before,
        "the catalog was never asked with a denied identity"
    );
}

// ---- session reuse ------------------------------------------------------------------------

#[tokio::test]
async fn upstream_sessions_are_reused_and_dropped_on_rotation_uri_change_and_delete() {
    let env = Env::new(None).await;
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::OAuth);
    let body = json!({"display_name": "oauth", "type": "ICEBERG_REST", "uri": fx.uri(),
        "authentication": {"type": "OAUTH_CLIENT_CREDENTIALS",
                           "client_id": iceberg_fixture::DEFAULT_CLIENT_ID,
                           "token_uri": fx.token_url()},
        "credentials": {"client_secret": iceberg_fixture::DEFAULT_CLIENT_SECRET}});
    let id = env.integration(body).await;
    // Three API calls: list namespaces, list objects, validate -> one token.
    assert_eq!(env.namespaces(&id).await.status, StatusCode::OK);
    let r = env
        .h
        .get(
            &format!("{A}/integrations/{id}/upstream/objects?namespace=sales"),
            ACME,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    env.validate(&id).await;
    assert_eq!(fx.token_requests(), 1);
    assert_eq!(env.h.state.sessions.len(), 1);

    // An upstream 401 renews once.
    fx.expire_issued_tokens();
    assert_eq!(env.namespaces(&id).await.status, StatusCode::OK);
    assert_eq!(fx.token_requests(), 2);

    // Rotation: a new client and token.
    let r = env
        .rotate(
            &id,
            json!({"credentials": {"client_secret": iceberg_fixture::DEFAULT_CLIENT_SECRET}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(env.namespaces(&id).await.status, StatusCode::OK);
    assert_eq!(fx.token_requests(), 3);
    assert_eq!(env.namespaces(&id).await.status, StatusCode::OK);
    assert_eq!(fx.token_requests(), 3);

    // A URI change (same server, another spelling): a new client and token.
    let etag = env
        .h
        .get(&format!("{A}/integrations/{id}"), ACME)
        .await
        .etag();
    let r = env
        .h
        .call(
            Method::PATCH,
            &format!("{A}/integrations/{id}"),
            Some(ACME),
            Some(json!({"uri": format!("{}/", fx.uri())})),
            &[("if-match", etag.as_str())],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(env.namespaces(&id).await.status, StatusCode::OK);
    assert_eq!(fx.token_requests(), 4);

    // Delete drops it.
    let r = env.h.delete(&format!("{A}/integrations/{id}"), ACME).await;
    assert!(r.status.is_success(), "{:?}", r.body);
    assert_eq!(env.h.state.sessions.len(), 0);
}

// ---- credential generations ----------------------------------------------------------------

#[tokio::test]
async fn rotation_skips_past_any_number_of_leftover_generations() {
    let env = Env::new(None).await;
    let fx = IcebergFixture::start_with_sample().await;
    let id = env
        .integration(
            json!({"display_name": "b", "type": "ICEBERG_REST", "uri": fx.uri(),
            "authentication": {"type": "BEARER"}, "credentials": {"token": "t1"}}),
        )
        .await;
    // 150 leftovers awaiting the sweep, far more than one prepare could ever step over one
    // by one (the old fixed window was 64).
    let store = env.h.state.store.clone();
    for generation in 2..152 {
        let rec = CredentialGenerationRecord {
            integration_id: id.clone(),
            generation,
            state: "prepared".into(),
            created_ms: env.h.state.clock.now_ms(),
        };
        let flotilla_metastore::Key { pk, sk } =
            keys::credential_generation("acme", &id, generation);
        store
            .transact(Transaction::new().with(Op::create(
                Key::new(pk, sk),
                serde_json::to_vec(&rec).unwrap(),
            )))
            .await
            .unwrap();
    }
    let r = env
        .rotate(&id, json!({"credentials": {"token": "t2"}}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["credential_generation"], 152);
}

#[tokio::test]
async fn the_scheduler_sweeps_accounts_with_integrations_within_its_budget() {
    use flotilla_core::service::integrations::{SCHEDULED_SWEEP_MIN_AGE_MS, sweep_scheduled};
    use flotilla_secrets::{CredentialStore, SecretBytes, SecretRef};
    let (store, dir) = support::redb_store();
    let creds = support::Creds::new();
    let h = Harness::with_store(store, Some(dir), true).with_credentials(creds.dyn_store());
    let clock = h.clock.clone().expect("manual clock");
    for account in ["acme", "beta", "gamma"] {
        h.account(account).await;
    }
    let a = h.integration("acme", ACME, "a").await;
    let b = h.integration("beta", support::BETA, "b").await;
    // A stray secret no record explains (an interrupted sweep), in each account with an
    // integration, and a young leftover generation record with its secret in acme.
    let stray = |account: &str, id: &str, generation: u64| {
        SecretRef::new(account, id, generation).expect("ref")
    };
    let bytes = SecretBytes::new(br#"{"token":"stray"}"#.to_vec()).unwrap();
    for (account, id) in [("acme", &a), ("beta", &b)] {
        creds
            .store
            .inner()
            .put_if_absent(&stray(account, id, 9), &bytes)
            .await
            .unwrap();
    }
    let rec = CredentialGenerationRecord {
        integration_id: a.clone(),
        generation: 5,
        state: "prepared".into(),
        created_ms: h.state.clock.now_ms(),
    };
    let flotilla_metastore::Key { pk, sk } = keys::credential_generation("acme", &a, 5);
    h.state
        .store
        .transact(Transaction::new().with(Op::create(
            Key::new(pk, sk),
            serde_json::to_vec(&rec).unwrap(),
        )))
        .await
        .unwrap();
    creds
        .store
        .inner()
        .put_if_absent(&stray("acme", &a, 5), &bytes)
        .await
        .unwrap();

    // Budget one account per pass: acme, then beta, then gamma (holds nothing), then acme.
    let r = sweep_scheduled(&h.state, 1).await.unwrap();
    assert_eq!(
        (r.accounts_visited, r.accounts_swept, r.orphans_deleted),
        (1, 1, 1)
    );
    assert_eq!(
        creds.generations("acme", &a).await,
        vec![1, 5],
        "young leftover kept"
    );
    assert_eq!(
        creds.generations("beta", &b).await,
        vec![1, 9],
        "not yet visited"
    );
    let r = sweep_scheduled(&h.state, 1).await.unwrap();
    assert_eq!((r.accounts_swept, r.orphans_deleted), (1, 1));
    assert_eq!(creds.generations("beta", &b).await, vec![1]);
    let r = sweep_scheduled(&h.state, 1).await.unwrap();
    assert_eq!(
        (r.accounts_visited, r.accounts_swept),
        (1, 0),
        "gamma holds nothing"
    );
    // An hour later the leftover is old enough; the pass wrapped around to acme.
    clock.advance_ms(SCHEDULED_SWEEP_MIN_AGE_MS + 1);
    let r = sweep_scheduled(&h.state, 1).await.unwrap();
    assert_eq!((r.accounts_swept, r.generations_deleted), (1, 1));
    assert_eq!(
        creds.generations("acme", &a).await,
        vec![1],
        "only the referenced generation"
    );
    assert_eq!(creds.generations("beta", &b).await, vec![1]);
}
