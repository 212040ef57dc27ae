//! Poison tables (`docs/capture.md`, "Poison tables are quarantined"): before capture reads a
//! table's files it durably records an attempt marker (`CAT#{c}` / `CAPATTEMPT#{relation id}`)
//! naming the upstream version it is about to read and how many attempts at that version did
//! not finish. An attempt that ends, well or badly, removes it. A marker still there when the
//! next job starts means the process died (abort, OOM kill, `SIGKILL`) while capturing that
//! table; after [`MAX_UNFINISHED_ATTEMPTS`] such attempts at one version the table is
//! quarantined: its files are not read again, it is published `QUARANTINED` with one error
//! record coded [`QUARANTINED`], and it is not query-visible, until the upstream version
//! changes or an operator asks for a revalidation (which removes the markers of the
//! overlay's quarantined tables, granting each [`MAX_UNFINISHED_ATTEMPTS`] more attempts).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use flotilla_base::store::{Versioned, read, to_body};
use flotilla_domain::keys;
use flotilla_domain::model::RelationRecord;
use flotilla_metastore::{Consistency, Metastore, Op, Query, Transaction, query_all};
use serde::{Deserialize, Serialize};

use super::select::{DELTA, stated_version};

/// Unfinished attempts at one upstream version after which a table is quarantined: the
/// first crash may be the host's (a deploy, an unrelated OOM), the second at the same
/// version is the table's.
pub const MAX_UNFINISHED_ATTEMPTS: u32 = 2;

/// The error code of a quarantined table (its pointer's reason and its error record).
pub const QUARANTINED: &str = "CAPTURE_QUARANTINED";

/// The attempt marker of one table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaptureAttempt {
    pub relation_id: String,
    pub overlay_id: String,
    /// The upstream version the attempt reads ([`upstream_version`]).
    pub upstream_version: String,
    /// Attempts at this version that started and have not finished (this one included).
    pub attempts: u32,
    pub started_at: String,
}

/// The upstream version of a planned table as the plan knows it: the Iceberg metadata
/// location, a Delta Sharing table's stated version, or (Unity, whose version is known only
/// from its log) the commit file of the log's tip.
pub fn upstream_version(rel: &RelationRecord) -> String {
    if rel.format.as_deref() == Some(DELTA) {
        return match stated_version(rel) {
            Some(v) => format!("delta-version:{v}"),
            None => rel.location.clone().unwrap_or_default(),
        };
    }
    rel.metadata_location.clone().unwrap_or_default()
}

/// The marker of one table, read strongly.
pub async fn marker(
    store: &dyn Metastore,
    catalog_id: &str,
    relation_id: &str,
) -> flotilla_base::error::Result<Option<Versioned<CaptureAttempt>>> {
    read(
        store,
        keys::capture_attempt(catalog_id, relation_id),
        Consistency::Strong,
    )
    .await
}

/// The next marker of a table about to be read at `version`: `Err(attempts)` when the table
/// is quarantined (that many attempts at this version did not finish).
pub fn next(
    previous: Option<&CaptureAttempt>,
    relation_id: &str,
    overlay_id: &str,
    version: &str,
    now: String,
) -> Result<CaptureAttempt, u32> {
    let before = previous
        .filter(|m| m.upstream_version == version)
        .map_or(0, |m| m.attempts);
    if before >= MAX_UNFINISHED_ATTEMPTS {
        return Err(before);
    }
    Ok(CaptureAttempt {
        relation_id: relation_id.to_owned(),
        overlay_id: overlay_id.to_owned(),
        upstream_version: version.to_owned(),
        attempts: before + 1,
        started_at: now,
    })
}

/// The marker as an op: created, or replacing the one read.
pub fn write_op(
    catalog_id: &str,
    previous: Option<&Versioned<CaptureAttempt>>,
    next: &CaptureAttempt,
) -> flotilla_base::error::Result<Op> {
    let key = keys::capture_attempt(catalog_id, &next.relation_id);
    let body = to_body(next)?;
    Ok(match previous {
        Some(p) => Op::replace(key, p.version, body),
        None => Op::create(key, body),
    })
}

/// An operator's revalidation lifts the quarantine of an overlay's tables: the markers that
/// quarantine them are removed (each at the version read), so the job it queues reads them
/// again, at most [`MAX_UNFINISHED_ATTEMPTS`] more times. Answers how many were lifted.
pub async fn lift(
    store: &dyn Metastore,
    catalog_id: &str,
    overlay_id: &str,
) -> flotilla_base::error::Result<usize> {
    let items = query_all(
        store,
        Query::new(
            keys::catalog_pk(catalog_id),
            keys::CAPTURE_ATTEMPT_PREFIX,
            Consistency::Strong,
        ),
    )
    .await?;
    let mut lifted = 0;
    for item in items {
        let m: CaptureAttempt = item.json()?;
        if m.overlay_id != overlay_id || m.attempts < MAX_UNFINISHED_ATTEMPTS {
            continue;
        }
        // A marker that moved meanwhile belongs to a job running now: left to it.
        if store
            .transact(Transaction::new().with(Op::delete_at(item.key.clone(), item.version)))
            .await
            .is_ok()
        {
            lifted += 1;
        }
    }
    Ok(lifted)
}

/// A test seam: called with a table's path once its attempt marker is durable, before any of
/// its files is read. A hook that never returns, or panics, stands for the process dying
/// in the middle of that table (the attack tests abort the job's task there).
#[derive(Clone)]
pub struct FaultHook(
    #[allow(clippy::type_complexity)]
    pub  Arc<dyn Fn(&[String]) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>,
);

impl std::fmt::Debug for FaultHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultHook")
    }
}
