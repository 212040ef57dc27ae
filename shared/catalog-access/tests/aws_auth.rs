//! AWS authentication of the Iceberg REST provider: static access keys (with and without a
//! session token), STS `AssumeRole` with the deployment's identity (moto's STS, reached
//! through the standard `AWS_ENDPOINT_URL_STS`), and the ambient chain. Every signature is
//! checked by the fixture's independent SigV4 verifier, which also learns the sessions
//! moto's STS issued; renewal is driven by an injected clock.

use std::sync::Arc;
use std::time::Duration;

use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::iceberg_rest::IcebergRestProvider;
use flotilla_catalog_access::sigv4::{
    AmbientAwsCredentials, AssumeRoleParams, AssumedRoleCredentials, AwsCredentialHandle,
    AwsDeployment, is_sts_refusal,
};
use flotilla_catalog_access::{
    CatalogAccessError, CatalogAuthentication, CatalogClient, CatalogClientProvider,
    CatalogConnectionConfig, ConnectOptions, ResolvedCatalogCredentials, UpstreamNamespace,
};
use flotilla_domain::clock::ManualClock;
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use flotilla_testkit::moto;

/// A manual clock starting now, shared with the client under test.
fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::starting_now())
}

const REGION: &str = "us-east-1";
const SERVICE: &str = "glue";

fn options(clock: Arc<ManualClock>) -> ConnectOptions {
    ConnectOptions {
        http: HttpPolicy::local(),
        clock,
    }
}

fn glue() -> CatalogAuthentication {
    CatalogAuthentication::AwsSigV4 {
        region: REGION.to_owned(),
        signing_name: SERVICE.to_owned(),
    }
}

async fn fixture() -> IcebergFixture {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::SigV4 {
        region: REGION.to_owned(),
        service: SERVICE.to_owned(),
    });
    fx
}

fn connect(
    fx: &IcebergFixture,
    creds: ResolvedCatalogCredentials,
    clock: Arc<ManualClock>,
) -> Box<dyn CatalogClient> {
    let config = CatalogConnectionConfig::new(fx.uri());
    IcebergRestProvider
        .connect(&config, &glue(), creds, &options(clock))
        .expect("connect")
}

fn keys(id: &str, secret: &str, token: Option<&str>) -> ResolvedCatalogCredentials {
    ResolvedCatalogCredentials::AwsAccessKeys {
        access_key_id: id.into(),
        secret_access_key: secret.into(),
        session_token: token.map(Into::into),
    }
}

fn is_refusal(e: &CatalogAccessError) -> bool {
    matches!(
        e,
        CatalogAccessError::Authentication {
            status: Some(403),
            ..
        }
    )
}

#[tokio::test]
async fn access_keys_sign_and_a_wrong_key_is_rejected() {
    let fx = fixture().await;
    fx.set_sigv4_keys("AKIDSTATIC", "static/secret");
    let c = connect(
        &fx,
        keys("AKIDSTATIC", "static/secret", None),
        manual_clock(),
    );
    c.list_namespaces(None, None, None).await.unwrap();
    c.load_table(&UpstreamNamespace::new(["sales"]), "orders", None)
        .await
        .unwrap();
    assert!(fx.sigv4_verified() >= 3);
    assert!(fx.sigv4_keys_used().iter().all(|k| k == "AKIDSTATIC"));

    let before = fx.sigv4_verified();
    for wrong in [
        keys("AKIDSTATIC", "not/the/secret", None),
        keys("AKIDOTHER", "static/secret", None),
        // A session token the key does not have.
        keys("AKIDSTATIC", "static/secret", Some("stray-token")),
    ] {
        let c = connect(&fx, wrong, manual_clock());
        let e = c.list_namespaces(None, None, None).await.unwrap_err();
        assert!(is_refusal(&e), "{e:?}");
    }
    assert_eq!(fx.sigv4_verified(), before, "nothing refused was verified");
}

#[tokio::test]
async fn temporary_access_keys_sign_their_session_token() {
    let fx = fixture().await;
    fx.add_sigv4_key("ASIATEMP", "temp/secret", Some("the-session-token"));
    let c = connect(
        &fx,
        keys("ASIATEMP", "temp/secret", Some("the-session-token")),
        manual_clock(),
    );
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(
        fx.sigv4_keys_used().last().map(String::as_str),
        Some("ASIATEMP")
    );
    // Without the token, or with another one, the temporary key is refused.
    for token in [None, Some("another-token")] {
        let c = connect(&fx, keys("ASIATEMP", "temp/secret", token), manual_clock());
        let e = c.list_namespaces(None, None, None).await.unwrap_err();
        assert!(is_refusal(&e), "{e:?}");
    }
}

fn role_params(role: &str) -> AssumeRoleParams {
    AssumeRoleParams {
        role_arn: format!("arn:aws:iam::123456789012:role/{role}"),
        external_id: Some("ext-42".to_owned()),
        session_name: "flotilla-test".to_owned(),
        duration_secs: Some(900),
        fallback_region: REGION.to_owned(),
    }
}

/// The deployment's configuration exactly as a deployment loads it: the standard chain,
/// with STS at `AWS_ENDPOINT_URL_STS` (moto).
fn standard_deployment() -> Arc<AwsDeployment> {
    moto::sts_endpoint();
    Arc::new(AwsDeployment::from_environment())
}

#[tokio::test]
async fn assume_role_signs_with_the_session_and_renews_before_expiry() {
    let sts = moto::sts_endpoint();
    let fx = fixture().await;
    fx.set_sigv4_keys("AKIDNOTUSED", "x");
    fx.set_sigv4_sts_lookup(Some(&sts));
    let clock = manual_clock();
    let source = Arc::new(
        AssumedRoleCredentials::new(standard_deployment(), role_params("glue-reader")).unwrap(),
    );
    let c = connect(
        &fx,
        ResolvedCatalogCredentials::AwsSource(AwsCredentialHandle(source.clone())),
        clock.clone(),
    );
    for _ in 0..3 {
        c.list_namespaces(None, None, None).await.unwrap();
    }
    assert_eq!(source.sts_calls(), 1, "one session serves every call");
    let used = fx.sigv4_keys_used();
    let first = used[0].clone();
    assert!(first.starts_with("ASIA"), "{first}");
    assert!(used.iter().all(|k| *k == first));

    // 900 s sessions renew 300 s ahead of expiry: not yet at +590 s, but at +610 s.
    clock.advance(Duration::from_secs(590));
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(source.sts_calls(), 1);
    clock.advance(Duration::from_secs(20));
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(source.sts_calls(), 2, "renewed ahead of expiry");
    let last = fx.sigv4_keys_used().last().cloned().unwrap();
    assert!(
        last.starts_with("ASIA") && last != first,
        "{last} vs {first}"
    );
}

#[tokio::test]
async fn a_refused_session_is_renewed_once_and_a_new_source_never_reuses_the_old_one() {
    let sts = moto::sts_endpoint();
    let fx = fixture().await;
    fx.set_sigv4_sts_lookup(Some(&sts));
    let deployment = standard_deployment();
    let old = Arc::new(AssumedRoleCredentials::new(deployment.clone(), role_params("r1")).unwrap());
    let c = connect(
        &fx,
        ResolvedCatalogCredentials::AwsSource(AwsCredentialHandle(old.clone())),
        manual_clock(),
    );
    c.list_namespaces(None, None, None).await.unwrap();
    let old_key = fx.sigv4_keys_used().last().cloned().unwrap();
    // The upstream stops accepting the session (revoked): one renewal, one retry, success.
    fx.revoke_sigv4_key(&old_key);
    c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(old.sts_calls(), 2);
    let renewed = fx.sigv4_keys_used().last().cloned().unwrap();
    assert_ne!(renewed, old_key);

    // A rotation builds a new client with a new source: its calls use a session of its own.
    let new = Arc::new(AssumedRoleCredentials::new(deployment, role_params("r2")).unwrap());
    let c2 = connect(
        &fx,
        ResolvedCatalogCredentials::AwsSource(AwsCredentialHandle(new.clone())),
        manual_clock(),
    );
    let seen = fx.sigv4_keys_used().len();
    c2.list_namespaces(None, None, None).await.unwrap();
    let after: Vec<String> = fx.sigv4_keys_used()[seen..].to_vec();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|k| *k != old_key && *k != renewed),
        "{after:?}"
    );
}

#[tokio::test]
async fn ambient_signs_with_the_deployment_chain() {
    let fx = fixture().await;
    fx.set_sigv4_keys("AKIDAMBIENT", "ambient/secret");
    let sdk = aws_config::SdkConfig::builder()
        .region(aws_config::Region::new(REGION))
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(
                    "AKIDAMBIENT",
                    "ambient/secret",
                    None,
                    None,
                    "test",
                ),
            ),
        )
        .build();
    let deployment = Arc::new(AwsDeployment::from_config(sdk));
    let c = connect(
        &fx,
        ResolvedCatalogCredentials::AwsSource(AwsCredentialHandle(Arc::new(
            AmbientAwsCredentials::new(deployment),
        ))),
        manual_clock(),
    );
    c.list_namespaces(None, None, None).await.unwrap();
    let used = fx.sigv4_keys_used();
    assert!(
        !used.is_empty() && used.iter().all(|k| k == "AKIDAMBIENT"),
        "{used:?}"
    );
}

#[tokio::test]
async fn an_sts_failure_is_an_authentication_error_naming_sts() {
    let fx = fixture().await;
    // A role name STS refuses as invalid input (session name too long for STS).
    let mut params = role_params("r");
    params.session_name = "s".repeat(65);
    let source = AssumedRoleCredentials::new(standard_deployment(), params).unwrap();
    let c = connect(
        &fx,
        ResolvedCatalogCredentials::AwsSource(AwsCredentialHandle(Arc::new(source))),
        manual_clock(),
    );
    let e = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(is_sts_refusal(&e), "{e:?}");
    assert_eq!(fx.log().filter(|r| r.path.starts_with("/v1/")).len(), 0);
}
