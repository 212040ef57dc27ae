//! Federated reads: overlay tables served from their captured state (`docs/capture.md`).
//!
//! An overlay table whose metadata lies in the upstream's storage (not in this catalog's
//! warehouse) loads from its capture: the upstream's own metadata document at the captured
//! metadata location (never rewritten), with storage credentials the upstream vends for
//! that table through its integration (never the integration's secret, never a Flotilla
//! key). A table whose current validation has file errors (and no override), that was never
//! captured, or whose storage cannot be read through Flotilla is absent from listings and
//! answers `404` with its validation state.

use std::collections::{BTreeMap, HashMap};

use axum::http::HeaderMap;
use flotilla_catalog_access::object_storage;
use flotilla_catalog_access::spi::{StorageCredential, VendedCredentials};
use flotilla_domain::model::{IntegrationRecord, RelationRecord};
use flotilla_metastore::Consistency;
use flotilla_reconcile::capture::record::{CapturePointer, CapturedTable, Visibility};
use flotilla_reconcile::capture::storage::{CatalogFiles, UpstreamFiles};
use object_store::ObjectStoreExt;
use serde_json::{Value, json};

use crate::budget::LoadPermit;
use crate::catalog::Ctx;
use crate::error::{IcebergError, IcebergResult, Missing};
use crate::vending::{self, Vended};

/// Whether a relation is served from its capture: an overlay table whose metadata lies
/// outside this catalog's warehouse.
pub fn is_federated(ctx: &Ctx, rec: &RelationRecord) -> bool {
    rec.managed_by.is_some()
        && rec
            .metadata_location
            .as_deref()
            .is_none_or(|l| ctx.object_path(l).is_err())
}

/// Same, from a `/v1` relation listing entry.
pub fn is_federated_item(ctx: &Ctx, item: &Value) -> bool {
    !item["managed_by"].is_null()
        && item["metadata_location"]
            .as_str()
            .is_none_or(|l| ctx.object_path(l).is_err())
}

fn invisible(ctx: &Ctx, rec: &RelationRecord, v: &Visibility) -> IcebergError {
    IcebergError::no_such(
        Missing::Table,
        format!(
            "table {}.{} is not query-visible: validation state {}{}{}; see GET /v1/accounts/{}/catalogs/{}/namespaces/{}/tables/{}/validation",
            rec.namespace,
            rec.name,
            v.state,
            if v.errors > 0 {
                format!(", {} file error(s)", v.errors)
            } else {
                String::new()
            },
            v.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            ctx.account,
            ctx.catalog_id(),
            rec.namespace.segments().join("%1F"),
            rec.name,
        ),
    )
}

fn not_readable(rec: &RelationRecord, reason: &str) -> IcebergError {
    IcebergError::no_such(
        Missing::Table,
        format!(
            "table {}.{} is not readable through Flotilla: {reason}",
            rec.namespace, rec.name
        ),
    )
}

/// The visible pointer of a federated table, or the `404` explaining why it is not.
pub async fn visible_pointer(ctx: &Ctx, rec: &RelationRecord) -> IcebergResult<CapturePointer> {
    let p = flotilla_reconcile::capture::service::pointer(
        ctx.state.store.as_ref(),
        ctx.catalog_id(),
        &rec.id,
        Consistency::Eventual,
    )
    .await
    .map_err(IcebergError::unavailable)?
    .map(|p| p.value);
    let v = Visibility::of(p.as_ref());
    match p {
        Some(p) if v.visible => Ok(p),
        _ => Err(invisible(ctx, rec, &v)),
    }
}

/// Upstream credentials in the engine configuration keys the endpoint answers.
fn as_vended(v: &VendedCredentials, table_location: &str) -> Option<Vended> {
    let StorageCredential::S3 {
        access_key_id,
        secret_access_key,
        session_token,
    } = &v.credential
    else {
        return None;
    };
    let mut config: BTreeMap<String, String> = BTreeMap::new();
    let s3 = v.s3_settings();
    if let Some(r) = s3.region {
        config.insert("s3.region".into(), r.clone());
        config.insert("client.region".into(), r);
    }
    if let Some(e) = s3.endpoint {
        config.insert("s3.endpoint".into(), e);
    }
    if let Some(p) = s3.path_style_access {
        config.insert("s3.path-style-access".into(), p);
    }
    config.insert("s3.access-key-id".into(), access_key_id.expose().to_owned());
    config.insert(
        "s3.secret-access-key".into(),
        secret_access_key.expose().to_owned(),
    );
    if let Some(t) = session_token {
        config.insert("s3.session-token".into(), t.expose().to_owned());
    }
    if let Some(at) = v.expires_at
        && let Ok(d) = at.duration_since(std::time::UNIX_EPOCH)
    {
        config.insert(
            "s3.session-token-expires-at-ms".into(),
            d.as_millis().to_string(),
        );
    }
    let prefix = v
        .prefix
        .clone()
        .unwrap_or_else(|| table_location.trim_end_matches('/').to_owned());
    Some(Vended {
        prefix: format!("{}/", prefix.trim_end_matches('/')),
        config,
        expires_at: v.expires_at,
    })
}

/// Credentials for a federated table's storage from its upstream's vending.
async fn upstream_credentials(
    ctx: &Ctx,
    rec: &RelationRecord,
    location: &str,
) -> IcebergResult<Option<Vended>> {
    if !UpstreamFiles::needs_credentials(location) {
        return if ctx.state.config.allow_insecure_upstreams {
            Ok(None)
        } else {
            Err(not_readable(
                rec,
                "the upstream's warehouse is a local file:// path, readable only when the server runs with --allow-insecure-upstreams",
            ))
        };
    }
    let Some(m) = rec.managed_by.as_ref() else {
        return Ok(None);
    };
    let integration = flotilla_services::service::integrations::load(
        ctx.state.store.as_ref(),
        &ctx.account,
        &m.integration_id,
    )
    .await
    .map_err(|e| IcebergError::from_api(e, Missing::Table))?
    .value;
    let client = connect(ctx, &integration).await?;
    let ns =
        flotilla_catalog_access::spi::UpstreamNamespace::new(m.upstream_namespace.iter().cloned());
    let vended = client
        .vend_storage_credentials(&ns, &m.upstream_name)
        .await
        .map_err(|e| {
            if e.is_retryable() {
                IcebergError::unavailable(e)
            } else {
                not_readable(
                    rec,
                    &format!("the upstream vends no storage credentials for it ({e})"),
                )
            }
        })?;
    check_vended_storage(ctx, rec, &vended).await?;
    as_vended(&vended, location).map(Some).ok_or_else(|| {
        not_readable(
            rec,
            &format!(
                "the upstream vends {} credentials, which the endpoint does not hand out",
                vended.credential.kind_name()
            ),
        )
    })
}

/// Refuses to hand engines storage settings capture would refuse to use
/// (`docs/reliability.md`, "Capture honours the address policy"): an `s3.endpoint` the
/// upstream vends goes through the host's address policy (a URL; `https`, plain `http` only
/// with insecure upstreams; a literal address, or every address its name resolves to, never
/// link-local, a metadata service or unspecified; loopback and private ranges only with
/// insecure upstreams), and an `s3.region` must be a region name. A refused one answers
/// `404` not readable through Flotilla naming the policy (never the address), and no
/// credentials at all: an engine given the credentials without the endpoint would send
/// them, and its reads, to whatever its own defaults name.
async fn check_vended_storage(
    ctx: &Ctx,
    rec: &RelationRecord,
    vended: &VendedCredentials,
) -> IcebergResult<()> {
    let s3 = vended.s3_settings();
    if let Some(region) = s3.region.as_deref()
        && !object_storage::is_region_name(region)
    {
        return Err(not_readable(
            rec,
            "the S3 region the upstream vends is not a region name",
        ));
    }
    let Some(endpoint) = s3.endpoint.as_deref() else {
        return Ok(());
    };
    let refused = |r: &dyn std::fmt::Display| {
        not_readable(
            rec,
            &format!(
                "the S3 endpoint the upstream vends was {r}; its credentials are not handed out"
            ),
        )
    };
    let policy = flotilla_services::access::http_policy(&ctx.state);
    object_storage::check_endpoint_resolved(&policy, endpoint)
        .await
        .map_err(|e| match e {
            object_storage::EndpointRefused::Policy(r) => refused(&r),
            object_storage::EndpointRefused::Unresolved(e) => IcebergError::unavailable(e),
        })?;
    Ok(())
}

async fn connect(
    ctx: &Ctx,
    integration: &IntegrationRecord,
) -> IcebergResult<Box<dyn flotilla_catalog_access::spi::CatalogClient>> {
    flotilla_services::access::connect(&ctx.state, integration)
        .await
        .map_err(|e| IcebergError::unavailable(flotilla_base::error::Error::from(e)))
}

/// Reads the captured state object a pointer names, under a share of the process's load
/// budget (`budget.rs`) for its size, taken before its bytes are read.
async fn captured(
    ctx: &Ctx,
    rec: &RelationRecord,
    p: &CapturePointer,
) -> IcebergResult<(LoadPermit, CapturedTable)> {
    let Some(object) = p.object.as_deref() else {
        return Err(not_readable(
            rec,
            "its capture recorded no readable snapshot",
        ));
    };
    let files = CatalogFiles::open(&ctx.state, &ctx.catalog).map_err(IcebergError::unavailable)?;
    let path = object_store::path::Path::parse(object).map_err(IcebergError::unavailable)?;
    let got = files
        .store
        .get(&path)
        .await
        .map_err(IcebergError::unavailable)?;
    let permit = ctx
        .config
        .load_budget
        .acquire(
            got.meta.size,
            &format!("table {}.{}", rec.namespace, rec.name),
        )
        .await?;
    let bytes = got.bytes().await.map_err(IcebergError::unavailable)?;
    let table = serde_json::from_slice(&bytes).map_err(IcebergError::unavailable)?;
    Ok((permit, table))
}

/// `loadTable` of a federated table, answered under a share of the load budget. Vended
/// credentials are asked of the upstream without holding a share (a slow upstream holds no
/// memory), and the captured state is read again for the answer.
pub async fn load(
    ctx: &Ctx,
    headers: &HeaderMap,
    rec: &RelationRecord,
) -> IcebergResult<axum::response::Response> {
    let p = visible_pointer(ctx, rec).await?;
    let (mut permit, mut table) = captured(ctx, rec, &p).await?;
    let remote = UpstreamFiles::needs_credentials(&table.location);
    let vended = if !remote {
        upstream_credentials(ctx, rec, &table.location).await?
    } else if vending::wants_vended(headers) {
        let location = std::mem::take(&mut table.location);
        drop(table);
        drop(permit);
        let vended = upstream_credentials(ctx, rec, &location).await?;
        (permit, table) = captured(ctx, rec, &p).await?;
        vended
    } else {
        None
    };
    let (config, creds) = vending::render(&BTreeMap::new(), vended.as_ref());
    let mut v = json!({
        "metadata-location": p.metadata_location,
        "metadata": table.metadata,
        "config": config,
    });
    if vended.is_some() {
        v["storage-credentials"] = creds;
    }
    crate::budget::json_response(v, permit)
}

/// `GET .../credentials` of a federated table: fresh credentials from the upstream.
pub async fn credentials(ctx: &Ctx, rec: &RelationRecord) -> IcebergResult<Value> {
    let p = visible_pointer(ctx, rec).await?;
    let location = captured(ctx, rec, &p).await?.1.location;
    let vended = upstream_credentials(ctx, rec, &location).await?;
    let (_, creds) = vending::render(&BTreeMap::new(), vended.as_ref());
    Ok(json!({"storage-credentials": creds}))
}

/// Removes the federated tables that are not query-visible from a `/v1` listing page.
pub async fn filter_listing(ctx: &Ctx, items: Vec<Value>) -> IcebergResult<Vec<Value>> {
    if !items.iter().any(|t| is_federated_item(ctx, t)) {
        return Ok(items);
    }
    let pointers: HashMap<String, CapturePointer> =
        flotilla_reconcile::capture::service::pointers(ctx.state.store.as_ref(), ctx.catalog_id())
            .await
            .map_err(IcebergError::unavailable)?;
    Ok(items
        .into_iter()
        .filter(|t| {
            !is_federated_item(ctx, t)
                || t["id"]
                    .as_str()
                    .is_some_and(|id| Visibility::of(pointers.get(id)).visible)
        })
        .collect())
}
