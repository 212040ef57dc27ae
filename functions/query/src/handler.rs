//! The query handler, separate from `main` so tests call it on a local state. The state (and
//! with it the directory replica) is borrowed, so it outlives every invocation of a warm
//! container.

use flotilla_base::error::Error;
use flotilla_services::AppState;
use flotilla_services::acl::{Access, Action, Securable};
use flotilla_services::auth::Principal;
use flotilla_services::service::directory;
use serde::Deserialize;
use serde_json::Value;

/// The invocation payload.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryEvent {
    pub account_id: String,
    pub catalog_id: String,
    /// The principal the invoker reads for (an engine front end acting for a user): its
    /// roles' grants decide which entries it gets, through the same decision as `/v1`.
    /// Without it the invoker reads the whole directory.
    #[serde(default)]
    pub principal: Option<EventPrincipal>,
}

/// A named principal in a query event.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventPrincipal {
    pub name: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// A failed invocation: the API error code and message (5xx detail only in the log).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HandlerError(Error);

impl From<Error> for HandlerError {
    fn from(e: Error) -> Self {
        let _ = flotilla_http_status::to_parts(&e);
        HandlerError(e)
    }
}

impl HandlerError {
    pub fn api(&self) -> &Error {
        &self.0
    }
}

impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(e: HandlerError) -> Self {
        lambda_runtime::Diagnostic {
            error_type: e.0.kind.as_str().to_owned(),
            error_message: e.0.message.clone(),
        }
    }
}

/// One invocation as `main` runs it: [`handle`] in the invocation span, then the EMF flush.
pub async fn invoke(
    state: &AppState,
    telemetry: &flotilla_runtime::telemetry::LambdaTelemetry,
    meta: flotilla_runtime::telemetry::Invocation,
    event: QueryEvent,
) -> Result<Value, HandlerError> {
    telemetry.invocation(meta, handle(state, event)).await
}

pub async fn handle(state: &AppState, event: QueryEvent) -> Result<Value, HandlerError> {
    // IAM's invoke permission is this function's authorization: its invoker reads every
    // account's directory, as an operator does; the account rule still checks the id.
    let principal = match &event.principal {
        None => Principal::operator("lambda:query"),
        Some(p) => {
            flotilla_services::auth::validate_principal_name("principal name", &p.name)?;
            Principal::for_accounts("lambda:query", [event.account_id.clone()])
                .named(p.name.clone(), p.groups.clone())
        }
    };
    let scope = principal.authorize_account(&event.account_id)?;
    let access = Access::resolve(state.store.as_ref(), &state.acl, scope).await?;
    access.authorize(Action::Describe, &Securable::catalog(&event.catalog_id))?;
    Ok(directory::get(state, &access, &event.catalog_id).await?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flotilla_base::clock::SystemClock;
    use flotilla_base::error::ErrorKind;
    use flotilla_domain::names::NamespacePath;
    use flotilla_metastore::metrics::CountingMetastore;
    use flotilla_metastore::redb_store::RedbMetastore;
    use flotilla_runtime::aws::ClaimsOnly;
    use flotilla_services::service::{OnConflict, accounts};
    use flotilla_services::service::{catalogs, namespaces, relations};
    use flotilla_services::{AppState, Config};
    use serde_json::json;

    use super::*;

    struct Fixture {
        state: AppState,
        counters: Arc<flotilla_metastore::metrics::MetastoreCounters>,
        catalog: String,
        _dir: tempfile::TempDir,
    }

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("request")
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = CountingMetastore::new(
            RedbMetastore::open(dir.path().join("meta.redb")).expect("redb"),
        );
        let counters = store.counters();
        let state = AppState::new(
            Arc::new(store),
            Arc::new(SystemClock),
            Arc::new(ClaimsOnly),
            Config::default(),
        );
        accounts::create(&state, from(json!({"id": "acme"})), OnConflict::Error, None)
            .await
            .expect("account");
        let cat = catalogs::create(
            &state,
            "acme",
            from(json!({"display_name": "main"})),
            OnConflict::Error,
            None,
        )
        .await
        .expect("catalog");
        let catalog = cat.body["id"].as_str().expect("id").to_owned();
        namespaces::create(
            &state,
            "acme",
            &catalog,
            from(json!({"path": ["sales"]})),
            OnConflict::Error,
            None,
        )
        .await
        .expect("namespace");
        Fixture {
            state,
            counters,
            catalog,
            _dir: dir,
        }
    }

    async fn create_table(f: &Fixture, name: &str) {
        let body = json!({"name": name, "format": "ICEBERG", "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"}]}});
        let ns = NamespacePath::new(vec!["sales".into()]).expect("ns");
        relations::create_table(
            &f.state,
            "acme",
            &f.catalog,
            &ns,
            serde_json::from_value(body).expect("req"),
            OnConflict::Error,
            None,
        )
        .await
        .expect("table");
    }

    fn event(f: &Fixture) -> QueryEvent {
        let sample = include_str!("../../../events/query/directory.json");
        let mut e: QueryEvent = serde_json::from_str(sample).expect("sample event");
        e.catalog_id = f.catalog.clone();
        e
    }

    fn names(v: &Value) -> Vec<String> {
        v["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["name"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    #[tokio::test]
    async fn warm_invocations_reuse_the_replica_and_cost_one_point_read() {
        let f = fixture().await;
        create_table(&f, "orders").await;
        let first = handle(&f.state, event(&f)).await.expect("directory");
        assert_eq!(names(&first), ["orders"]);
        assert_eq!(first["health"]["mode"], "LEGACY_SCAN");
        assert_eq!(first["catalog_id"], f.catalog.as_str());

        flotilla_services::service::directory::finalize(&f.state, true, true)
            .await
            .expect("finalize");
        let second = handle(&f.state, event(&f)).await.expect("directory");
        assert_eq!(second["health"]["mode"], "AUTHORITATIVE");

        // Warm and unchanged: the catalog ownership read and the generation read, together
        // in one strong batch read (one round trip).
        let before = f.counters.snapshot();
        let third = handle(&f.state, event(&f)).await.expect("directory");
        let after = f.counters.snapshot();
        assert_eq!(third["entries"], second["entries"]);
        assert_eq!(
            (
                after.batch_get - before.batch_get,
                after.requests() - before.requests(),
                after.items_read - before.items_read
            ),
            (1, 1, 2)
        );

        create_table(&f, "customers").await;
        let fourth = handle(&f.state, event(&f)).await.expect("directory");
        assert_eq!(names(&fourth), ["customers", "orders"]);
        let text = f.state.render_metrics();
        assert!(
            text.contains("flotilla_directory_refresh_total{outcome=\"unchanged\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn missing_or_foreign_catalogs_are_not_found() {
        let f = fixture().await;
        let mut e = event(&f);
        e.catalog_id = "nosuchcatalog".into();
        let err = handle(&f.state, e).await.expect_err("missing");
        assert_eq!(err.api().kind, ErrorKind::NotFound);
        let mut e = event(&f);
        e.account_id = "beta".into();
        assert_eq!(
            handle(&f.state, e).await.expect_err("foreign").api().kind,
            ErrorKind::NotFound
        );
        let mut e = event(&f);
        e.account_id = "Not An Id".into();
        assert_eq!(
            handle(&f.state, e).await.expect_err("bad id").api().kind,
            ErrorKind::NotFound
        );
    }

    /// An event naming a principal answers what its grants let it read, through the same
    /// decision as `/v1`: nothing (as absent) without a grant, the granted namespace with one.
    #[tokio::test]
    async fn a_principal_in_the_event_reads_only_what_it_was_granted() {
        use flotilla_services::service::access_control::{grants, roles};
        let f = fixture().await;
        create_table(&f, "orders").await;
        let mut e = event(&f);
        e.principal = Some(EventPrincipal {
            name: "rita".into(),
            groups: vec!["bi".into()],
        });
        let err = handle(&f.state, e.clone()).await.expect_err("no grant");
        assert_eq!(err.api().kind, ErrorKind::NotFound);
        roles::create(
            &f.state,
            "acme",
            from(json!({"name": "bi"})),
            OnConflict::Error,
            None,
        )
        .await
        .expect("role");
        roles::add_member(&f.state, "acme", "bi", "group:bi")
            .await
            .expect("member");
        let admin = flotilla_services::acl::Access::unrestricted(
            Principal::for_accounts("t", ["acme".to_owned()]),
            "acme",
        );
        grants::create(
            &f.state,
            &admin,
            from(json!({"role": "bi", "privilege": "READ",
                "securable": {"type": "NAMESPACE", "catalog_id": f.catalog, "path": ["sales"]}})),
            OnConflict::Error,
            None,
        )
        .await
        .expect("grant");
        let ns = NamespacePath::new(vec!["hr".into()]).expect("ns");
        namespaces::create(
            &f.state,
            "acme",
            &f.catalog,
            from(json!({"path": ["hr"]})),
            OnConflict::Error,
            None,
        )
        .await
        .expect("namespace");
        let body = json!({"name": "salaries", "format": "ICEBERG", "schema": {"type": "struct", "fields": []}});
        relations::create_table(
            &f.state,
            "acme",
            &f.catalog,
            &ns,
            from(body),
            OnConflict::Error,
            None,
        )
        .await
        .expect("table");
        let got = handle(&f.state, e).await.expect("directory");
        assert_eq!(names(&got), ["orders"]);
        let all = handle(&f.state, event(&f)).await.expect("directory");
        assert_eq!(names(&all), ["salaries", "orders"]);
    }

    #[test]
    fn unknown_event_fields_are_refused() {
        assert!(
            serde_json::from_str::<QueryEvent>(r#"{"account_id": "a", "catalog_id": "c", "x": 1}"#)
                .is_err()
        );
    }
}
