//! Read-only, paginated upstream listings of an integration ("Follow-on API
//! evolution": "object listing distinguishes namespaces, tables, and views"):
//! `GET {A}/integrations/{id}/upstream/namespaces?parent=` and
//! `GET {A}/integrations/{id}/upstream/objects?namespace=&kinds=table,view`.
//!
//! Continuation tokens wrap the upstream's own token. They are opaque base64 and bound by a
//! hash to the listing, the account, the integration id, its `credential_generation` and
//! `generation`, and the filter (`parent`, or `namespace` + `kinds`): a token replayed after
//! a rotation, a URI change, or with another filter is `400 INVALID_ARGUMENT` instead of
//! being sent to a catalog it was not issued by (or under credentials it was not issued to).
//!
//! `page_size` is a hint upstreams may ignore, so a cursor also remembers how many items of
//! the upstream page were already answered (`k`) and the hint that page was fetched with
//! (`h`), and the page is fetched again with the same hint to resume inside it. The objects
//! listing runs tables, then views, as phases of one cursor.
//!
//! Both listings answer only the direct children of what was asked for: some servers answer
//! every depth at the root, or entries under another parent. Those are dropped before
//! paging (so the cursor's position counts kept items only) and counted in the answer's
//! `dropped` (entries dropped from the upstream pages this API page read).

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use flotilla_catalog_access::{
    CatalogAccessError, CatalogClient, Page, TableIdent, UpstreamNamespace,
};
use flotilla_domain::model::IntegrationRecord;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::connect_integration;
use crate::error::{Error, ErrorKind, Result};
use crate::state::AppState;

/// Upstream calls one API page may make (empty upstream pages, phase changes).
pub const MAX_UPSTREAM_CALLS_PER_PAGE: usize = 8;
/// Longest continuation token accepted (upstream tokens are opaque and unbounded).
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Deepest namespace path accepted in `parent` / `namespace`.
pub const MAX_NAMESPACE_LEVELS: usize = 32;

/// Which relation kinds an objects listing returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Kinds {
    pub tables: bool,
    pub views: bool,
}

impl Default for Kinds {
    fn default() -> Self {
        Self {
            tables: true,
            views: true,
        }
    }
}

impl Kinds {
    /// Parses `table,view` (case-insensitive, any order, at least one).
    pub fn parse(text: &str) -> Result<Self> {
        let mut k = Kinds {
            tables: false,
            views: false,
        };
        for part in text.split(',').map(str::trim) {
            match part.to_ascii_lowercase().as_str() {
                "table" | "tables" => k.tables = true,
                "view" | "views" => k.views = true,
                _ => {
                    return Err(Error::invalid(
                        "kinds is a comma-separated list of table and view",
                    ));
                }
            }
        }
        Ok(k)
    }
}

/// Parses a `%1F`-joined namespace path (already percent-decoded).
pub fn parse_namespace(text: &str, what: &str) -> Result<UpstreamNamespace> {
    let levels: Vec<&str> = text.split('\u{1f}').collect();
    if levels.len() > MAX_NAMESPACE_LEVELS
        || levels
            .iter()
            .any(|l| l.is_empty() || l.len() > 1024 || l.chars().any(char::is_control))
    {
        return Err(Error::invalid(format!(
            "{what} is a namespace path whose levels are joined by %1F; levels are non-empty and at most \
             {MAX_NAMESPACE_LEVELS} deep"
        )));
    }
    Ok(UpstreamNamespace::new(levels))
}

/// Where a listing resumes.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Cursor {
    /// Binding tag (listing, integration, generations, filter).
    b: String,
    /// Phase: 0 = namespaces or tables, 1 = views.
    p: u8,
    /// Upstream token of the page to fetch (`None`: the first page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    u: Option<String>,
    /// Page-size hint that page is fetched with.
    h: u32,
    /// Items of that page already answered.
    k: usize,
}

fn binding(listing: &str, record: &IntegrationRecord, filter: &Value) -> String {
    let scope = json!([
        "flotilla-upstream-v1",
        listing,
        record.account_id,
        record.id,
        record.credential_generation,
        record.generation,
        filter
    ]);
    hex::encode(&Sha256::digest(scope.to_string().as_bytes())[..16])
}

fn encode(cursor: &Cursor) -> Result<String> {
    let body = serde_json::to_vec(cursor)
        .map_err(|e| Error::internal(format!("encode page token: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(body))
}

fn decode(token: &str, tag: &str, phases: u8) -> Result<Cursor> {
    let bad = || {
        Error::invalid(
            "malformed or foreign page_token (tokens are bound to the integration's credentials and the filter)",
        )
    };
    if token.len() > MAX_TOKEN_BYTES {
        return Err(bad());
    }
    let raw = URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .map_err(|_| bad())?;
    let c: Cursor = serde_json::from_slice(&raw).map_err(|_| bad())?;
    if c.b != tag || c.p >= phases || c.h == 0 {
        return Err(bad());
    }
    Ok(c)
}

/// Checks an upstream-listing page token against a binding `tag` and a phase count without
/// using it: the same decoding every listing applies first. Public for the fuzz targets
/// (`flotilla_core::fuzzing`); a refusal is always `400`.
pub fn check_page_token(token: &str, tag: &str, phases: u8) -> Result<()> {
    decode(token, tag, phases).map(|_| ())
}

/// One API page over phased upstream listings. `fetch(phase, token, hint)` reads one
/// upstream page; `enabled[phase]` skips phases the filter or the provider excludes.
async fn page_through<T, F, Fut>(
    tag: String,
    enabled: &[bool],
    page_size: usize,
    token: Option<&str>,
    mut fetch: F,
) -> Result<(Vec<(u8, T)>, Option<String>)>
where
    F: FnMut(u8, Option<String>, u32) -> Fut,
    Fut: std::future::Future<Output = Result<Page<T>, CatalogAccessError>>,
{
    let phases = u8::try_from(enabled.len()).unwrap_or(u8::MAX);
    let hint = u32::try_from(page_size).unwrap_or(u32::MAX);
    let first = |from: u8| (from..phases).find(|p| enabled[usize::from(*p)]);
    let mut cur = match token {
        Some(t) => decode(t, &tag, phases)?,
        None => match first(0) {
            Some(p) => Cursor {
                b: tag.clone(),
                p,
                u: None,
                h: hint,
                k: 0,
            },
            None => return Ok((Vec::new(), None)),
        },
    };
    let mut items = Vec::new();
    let mut calls = 0;
    loop {
        if !enabled[usize::from(cur.p)] {
            match first(cur.p + 1) {
                Some(p) => {
                    cur = Cursor {
                        b: tag.clone(),
                        p,
                        u: None,
                        h: hint,
                        k: 0,
                    };
                    continue;
                }
                None => return Ok((items, None)),
            }
        }
        calls += 1;
        let page = fetch(cur.p, cur.u.clone(), cur.h)
            .await
            .map_err(Error::from)?;
        let total = page.items.len();
        let want = page_size - items.len();
        let taken = total.saturating_sub(cur.k).min(want);
        items.extend(
            page.items
                .into_iter()
                .skip(cur.k)
                .take(taken)
                .map(|i| (cur.p, i)),
        );
        if cur.k + taken < total {
            let next = Cursor {
                k: cur.k + taken,
                ..cur
            };
            return Ok((items, Some(encode(&next)?)));
        }
        cur = match page.next_page_token {
            Some(t) if !t.is_empty() => Cursor {
                b: tag.clone(),
                p: cur.p,
                u: Some(t),
                h: hint,
                k: 0,
            },
            _ => match first(cur.p + 1) {
                Some(p) => Cursor {
                    b: tag.clone(),
                    p,
                    u: None,
                    h: hint,
                    k: 0,
                },
                None => return Ok((items, None)),
            },
        };
        if items.len() >= page_size || calls >= MAX_UPSTREAM_CALLS_PER_PAGE {
            return Ok((items, Some(encode(&cur)?)));
        }
    }
}

fn namespace_error(e: Error) -> Error {
    if e.kind == ErrorKind::NotFound {
        Error::new(ErrorKind::NamespaceNotFound, e.message)
    } else {
        e
    }
}

/// `GET .../upstream/namespaces`: the children of `parent` (top level when absent).
pub async fn list_namespaces(
    state: &AppState,
    account: &str,
    id: &str,
    parent: Option<UpstreamNamespace>,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let (record, client) = connect_integration(state, account, id).await?;
    let tag = binding("namespaces", &record, &json!({"parent": parent}));
    let client: &dyn CatalogClient = client.as_ref();
    let parent = parent.as_ref();
    let dropped = AtomicU64::new(0);
    let dropped_ref = &dropped;
    let (items, next) = page_through(tag, &[true], page_size, token, |_, t, h| async move {
        let mut page = client
            .list_namespaces(parent, t.as_deref(), Some(h))
            .await?;
        let levels = parent.map(UpstreamNamespace::levels).unwrap_or(&[]);
        let before = page.items.len();
        page.items
            .retain(|ns| ns.levels().len() == levels.len() + 1 && ns.levels().starts_with(levels));
        dropped_ref.fetch_add((before - page.items.len()) as u64, Ordering::Relaxed);
        Ok(page)
    })
    .await
    .map_err(namespace_error)?;
    let items: Vec<Value> = items
        .into_iter()
        .map(|(_, ns)| json!({"path": ns.levels()}))
        .collect();
    Ok(with_dropped(
        flotilla_base::store::page_body(items, next),
        dropped.load(Ordering::Relaxed),
    ))
}

fn with_dropped(mut body: Value, dropped: u64) -> Value {
    body["dropped"] = json!(dropped);
    body
}

/// `GET .../upstream/objects`: tables, then views, of one namespace.
pub async fn list_objects(
    state: &AppState,
    account: &str,
    id: &str,
    namespace: UpstreamNamespace,
    kinds: Kinds,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let (record, client) = connect_integration(state, account, id).await?;
    let tag = binding(
        "objects",
        &record,
        &json!({"namespace": namespace, "kinds": kinds}),
    );
    let client: &dyn CatalogClient = client.as_ref();
    // A provider without views lists none rather than failing the listing.
    let views = kinds.views && client.capabilities().await.map_err(Error::from)?.list_views;
    let ns = &namespace;
    let dropped = AtomicU64::new(0);
    let dropped_ref = &dropped;
    let (items, next) = page_through(
        tag,
        &[kinds.tables, views],
        page_size,
        token,
        |phase, t, h| async move {
            let mut page = if phase == 0 {
                client.list_tables(ns, t.as_deref(), Some(h)).await?
            } else {
                client.list_views(ns, t.as_deref(), Some(h)).await?
            };
            let before = page.items.len();
            page.items.retain(|i| i.namespace == *ns);
            dropped_ref.fetch_add((before - page.items.len()) as u64, Ordering::Relaxed);
            Ok(page)
        },
    )
    .await
    .map_err(namespace_error)?;
    let items: Vec<Value> = items
        .into_iter()
        .map(|(phase, TableIdent { namespace, name })| {
            json!({"namespace": namespace.levels(), "name": name, "kind": if phase == 0 { "TABLE" } else { "VIEW" }})
        })
        .collect();
    Ok(with_dropped(
        flotilla_base::store::page_body(items, next),
        dropped.load(Ordering::Relaxed),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(items: &[&str], next: Option<&str>) -> Page<String> {
        Page {
            items: items.iter().map(|s| (*s).to_owned()).collect(),
            next_page_token: next.map(str::to_owned),
        }
    }

    /// An upstream that ignores the hint and answers everything at once: the cursor must
    /// resume inside that page.
    #[tokio::test]
    async fn pages_inside_an_upstream_page_that_ignores_the_hint() {
        let all = ["a", "b", "c", "d", "e"];
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..10 {
            let (items, next) =
                page_through("t".into(), &[true], 2, token.as_deref(), |_, _, _| async {
                    Ok::<_, CatalogAccessError>(page(&all, None))
                })
                .await
                .expect("page");
            assert!(items.len() <= 2);
            seen.extend(items.into_iter().map(|(_, i)| i));
            match next {
                Some(n) => token = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, all);
    }

    #[tokio::test]
    async fn tokens_from_another_binding_are_refused() {
        let (_, next) = page_through("one".into(), &[true], 1, None, |_, _, _| async {
            Ok::<_, CatalogAccessError>(page(&["a", "b"], None))
        })
        .await
        .expect("page");
        let next = next.expect("more");
        let err = page_through("two".into(), &[true], 1, Some(&next), |_, _, _| async {
            Ok::<_, CatalogAccessError>(page(&["a", "b"], None))
        })
        .await
        .expect_err("refused");
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
    }

    #[test]
    fn kinds_parse() {
        assert_eq!(
            Kinds::parse("VIEW").expect("kinds"),
            Kinds {
                tables: false,
                views: true
            }
        );
        assert!(Kinds::parse("table,index").is_err());
        assert!(Kinds::parse("").is_err());
    }
}
