//! Discovery: a breadth-first walk of the selected upstream namespaces, their tables and
//! views, through the catalog-access SPI. Writes nothing.
//!
//! Discovery is all or nothing (`docs/reconciliation.md`, "Failure semantics"): any failed
//! listing or load fails the run before anything is published, because a partial inventory
//! could otherwise classify what it missed as absent. The one exception is a definitive
//! "does not exist" for a table or view the listing named: the object was dropped between the
//! listing and the load, and is absent.
//!
//! Every listing keeps only the direct children of what it asked for (some servers answer
//! every depth at the root, or paths under another parent) and counts what it dropped; every
//! page and load is metered against the run's [`Budget`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;

use flotilla_catalog_access::spi::{
    CatalogAccessError, CatalogClient, LoadTableOutcome, Page, TableIdent, TableMetadata,
    UpstreamNamespace, ViewMetadata,
};
use flotilla_domain::names::NamespacePath;
use flotilla_domain::selection::Selection;
use futures::stream;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

use super::bounds::{Budget, Exceeded, Weight};
use super::target::TargetState;
use super::{Conflict, Holder, ReconcileError, RunOptions};

/// Page size hint sent with every listing (upstreams may ignore it).
const PAGE_SIZE: u32 = 1000;

/// The ETag to keep from a full answer to a load sent with `If-None-Match: sent`. A full
/// answer that carries the very tag that was sent says that tag is no validator (an upstream
/// whose ETag does not change when the table does): it is dropped, and the table's
/// fingerprint becomes an untrusted-tag content fingerprint from then on
/// (`plan::untrusted_fingerprint`), so later loads of the table are unconditional.
pub(crate) fn validator(sent: Option<&str>, answered: Option<String>) -> Option<String> {
    match (sent, answered) {
        (Some(s), Some(a)) if weak_eq(s, &a) => None,
        (_, a) => a,
    }
}

/// Weak comparison of two entity tags (RFC 9110 section 8.8.3.2): equal once `W/` is removed.
fn weak_eq(a: &str, b: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    strip(a) == strip(b)
}

/// An upstream table as discovery saw it.
#[derive(Clone, Debug)]
pub struct UpTable {
    pub namespace: NamespacePath,
    pub name: String,
    pub load: TableLoad,
}

#[derive(Clone, Debug)]
pub enum TableLoad {
    /// The upstream confirmed the stored ETag is current: the stored definition stands.
    NotModified,
    Loaded {
        metadata: Box<TableMetadata>,
        etag: Option<String>,
        /// The upstream answered in full with the very tag that was sent: its ETag is no
        /// validator ([`validator`]).
        etag_untrusted: bool,
    },
}

/// An upstream view as discovery saw it.
#[derive(Clone, Debug)]
pub struct UpView {
    pub namespace: NamespacePath,
    pub name: String,
    pub metadata: ViewMetadata,
}

/// Listing entries dropped because they were not direct children of what was listed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Dropped {
    pub namespaces: u64,
    pub tables: u64,
    pub views: u64,
}

/// The complete inventory of one walk.
#[derive(Clone, Debug, Default)]
pub struct Discovered {
    /// Selected namespaces that were listed, in breadth-first order.
    pub namespaces: Vec<NamespacePath>,
    /// Upstream properties of the selected namespaces the overlay creates (or created).
    pub namespace_properties: HashMap<NamespacePath, BTreeMap<String, String>>,
    pub tables: Vec<UpTable>,
    pub views: Vec<UpView>,
    /// Names listed both as a table and as a view in one namespace.
    pub both: Vec<(NamespacePath, String)>,
    /// Upstream names Flotilla cannot hold (control characters, too long, too deep).
    pub invalid: Vec<Conflict>,
    pub dropped: Dropped,
    /// Whether the provider advertises identities that survive renames.
    pub stable_ids: bool,
    /// Listed namespaces the upstream no longer had when their content was asked for (only
    /// in a checkpointed leg; a single run fails with `UPSTREAM_CHANGED` instead).
    pub vanished: Vec<NamespacePath>,
}

fn up(path: &NamespacePath) -> UpstreamNamespace {
    UpstreamNamespace::new(path.segments().iter().cloned())
}

fn segments(path: Option<&NamespacePath>) -> Vec<String> {
    path.map(|p| p.segments().to_vec()).unwrap_or_default()
}

/// Runs one upstream request within the run's time budget.
async fn call<T, Fut>(
    budget: &Budget,
    path: &[String],
    what: &'static str,
    fut: Fut,
) -> Result<T, ReconcileError>
where
    Fut: Future<Output = Result<T, CatalogAccessError>>,
{
    budget.check_time()?;
    match tokio::time::timeout(budget.remaining(), fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(error)) => Err(ReconcileError::Upstream {
            path: path.to_vec(),
            what,
            error,
        }),
        Err(_) => Err(ReconcileError::Exceeded(Exceeded::Deadline {
            budget_ms: budget.limits().run_budget_ms,
        })),
    }
}

/// Every page of one listing, metered.
async fn all_pages<T, F, Fut>(
    budget: &Budget,
    path: &[String],
    what: &'static str,
    mut fetch: F,
) -> Result<Vec<T>, ReconcileError>
where
    T: Weight,
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page<T>, CatalogAccessError>>,
{
    let mut meter = budget.listing();
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    let mut seen = HashSet::new();
    loop {
        let page = call(budget, path, what, fetch(token.clone())).await?;
        let bytes = page.items.iter().map(Weight::weight).sum::<usize>()
            + page.next_page_token.as_ref().map_or(0, String::len);
        meter.add(page.items.len(), bytes)?;
        out.extend(page.items);
        match page.next_page_token {
            None => return Ok(out),
            Some(t) if t.is_empty() => return Ok(out),
            Some(t) => {
                if !seen.insert(t.clone()) {
                    return Err(ReconcileError::Upstream {
                        path: path.to_vec(),
                        what,
                        error: CatalogAccessError::protocol(
                            "next-page-token",
                            "the upstream repeated a page token",
                        ),
                    });
                }
                token = Some(t);
            }
        }
    }
}

/// Bytes a loaded table holds while the run lasts.
fn table_weight(m: &TableMetadata) -> usize {
    let schema = serde_json::to_vec(&m.schema).map_or(0, |v| v.len());
    let props: usize = m.properties.iter().map(|(k, v)| k.len() + v.len()).sum();
    schema
        + props
        + m.location.as_ref().map_or(0, String::len)
        + m.metadata_location.as_ref().map_or(0, String::len)
}

fn view_weight(m: &ViewMetadata) -> usize {
    let schema = serde_json::to_vec(&m.schema).map_or(0, |v| v.len());
    let props: usize = m.properties.iter().map(|(k, v)| k.len() + v.len()).sum();
    let sql: usize = m
        .definitions
        .iter()
        .map(|d| d.sql.len() + d.dialect.len())
        .sum();
    schema + props + sql
}

/// What a walk selects: one overlay's [`Selection`], or the union of several overlays'
/// selections on one integration (a shared discovery pass).
pub trait Scope: Sync {
    fn selects(&self, path: &NamespacePath) -> bool;
    fn may_select_below(&self, path: &NamespacePath) -> bool;
}

impl Scope for Selection {
    fn selects(&self, path: &NamespacePath) -> bool {
        Selection::selects(self, path)
    }
    fn may_select_below(&self, path: &NamespacePath) -> bool {
        Selection::may_select_below(self, path)
    }
}

impl Scope for Vec<Selection> {
    fn selects(&self, path: &NamespacePath) -> bool {
        self.iter().any(|s| s.selects(path))
    }
    fn may_select_below(&self, path: &NamespacePath) -> bool {
        self.iter().any(|s| s.may_select_below(path))
    }
}

/// What the destinations already hold, as discovery needs it.
pub trait Hints: Sync {
    /// The ETag to send as `If-None-Match` for the table at `(ns, name)`, if any.
    fn etag(&self, ns: &NamespacePath, name: &str) -> Option<String>;
    /// Whether the upstream properties of `ns` are needed (a destination creates, or
    /// created, the namespace).
    fn wants_properties(&self, ns: &NamespacePath) -> bool;
}

/// One overlay's destination.
pub struct OverlayHints<'a> {
    pub target: &'a TargetState,
    pub overlay_id: &'a str,
}

impl Hints for OverlayHints<'_> {
    fn etag(&self, ns: &NamespacePath, name: &str) -> Option<String> {
        self.target
            .conditional_etag(ns, name, self.overlay_id)
            .map(str::to_owned)
    }
    fn wants_properties(&self, ns: &NamespacePath) -> bool {
        self.target
            .namespaces
            .get(ns)
            .is_none_or(|n| n.value.created_by_overlay)
    }
}

/// Walks the selection. `target` supplies stored ETags for conditional loads of tables this
/// overlay already manages at the same path, and tells which namespaces the overlay creates.
pub async fn discover(
    client: &dyn CatalogClient,
    selection: &Selection,
    target: &TargetState,
    overlay_id: &str,
    opts: &RunOptions,
    budget: &Budget,
) -> Result<Discovered, ReconcileError> {
    let hints = OverlayHints { target, overlay_id };
    discover_with(client, selection, &hints, opts, budget).await
}

/// Walks `scope`, with `hints` for conditional loads and namespace properties.
pub async fn discover_with(
    client: &dyn CatalogClient,
    selection: &dyn Scope,
    hints: &dyn Hints,
    opts: &RunOptions,
    budget: &Budget,
) -> Result<Discovered, ReconcileError> {
    let walked = walk(client, selection, opts, budget).await?;
    let mut out = contents(
        client,
        &walked,
        &walked.namespaces,
        hints,
        opts,
        budget,
        false,
    )
    .await?;
    out.invalid = walked.invalid;
    out.dropped.namespaces += walked.dropped_namespaces;
    budget.check_time()?;
    Ok(out)
}

/// The namespace part of a walk: the capabilities and the selected namespaces.
#[derive(Clone, Debug, Default)]
pub struct Walk {
    /// Selected namespaces, in breadth-first order.
    pub namespaces: Vec<NamespacePath>,
    /// Upstream namespace names Flotilla cannot hold.
    pub invalid: Vec<Conflict>,
    pub dropped_namespaces: u64,
    pub stable_ids: bool,
    /// Whether the upstream lists and loads views.
    pub views: bool,
}

/// Step 1 of discovery: the capabilities, then the namespace tree of `selection`.
pub async fn walk(
    client: &dyn CatalogClient,
    selection: &dyn Scope,
    opts: &RunOptions,
    budget: &Budget,
) -> Result<Walk, ReconcileError> {
    let concurrency = opts.upstream_concurrency.max(1);
    let caps = call(budget, &[], "reading the catalog's capabilities", async {
        client.capabilities().await
    })
    .await?;
    if !caps.list_namespaces || !caps.list_tables {
        return Err(ReconcileError::Upstream {
            path: Vec::new(),
            what: "reading the catalog's capabilities",
            error: CatalogAccessError::unsupported(
                "the upstream catalog cannot list namespaces and tables",
            ),
        });
    }
    let mut out = Walk {
        stable_ids: caps.stable_ids,
        views: caps.list_views && caps.load_views,
        ..Walk::default()
    };

    // 1. Namespaces, level by level: only the direct children of each listed parent.
    let mut visited: HashSet<Vec<String>> = HashSet::new();
    let mut frontier: Vec<Option<NamespacePath>> = vec![None];
    while !frontier.is_empty() {
        let listed: Vec<(Option<NamespacePath>, Vec<UpstreamNamespace>)> = stream::iter(frontier)
            .map(|parent| async move {
                let up_parent = parent.as_ref().map(up);
                let at = segments(parent.as_ref());
                let children = all_pages(budget, &at, "listing namespaces", |t| {
                    let p = up_parent.clone();
                    async move {
                        client
                            .list_namespaces(p.as_ref(), t.as_deref(), Some(PAGE_SIZE))
                            .await
                    }
                })
                .await?;
                Ok::<_, ReconcileError>((parent, children))
            })
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
        let mut next = Vec::new();
        for (parent, children) in listed {
            let parent_levels = segments(parent.as_ref());
            for child in children {
                let levels = child.0;
                if levels.len() != parent_levels.len() + 1 || !levels.starts_with(&parent_levels) {
                    out.dropped_namespaces += 1;
                    continue;
                }
                if !visited.insert(levels.clone()) {
                    continue;
                }
                let path = match NamespacePath::new(levels.clone()) {
                    Ok(p) => p,
                    Err(e) => {
                        out.invalid.push(Conflict::new(
                            levels,
                            "NAMESPACE",
                            Holder::Upstream,
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

    Ok(out)
}

/// Steps 2 to 4 of discovery for `namespaces` (selected namespaces of `walked`): their
/// properties where wanted, their tables and views, and the loads. With `vanished_is_empty`
/// (a checkpointed leg), a namespace the upstream no longer has is reported in
/// [`Discovered::vanished`] instead of failing the run.
pub async fn contents(
    client: &dyn CatalogClient,
    walked: &Walk,
    namespaces: &[NamespacePath],
    hints: &dyn Hints,
    opts: &RunOptions,
    budget: &Budget,
    vanished_is_empty: bool,
) -> Result<Discovered, ReconcileError> {
    let concurrency = opts.upstream_concurrency.max(1);
    let with_views = walked.views;
    let mut out = Discovered {
        stable_ids: walked.stable_ids,
        namespaces: namespaces.to_vec(),
        ..Discovered::default()
    };
    let gone = std::sync::Mutex::new(BTreeSet::new());
    let gone = &gone;
    let vanish = |at: &[String], e: ReconcileError| -> Result<(), ReconcileError> {
        if vanished_is_empty && let ReconcileError::UpstreamChanged { .. } = e {
            if let Ok(p) = NamespacePath::new(at.to_vec()) {
                gone.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(p);
            }
            return Ok(());
        }
        Err(e)
    };
    let vanish = &vanish;

    // 2. Upstream properties of the namespaces this overlay creates or created.
    let wanted: Vec<NamespacePath> = out
        .namespaces
        .iter()
        .filter(|ns| hints.wants_properties(ns))
        .cloned()
        .collect();
    let props: Vec<Option<(NamespacePath, BTreeMap<String, String>)>> = stream::iter(wanted)
        .map(|ns| async move {
            let at = ns.segments().to_vec();
            match call(budget, &at, "loading namespace properties", async {
                client.load_namespace_properties(&up(&ns)).await
            })
            .await
            {
                Ok(p) => {
                    let bytes: usize = p.iter().map(|(k, v)| k.len() + v.len()).sum();
                    budget.charge(1, bytes)?;
                    Ok(Some((ns, p)))
                }
                Err(ReconcileError::Upstream {
                    error: CatalogAccessError::Unsupported(_),
                    ..
                }) => Ok(None),
                Err(ReconcileError::Upstream {
                    error: CatalogAccessError::NotFound(_),
                    ..
                }) => {
                    vanish(&at, ReconcileError::UpstreamChanged { path: at.clone() }).map(|()| None)
                }
                Err(e) => Err(e),
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    out.namespace_properties.extend(props.into_iter().flatten());

    // 3. Tables and views of every selected namespace: only those in it.
    type Listing = (NamespacePath, Vec<TableIdent>, Vec<TableIdent>);
    let listings: Vec<Option<Listing>> = stream::iter(out.namespaces.clone())
        .map(|ns| async move {
            let at = ns.segments().to_vec();
            match listing(client, budget, ns, with_views).await {
                Ok(l) => Ok(Some(l)),
                Err(e) => vanish(&at, e).map(|()| None),
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let listings: Vec<Listing> = listings.into_iter().flatten().collect();

    let mut table_jobs: Vec<(NamespacePath, String, Option<String>)> = Vec::new();
    let mut view_jobs: Vec<(NamespacePath, String)> = Vec::new();
    for (ns, tables, views) in listings {
        let own = ns.segments();
        let keep = |idents: Vec<TableIdent>, dropped: &mut u64| -> BTreeSet<String> {
            let mut names = BTreeSet::new();
            for i in idents {
                if i.namespace.0 == own {
                    names.insert(i.name);
                } else {
                    *dropped += 1;
                }
            }
            names
        };
        let tables = keep(tables, &mut out.dropped.tables);
        let views = keep(views, &mut out.dropped.views);
        for name in &tables {
            if views.contains(name) {
                out.both.push((ns.clone(), name.clone()));
                continue;
            }
            let etag = hints.etag(&ns, name);
            table_jobs.push((ns.clone(), name.clone(), etag));
        }
        for name in views.into_iter().filter(|v| !tables.contains(v)) {
            view_jobs.push((ns.clone(), name));
        }
    }

    // 4. Loads: conditional for tables whose stored ETag we know. A load answered "does not
    //    exist" means the object was dropped since the listing: it is absent.
    let loaded = load_tables(client, budget, concurrency, table_jobs).await?;
    out.tables.extend(loaded);
    let views: Vec<Option<UpView>> = stream::iter(view_jobs)
        .map(|(ns, name)| async move {
            let mut at = ns.segments().to_vec();
            at.push(name.clone());
            match call(budget, &at, "loading a view", async {
                client.load_view(&up(&ns), &name).await
            })
            .await
            {
                Ok(metadata) => {
                    budget.charge(1, view_weight(&metadata))?;
                    Ok(Some(UpView {
                        namespace: ns,
                        name,
                        metadata,
                    }))
                }
                Err(ReconcileError::Upstream {
                    error: CatalogAccessError::NotFound(_),
                    ..
                }) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    out.views.extend(views.into_iter().flatten());
    out.tables
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out.views
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let gone = std::mem::take(
        &mut *gone
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    if !gone.is_empty() {
        out.namespaces.retain(|n| !gone.contains(n));
        out.namespace_properties.retain(|n, _| !gone.contains(n));
        out.tables.retain(|t| !gone.contains(&t.namespace));
        out.views.retain(|v| !gone.contains(&v.namespace));
        out.vanished = gone.into_iter().collect();
    }
    Ok(out)
}

/// Loads tables `(namespace, name, ETag to send)`, `concurrency` at a time: conditional where
/// an ETag is known; a table answered "does not exist" is left out.
async fn load_tables(
    client: &dyn CatalogClient,
    budget: &Budget,
    concurrency: usize,
    jobs: Vec<(NamespacePath, String, Option<String>)>,
) -> Result<Vec<UpTable>, ReconcileError> {
    let loaded: Vec<Option<UpTable>> = stream::iter(jobs)
        .map(|(ns, name, etag)| async move {
            let mut at = ns.segments().to_vec();
            at.push(name.clone());
            let res = call(budget, &at, "loading a table", async {
                client.load_table(&up(&ns), &name, etag.as_deref()).await
            })
            .await;
            let load = match res {
                Ok(LoadTableOutcome::NotModified) => {
                    budget.charge(1, 0)?;
                    TableLoad::NotModified
                }
                Ok(LoadTableOutcome::Loaded {
                    metadata,
                    etag: answered,
                }) => {
                    budget.charge(1, table_weight(&metadata))?;
                    let kept = validator(etag.as_deref(), answered.clone());
                    TableLoad::Loaded {
                        metadata,
                        etag_untrusted: kept.is_none() && answered.is_some(),
                        etag: kept,
                    }
                }
                Err(ReconcileError::Upstream {
                    error: CatalogAccessError::NotFound(_),
                    ..
                }) => return Ok(None),
                Err(e) => return Err(e),
            };
            Ok::<_, ReconcileError>(Some(UpTable {
                namespace: ns,
                name,
                load,
            }))
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    Ok(loaded.into_iter().flatten().collect())
}

/// A targeted discovery (`POST .../notify`): the capabilities, then the content of
/// `namespaces` (as a walk would discover them) and conditional loads of `tables` outside
/// them, with no walk of the namespace tree. `namespaces` and the tables' namespaces are
/// selected (the caller checked); the tables' namespaces are listed in
/// [`Discovered::namespaces`] without properties, so their claims are asserted and nothing
/// of theirs is changed.
pub async fn targeted(
    client: &dyn CatalogClient,
    namespaces: &[NamespacePath],
    tables: &[(NamespacePath, String)],
    hints: &dyn Hints,
    opts: &RunOptions,
    budget: &Budget,
) -> Result<Discovered, ReconcileError> {
    let caps = call(budget, &[], "reading the catalog's capabilities", async {
        client.capabilities().await
    })
    .await?;
    let walked = Walk {
        namespaces: namespaces.to_vec(),
        stable_ids: caps.stable_ids,
        views: caps.list_views && caps.load_views,
        ..Walk::default()
    };
    let mut out = contents(client, &walked, namespaces, hints, opts, budget, false).await?;
    let listed: HashSet<&NamespacePath> = namespaces.iter().collect();
    let jobs: Vec<(NamespacePath, String, Option<String>)> = tables
        .iter()
        .filter(|(ns, _)| !listed.contains(ns))
        .map(|(ns, name)| (ns.clone(), name.clone(), hints.etag(ns, name)))
        .collect();
    for (ns, _) in tables {
        if !out.namespaces.contains(ns) {
            out.namespaces.push(ns.clone());
        }
    }
    let loaded = load_tables(client, budget, opts.upstream_concurrency.max(1), jobs).await?;
    out.tables.extend(loaded);
    out.tables
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out.tables
        .dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name);
    budget.check_time()?;
    Ok(out)
}

/// All pages of the tables and views of one selected namespace.
async fn listing(
    client: &dyn CatalogClient,
    budget: &Budget,
    ns: NamespacePath,
    with_views: bool,
) -> Result<(NamespacePath, Vec<TableIdent>, Vec<TableIdent>), ReconcileError> {
    let upns = up(&ns);
    let at = ns.segments().to_vec();
    let vanished = |e: ReconcileError| match e {
        ReconcileError::Upstream {
            error: CatalogAccessError::NotFound(_),
            ..
        } => ReconcileError::UpstreamChanged { path: at.clone() },
        other => other,
    };
    let tables = all_pages(budget, &at, "listing tables", |t| {
        let n = upns.clone();
        async move { client.list_tables(&n, t.as_deref(), Some(PAGE_SIZE)).await }
    })
    .await
    .map_err(vanished)?;
    let views = if with_views {
        match all_pages(budget, &at, "listing views", |t| {
            let n = upns.clone();
            async move { client.list_views(&n, t.as_deref(), Some(PAGE_SIZE)).await }
        })
        .await
        {
            Ok(v) => v,
            Err(ReconcileError::Upstream {
                error: CatalogAccessError::Unsupported(_),
                ..
            }) => Vec::new(),
            Err(e) => return Err(vanished(e)),
        }
    } else {
        Vec::new()
    };
    Ok((ns, tables, views))
}

#[cfg(test)]
mod tests {
    use super::validator;

    /// A full answer carrying the tag that was sent is no validator: it is not kept.
    #[test]
    fn a_tag_answered_in_full_to_itself_is_not_kept() {
        let t = |s: &str| Some(s.to_owned());
        assert_eq!(validator(None, t("\"a\"")), t("\"a\""));
        assert_eq!(validator(t("\"a\"").as_deref(), t("\"b\"")), t("\"b\""));
        assert_eq!(validator(t("\"a\"").as_deref(), t("\"a\"")), None);
        assert_eq!(validator(t("W/\"a\"").as_deref(), t("\"a\"")), None);
        assert_eq!(validator(t("\"a\"").as_deref(), None), None);
    }
}
