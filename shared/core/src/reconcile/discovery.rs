//! Discovery: a breadth-first walk of the selected upstream namespaces, their tables and
//! views, through the catalog-access SPI. Writes nothing.
//!
//! Failure semantics (seed 004, "Reconciliation publication and failure semantics"): a
//! failure to start (capabilities, the root listing, authentication anywhere) fails the run
//! before anything is published. A failure inside one branch (a namespace, table or view
//! listing, or a load) marks that branch *skipped*: what was discovered elsewhere is still
//! published, and nothing at or below a skipped path is classified as absent, so nothing
//! there is retired. A load answered "not found" is not a failure: the object is absent.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;

use flotilla_catalog_access::spi::{
    CatalogAccessError, CatalogClient, LoadTableOutcome, NamespacePath as UpPath, Page,
    TableMetadata, ViewMetadata,
};
use flotilla_domain::names::NamespacePath;
use flotilla_domain::selection::Selection;
use futures::StreamExt;
use futures::stream;

use super::plan::TargetState;
use super::{Conflict, ReconcileError, RunOptions, Skipped};

/// Page size hint sent with every listing (upstreams may ignore it).
const PAGE_SIZE: u32 = 1000;
/// Most pages one listing may take before the upstream is considered broken.
const MAX_PAGES: usize = 100_000;

/// An upstream table as discovery saw it.
#[derive(Debug)]
pub struct UpTable {
    pub namespace: NamespacePath,
    pub name: String,
    pub load: TableLoad,
}

#[derive(Debug)]
pub enum TableLoad {
    /// The upstream confirmed the stored ETag is current: the stored definition stands.
    NotModified,
    Loaded {
        metadata: Box<TableMetadata>,
        etag: Option<String>,
    },
}

/// An upstream view as discovery saw it.
#[derive(Debug)]
pub struct UpView {
    pub namespace: NamespacePath,
    pub name: String,
    pub metadata: ViewMetadata,
}

/// The complete inventory of one walk.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Selected namespaces that were listed, in breadth-first order.
    pub namespaces: Vec<NamespacePath>,
    pub tables: Vec<UpTable>,
    pub views: Vec<UpView>,
    /// Names listed both as a table and as a view in one namespace.
    pub both: Vec<(NamespacePath, String)>,
    /// Upstream names Flotilla cannot hold (control characters, too long, too deep).
    pub invalid: Vec<Conflict>,
    pub skipped: Vec<Skipped>,
    /// Whether the provider advertises identities that survive renames.
    pub stable_ids: bool,
}

impl Discovered {
    /// Whether `path` lies at or below a skipped branch.
    pub fn is_skipped(&self, path: &NamespacePath) -> bool {
        self.skipped
            .iter()
            .any(|s| path.segments().starts_with(&s.path))
    }
}

/// A namespace's children, or why they could not be listed.
type NamespaceListing = (
    Option<NamespacePath>,
    Result<Vec<UpPath>, CatalogAccessError>,
);

/// Failures that no other branch could avoid: stop the whole run.
fn is_fatal(e: &CatalogAccessError) -> bool {
    matches!(
        e,
        CatalogAccessError::Authentication { .. } | CatalogAccessError::Config(_)
    )
}

async fn all_pages<T, F, Fut>(mut fetch: F) -> Result<Vec<T>, CatalogAccessError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page<T>, CatalogAccessError>>,
{
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_PAGES {
        let page = fetch(token.clone()).await?;
        out.extend(page.items);
        match page.next_page_token {
            None => return Ok(out),
            Some(t) if t.is_empty() => return Ok(out),
            Some(t) => {
                if !seen.insert(t.clone()) {
                    return Err(CatalogAccessError::protocol(
                        "next-page-token",
                        "the upstream repeated a page token",
                    ));
                }
                token = Some(t);
            }
        }
    }
    Err(CatalogAccessError::protocol(
        "next-page-token",
        "the listing did not end",
    ))
}

fn up(path: &NamespacePath) -> UpPath {
    UpPath::new(path.segments().iter().cloned())
}

fn reason(e: &CatalogAccessError) -> String {
    e.to_string()
}

/// Walks the selection. `target` supplies stored ETags for conditional loads of tables this
/// overlay already manages at the same path.
pub async fn discover(
    client: &dyn CatalogClient,
    selection: &Selection,
    target: &TargetState,
    overlay_id: &str,
    opts: &RunOptions,
) -> Result<Discovered, ReconcileError> {
    let concurrency = opts.upstream_concurrency.max(1);
    let caps = client
        .capabilities()
        .await
        .map_err(ReconcileError::Upstream)?;
    if !caps.list_namespaces || !caps.list_tables {
        return Err(ReconcileError::Upstream(CatalogAccessError::unsupported(
            "the upstream catalog cannot list namespaces and tables",
        )));
    }
    let with_views = caps.list_views && caps.load_views;
    let mut out = Discovered {
        stable_ids: caps.stable_ids,
        ..Discovered::default()
    };

    // 1. Namespaces, level by level.
    let mut visited: HashSet<Vec<String>> = HashSet::new();
    let mut frontier: Vec<Option<NamespacePath>> = vec![None];
    while !frontier.is_empty() {
        let listed: Vec<NamespaceListing> = stream::iter(frontier)
            .map(|parent| async move {
                let up_parent = parent.as_ref().map(up);
                let res = all_pages(|t| {
                    let p = up_parent.clone();
                    async move {
                        client
                            .list_namespaces(p.as_ref(), t.as_deref(), Some(PAGE_SIZE))
                            .await
                    }
                })
                .await;
                (parent, res)
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let mut next = Vec::new();
        for (parent, res) in listed {
            let children = match (parent, res) {
                (_, Ok(c)) => c,
                (None, Err(e)) => return Err(ReconcileError::Upstream(e)),
                (Some(_), Err(e)) if is_fatal(&e) => return Err(ReconcileError::Upstream(e)),
                (Some(p), Err(e)) => {
                    out.skipped.push(Skipped {
                        path: p.segments().to_vec(),
                        reason: reason(&e),
                    });
                    continue;
                }
            };
            for child in children {
                if !visited.insert(child.0.clone()) {
                    continue;
                }
                let path = match NamespacePath::new(child.0.clone()) {
                    Ok(p) => p,
                    Err(e) => {
                        out.invalid.push(Conflict::new(
                            child.0.clone(),
                            format!("upstream namespace cannot be held: {e}"),
                        ));
                        continue;
                    }
                };
                if selection.selects(&path) {
                    out.namespaces.push(path.clone());
                }
                if selection.may_select_below(&path) {
                    next.push(Some(path));
                }
            }
        }
        frontier = next;
    }

    // 2. Tables and views of every selected namespace.
    type Listing = (
        NamespacePath,
        Result<(Vec<String>, Vec<String>), CatalogAccessError>,
    );
    let listings: Vec<Listing> = stream::iter(out.namespaces.clone())
        .map(|ns| async move {
            let upns = up(&ns);
            let tables = all_pages(|t| {
                let n = upns.clone();
                async move { client.list_tables(&n, t.as_deref(), Some(PAGE_SIZE)).await }
            })
            .await;
            let tables = match tables {
                Ok(t) => t,
                Err(e) => return (ns, Err(e)),
            };
            let views = if with_views {
                match all_pages(|t| {
                    let n = upns.clone();
                    async move { client.list_views(&n, t.as_deref(), Some(PAGE_SIZE)).await }
                })
                .await
                {
                    Ok(v) => v,
                    Err(CatalogAccessError::Unsupported(_)) => Vec::new(),
                    Err(e) => return (ns, Err(e)),
                }
            } else {
                Vec::new()
            };
            // A listing that strays outside the namespace asked for is answering for other
            // objects: keep only what is in it (the rest is the provider's mistake).
            let names = |idents: Vec<flotilla_catalog_access::spi::TableIdent>| {
                idents
                    .into_iter()
                    .filter(|i| i.namespace.0 == upns.0)
                    .map(|i| i.name)
                    .collect::<Vec<_>>()
            };
            (ns.clone(), Ok((names(tables), names(views))))
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;

    let mut table_jobs: Vec<(NamespacePath, String, Option<String>)> = Vec::new();
    let mut view_jobs: Vec<(NamespacePath, String)> = Vec::new();
    for (ns, res) in listings {
        let (tables, views) = match res {
            Ok(x) => x,
            Err(e) if is_fatal(&e) => return Err(ReconcileError::Upstream(e)),
            Err(e) => {
                out.skipped.push(Skipped {
                    path: ns.segments().to_vec(),
                    reason: reason(&e),
                });
                continue;
            }
        };
        let tables: BTreeSet<String> = tables.into_iter().collect();
        let views: BTreeSet<String> = views.into_iter().collect();
        for name in &tables {
            if views.contains(name) {
                out.both.push((ns.clone(), name.clone()));
                continue;
            }
            let etag = target
                .conditional_etag(&ns, name, overlay_id)
                .map(str::to_owned);
            table_jobs.push((ns.clone(), name.clone(), etag));
        }
        for name in views.into_iter().filter(|v| !tables.contains(v)) {
            view_jobs.push((ns.clone(), name));
        }
    }

    // 3. Loads: conditional for tables whose stored ETag we know.
    let loaded: Vec<(
        NamespacePath,
        String,
        Result<LoadTableOutcome, CatalogAccessError>,
    )> = stream::iter(table_jobs)
        .map(|(ns, name, etag)| async move {
            let res = client.load_table(&up(&ns), &name, etag.as_deref()).await;
            (ns, name, res)
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut failed_ns: HashMap<NamespacePath, String> = HashMap::new();
    for (ns, name, res) in loaded {
        match res {
            Ok(LoadTableOutcome::NotModified) => out.tables.push(UpTable {
                namespace: ns,
                name,
                load: TableLoad::NotModified,
            }),
            Ok(LoadTableOutcome::Loaded { metadata, etag }) => out.tables.push(UpTable {
                namespace: ns,
                name,
                load: TableLoad::Loaded { metadata, etag },
            }),
            // Listed but gone on load (a dropped table a listing still names): the table is
            // absent, which retires it; the namespace is not skipped.
            Err(CatalogAccessError::NotFound(_)) => {}
            Err(e) if is_fatal(&e) => return Err(ReconcileError::Upstream(e)),
            Err(e) => {
                failed_ns
                    .entry(ns)
                    .or_insert_with(|| format!("loading table {name:?} failed: {}", reason(&e)));
            }
        }
    }
    let views: Vec<(
        NamespacePath,
        String,
        Result<ViewMetadata, CatalogAccessError>,
    )> = stream::iter(view_jobs)
        .map(|(ns, name)| async move {
            let res = client.load_view(&up(&ns), &name).await;
            (ns, name, res)
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for (ns, name, res) in views {
        match res {
            Ok(metadata) => out.views.push(UpView {
                namespace: ns,
                name,
                metadata,
            }),
            Err(CatalogAccessError::NotFound(_)) => {}
            Err(e) if is_fatal(&e) => return Err(ReconcileError::Upstream(e)),
            Err(e) => {
                failed_ns
                    .entry(ns)
                    .or_insert_with(|| format!("loading view {name:?} failed: {}", reason(&e)));
            }
        }
    }
    for (ns, why) in failed_ns {
        if !out.is_skipped(&ns) {
            out.skipped.push(Skipped {
                path: ns.segments().to_vec(),
                reason: why,
            });
        }
    }
    out.tables
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out.views
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
