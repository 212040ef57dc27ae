//! Every storage key Flotilla writes, in one place. `docs/storage.md` mirrors this module;
//! this module is authoritative.
//!
//! Partitions:
//! - `SYSTEM`: deployment-wide items (the account listing, the directory authority marker,
//!   operator-scoped idempotency receipts).
//! - `ACCT#{account}`: the account record, its deletion fence, its catalogs, integrations,
//!   overlays, name indexes, dependency records and idempotency receipts. Account cleanup
//!   walks this partition.
//! - `CAT#{catalog_id}`: one catalog's namespaces, relations (tables and views share one
//!   name slot per namespace), namespace claims, guards and its directory generation.
//!   Catalog cleanup deletes this partition.
//!
//! - `IXC#{account}#{name}`, `IXWH`, `IXWHCLAIM`: ParqDB index catalogs ([`index_catalog`]).
//!
//! Separators: `0x1F` joins namespace levels and `0x1E` separates a namespace from a
//! relation name. Names can never contain control characters (see `names`), so neither
//! separator can occur inside a segment and a prefix never matches across a boundary.
//!
//! A builder that names one item answers the store's [`Key`]; a builder of a sort-key or
//! partition prefix answers a string.

use crate::names::NamespacePath;

pub const NS_SEP: char = '\u{1F}';
pub const REL_SEP: char = '\u{1E}';

pub const SYSTEM_PK: &str = "SYSTEM";

fn ns_str(path: &NamespacePath) -> String {
    path.segments().join(&NS_SEP.to_string())
}

pub use flotilla_metastore::Key;

// ---- deployment-wide -------------------------------------------------------------------

/// The listing entry of an account (`SYSTEM` / `ACCOUNT#{id}`).
pub fn account_listing(account: &str) -> Key {
    Key::new(SYSTEM_PK, format!("ACCOUNT#{account}"))
}
pub const ACCOUNT_LISTING_PREFIX: &str = "ACCOUNT#";

/// The directory authority marker: present once catalog-finalize ran.
pub fn directory_authority() -> Key {
    Key::new(SYSTEM_PK, "DIRECTORY_AUTHORITY")
}

/// Idempotency receipts of operator-scoped creates (accounts).
pub fn system_idempotency(key_hash: &str) -> Key {
    Key::new(SYSTEM_PK, format!("IDEM#{key_hash}"))
}

/// Where the scheduled credential sweep resumes: the last account a pass visited.
pub fn credential_sweep_cursor() -> Key {
    Key::new(SYSTEM_PK, "SWEEPCURSOR")
}

// ---- account partition -----------------------------------------------------------------

pub fn account_pk(account: &str) -> String {
    format!("ACCT#{account}")
}

pub fn account(account: &str) -> Key {
    Key::new(account_pk(account), "ACCOUNT")
}

/// The durable account deletion fence. Every create asserts its absence.
pub fn account_fence(account: &str) -> Key {
    Key::new(account_pk(account), "FENCE#DELETE")
}

/// The digest of a client `Idempotency-Key` as it appears in a receipt key (bounded length,
/// no separators).
pub fn client_key_hash(client_key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(client_key.as_bytes()))
}

/// The idempotency receipt of an account-scoped create under the client's key.
pub fn account_receipt(account: &str, client_key: &str) -> Key {
    account_idempotency(account, &client_key_hash(client_key))
}

/// The idempotency receipt of an operator-scoped create under the client's key.
pub fn system_receipt(client_key: &str) -> Key {
    system_idempotency(&client_key_hash(client_key))
}

pub fn account_idempotency(account: &str, key_hash: &str) -> Key {
    Key::new(account_pk(account), format!("IDEM#{key_hash}"))
}
pub const IDEMPOTENCY_PREFIX: &str = "IDEM#";

pub fn catalog(account: &str, catalog_id: &str) -> Key {
    Key::new(account_pk(account), format!("CAT#{catalog_id}"))
}
pub const CATALOG_PREFIX: &str = "CAT#";

/// Unique display name of a catalog within the account; body holds the catalog id.
pub fn catalog_name(account: &str, name: &str) -> Key {
    Key::new(account_pk(account), format!("CATNAME#{name}"))
}

pub fn integration(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("INT#{id}"))
}
pub const INTEGRATION_PREFIX: &str = "INT#";

pub fn integration_name(account: &str, name: &str) -> Key {
    Key::new(account_pk(account), format!("INTNAME#{name}"))
}

/// Durable integration deletion fence (cascade delete).
pub fn integration_fence(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("INTFENCE#{id}"))
}

/// A credential generation not (or no longer) referenced by its published integration:
/// prepared before publication, or retiring after a rotation (see `sweep-credentials`).
pub fn credential_generation(account: &str, integration_id: &str, generation: u64) -> Key {
    Key::new(
        account_pk(account),
        format!("CREDGEN#{integration_id}#{generation:020}"),
    )
}
pub const CREDENTIAL_GENERATION_PREFIX: &str = "CREDGEN#";
pub fn credential_generations_prefix(integration_id: &str) -> String {
    format!("CREDGEN#{integration_id}#")
}

/// Dependency record: overlay `overlay_id` uses integration `integration_id`.
pub fn integration_dependency(account: &str, integration_id: &str, overlay_id: &str) -> Key {
    Key::new(
        account_pk(account),
        format!("INTDEP#{integration_id}#{overlay_id}"),
    )
}
pub fn integration_dependency_prefix(integration_id: &str) -> String {
    format!("INTDEP#{integration_id}#")
}

pub fn overlay(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("OVL#{id}"))
}
pub const OVERLAY_PREFIX: &str = "OVL#";

pub fn overlay_name(account: &str, name: &str) -> Key {
    Key::new(account_pk(account), format!("OVLNAME#{name}"))
}

/// The overlay's status (last reconciliation summary, scheduling state).
pub fn overlay_status(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("OVLSTATUS#{id}"))
}

/// Durable overlay deletion fence.
pub fn overlay_fence(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("OVLFENCE#{id}"))
}

/// Dependency record: overlay `overlay_id` targets catalog `catalog_id`.
pub fn catalog_dependency(account: &str, catalog_id: &str, overlay_id: &str) -> Key {
    Key::new(
        account_pk(account),
        format!("CATDEP#{catalog_id}#{overlay_id}"),
    )
}
pub fn catalog_dependency_prefix(catalog_id: &str) -> String {
    format!("CATDEP#{catalog_id}#")
}

/// The scheduler's state of one integration: the effective plan's demand (one entry per
/// overlay), the plan generation, the due time it is indexed at, the lease and attempts.
/// Operational state, kept apart from the integration and overlay resources.
pub fn scheduler_state(account: &str, integration_id: &str) -> Key {
    Key::new(account_pk(account), format!("SCHED#{integration_id}"))
}
pub const SCHEDULER_STATE_PREFIX: &str = "SCHED#";

/// The checkpoint of a reconciliation that runs over several invocations (legs): the head
/// item of one chain of `subject` (`INT#{integration}` for a plan job, `OVL#{overlay}` for a
/// single overlay). At most one chain per subject; a new chain replaces the head.
pub fn checkpoint_head(account: &str, subject: &str) -> Key {
    Key::new(account_pk(account), format!("CKPT#{subject}"))
}
/// One chunk of a checkpoint blob (`tag` names the chain and the blob) below the head.
pub fn checkpoint_chunk(account: &str, subject: &str, tag: &str, n: u32) -> Key {
    Key::new(account_pk(account), format!("CKPT#{subject}#{tag}#{n:04}"))
}
/// Every chunk of every chain of `subject` (the head excluded).
pub fn checkpoint_chunks_prefix(subject: &str) -> String {
    format!("CKPT#{subject}#")
}
pub const CHECKPOINT_PREFIX: &str = "CKPT#";

// ---- access control (account partition) ---------------------------------------------
//
// Every item of an account's access control (service principals, roles, memberships,
// grants) lives under one sort-key prefix, so that a host loads the whole of it with one
// strong prefix query between two reads of the generation item ([`acl_generation`]).

/// Every access-control item of an account (the generation included).
pub const ACL_PREFIX: &str = "ACL#";

/// The account's grants generation: an opaque value replaced in the same transaction as
/// every principal, role, membership and grant change. Hosts validate their cached view of
/// the account's grants with one strong point read of it per request. Control data: never
/// exposed.
pub fn acl_generation(account: &str) -> Key {
    Key::new(account_pk(account), "ACL#GEN")
}

/// A service principal (by id): name, client id, salted secret hash, secret generation.
pub fn service_principal(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("ACL#PRINCIPAL#{id}"))
}
pub const SERVICE_PRINCIPAL_PREFIX: &str = "ACL#PRINCIPAL#";

/// Unique name of a service principal within the account; body holds its id.
pub fn service_principal_name(account: &str, name: &str) -> Key {
    Key::new(account_pk(account), format!("ACL#PRINCIPALNAME#{name}"))
}

/// A role (by name: roles are named in grants and memberships).
pub fn role(account: &str, name: &str) -> Key {
    Key::new(account_pk(account), format!("ACL#ROLE#{name}"))
}
pub const ROLE_PREFIX: &str = "ACL#ROLE#";

/// One member of a role: a principal name or `group:<name>`, after U+001E.
pub fn role_member(account: &str, role: &str, member: &str) -> Key {
    Key::new(
        account_pk(account),
        format!("ACL#MEMBER#{role}{REL_SEP}{member}"),
    )
}
pub const ROLE_MEMBER_PREFIX: &str = "ACL#MEMBER#";

/// A grant (by id): role, privilege and securable.
pub fn grant(account: &str, id: &str) -> Key {
    Key::new(account_pk(account), format!("ACL#GRANT#{id}"))
}
pub const GRANT_PREFIX: &str = "ACL#GRANT#";

// ---- due-time index --------------------------------------------------------------------

/// Partitions of the due-time index. An integration always lands in the same one, so a
/// tick's reads spread over this many partitions instead of one hot one.
pub const DUE_SHARDS: u32 = 16;

/// The index partition of one shard (`DUE#{shard:02}`).
pub fn due_pk(shard: u32) -> String {
    format!("DUE#{shard:02}")
}

/// The shard of an integration: a stable hash of account and integration.
pub fn due_shard(account: &str, integration_id: &str) -> u32 {
    use sha2::Digest;
    let d = sha2::Sha256::digest(format!("{account}#{integration_id}").as_bytes());
    u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % DUE_SHARDS
}

/// Width of the zero-padded due time, so sort-key order is due-time order.
const DUE_MS_WIDTH: usize = 15;

/// The due entry of an integration: `DUE#{shard}` / `{due_ms:015}#{account}#{integration}`.
/// Accounts and resource ids never contain `#`, so the sort key splits unambiguously.
pub fn due_entry(account: &str, integration_id: &str, due_ms: i64) -> Key {
    Key::new(
        due_pk(due_shard(account, integration_id)),
        format!(
            "{:0width$}#{account}#{integration_id}",
            due_ms.max(0),
            width = DUE_MS_WIDTH
        ),
    )
}

/// Decodes a due entry's sort key into (due time, account, integration).
pub fn parse_due_sk(sk: &str) -> Option<(i64, String, String)> {
    let mut parts = sk.splitn(3, '#');
    let due = parts.next()?.parse().ok()?;
    Some((due, parts.next()?.to_owned(), parts.next()?.to_owned()))
}

/// Where the next scheduler tick resumes in the due index (the shard it starts with, and
/// where a tick stopped at its bound).
pub fn due_tick_cursor() -> Key {
    Key::new(SYSTEM_PK, "DUECURSOR")
}

/// The scheduler's tick lease: held by one tick at a time (expiry on the injected clock), so
/// two overlapping ticks never both enqueue the same due work.
pub fn tick_lease() -> Key {
    Key::new(SYSTEM_PK, "TICKLEASE")
}

/// Where the bounded backfill of the due index resumes (integrations that predate it).
pub fn due_backfill_cursor() -> Key {
    Key::new(SYSTEM_PK, "DUEBACKFILL")
}

/// The captured state objects of a deleted catalog still to be deleted from its warehouse
/// (`_flotilla/capture/` below it): written with the catalog's deletion, removed once swept.
pub fn capture_sweep(catalog_id: &str) -> Key {
    Key::new(SYSTEM_PK, format!("CAPSWEEP#{catalog_id}"))
}
pub const CAPTURE_SWEEP_PREFIX: &str = "CAPSWEEP#";

// ---- catalog partition -----------------------------------------------------------------

pub fn catalog_pk(catalog_id: &str) -> String {
    format!("CAT#{catalog_id}")
}

/// Transient guard installed by a catalog delete while it proves emptiness; creates in the
/// catalog assert its absence. A stale guard (crashed deleter) is removed by the next
/// writer that meets it.
pub fn catalog_guard(catalog_id: &str) -> Key {
    Key::new(catalog_pk(catalog_id), "GUARD#DELETE")
}

/// A namespace. The depth prefix makes "children of P" one prefix query.
pub fn namespace(catalog_id: &str, path: &NamespacePath) -> Key {
    Key::new(
        catalog_pk(catalog_id),
        format!("NS#{:02}#{}", path.depth(), ns_str(path)),
    )
}
pub const NAMESPACE_PREFIX: &str = "NS#";

/// Prefix of the direct children of `parent` (or of the root namespaces).
pub fn namespace_children_prefix(parent: Option<&NamespacePath>) -> String {
    match parent {
        None => "NS#01#".into(),
        Some(p) => format!("NS#{:02}#{}{}", p.depth() + 1, ns_str(p), NS_SEP),
    }
}

/// Transient guard installed by a namespace delete while it proves emptiness.
pub fn namespace_guard(catalog_id: &str, path: &NamespacePath) -> Key {
    Key::new(catalog_pk(catalog_id), format!("NSGUARD#{}", ns_str(path)))
}

/// A relation (table or view): one name slot per namespace, so a name is never both.
pub fn relation(catalog_id: &str, ns: &NamespacePath, name: &str) -> Key {
    Key::new(
        catalog_pk(catalog_id),
        format!("REL#{}{}{}", ns_str(ns), REL_SEP, name),
    )
}
pub const RELATION_PREFIX: &str = "REL#";

/// Prefix of the relations directly inside `ns`.
pub fn relations_in_prefix(ns: &NamespacePath) -> String {
    format!("REL#{}{}", ns_str(ns), REL_SEP)
}

/// Namespace claim of an overlay on a namespace path ("Namespace claim state").
pub fn namespace_claim(catalog_id: &str, path: &NamespacePath, overlay_id: &str) -> Key {
    Key::new(
        catalog_pk(catalog_id),
        format!("CLAIM#{}{}{}", ns_str(path), REL_SEP, overlay_id),
    )
}
pub fn namespace_claims_prefix(path: &NamespacePath) -> String {
    format!("CLAIM#{}{}", ns_str(path), REL_SEP)
}
pub const CLAIM_PREFIX: &str = "CLAIM#";

/// The catalog's directory generation: replaced in the same transaction as
/// every listed-object change. Control data: never exposed.
pub fn directory_generation(catalog_id: &str) -> Key {
    Key::new(catalog_pk(catalog_id), "DIRGEN")
}

/// The capture pointer of one table (by relation id): the snapshot and metadata location
/// last captured, where the captured state object lies, the current validation generation
/// and the table's visibility override. The captured state itself is in object storage.
pub fn capture_pointer(catalog_id: &str, relation_id: &str) -> Key {
    Key::new(catalog_pk(catalog_id), format!("CAPTURE#{relation_id}"))
}
pub const CAPTURE_PREFIX: &str = "CAPTURE#";

/// The attempt marker of one table's capture (by relation id): written before capture reads
/// the table's files (the upstream version being captured and how many attempts at it did
/// not finish), removed when the attempt ends. A marker found at the same version after
/// `MAX_UNFINISHED_ATTEMPTS` (`flotilla_reconcile::capture::attempt`) attempts
/// means the process died capturing it: the table is quarantined.
pub fn capture_attempt(catalog_id: &str, relation_id: &str) -> Key {
    Key::new(catalog_pk(catalog_id), format!("CAPATTEMPT#{relation_id}"))
}
pub const CAPTURE_ATTEMPT_PREFIX: &str = "CAPATTEMPT#";

/// One validation-error record of a table: `VALERR#{relation}#{validation id}#{index:06}`.
/// Only the records of the validation id the capture pointer names are current.
pub fn validation_error(
    catalog_id: &str,
    relation_id: &str,
    validation_id: &str,
    index: usize,
) -> Key {
    Key::new(
        catalog_pk(catalog_id),
        format!("VALERR#{relation_id}#{validation_id}#{index:06}"),
    )
}
/// Every validation-error record of one table (all generations).
pub fn validation_errors_prefix(relation_id: &str) -> String {
    format!("VALERR#{relation_id}#")
}
pub const VALIDATION_ERROR_PREFIX: &str = "VALERR#";

/// The partition of a catalog's or an account's event log (`CAT#{catalog}` or
/// `ACCT#{account}`): each holds its own pending events, log and head under the same sort
/// keys ([`log_event_pending`], [`log_event`], [`log_head`]). No other item of either
/// partition has a sort key starting with `EVQ#`, `EVT#` or equal to `EVTHEAD`.
pub fn catalog_of_pk(pk: &str) -> Option<&str> {
    pk.strip_prefix("CAT#").filter(|c| !c.is_empty())
}

/// The account of an account partition key (`ACCT#{account}`).
pub fn account_of_pk(pk: &str) -> Option<&str> {
    pk.strip_prefix("ACCT#").filter(|a| !a.is_empty())
}

/// A change event not yet given its place in its log (the catalog's, or the account's for
/// account-level changes), in the log's partition `log_pk`: written in the same transaction
/// as the change it records (the outbox). Keyed by its write time and id, so the sealer
/// ([`log_event`]) takes the oldest first and two writers never name the same item.
pub fn log_event_pending(log_pk: &str, timestamp_ms: i64, event_id: &str) -> Key {
    Key::new(
        log_pk,
        format!("EVQ#{:013}#{event_id}", timestamp_ms.max(0)),
    )
}
pub const EVENT_PENDING_PREFIX: &str = "EVQ#";

/// One event of the log in partition `log_pk` at its sequence number (dense, from 1). Only
/// the sealer writes here, moving pending events in under the log head ([`log_head`]).
pub fn log_event(log_pk: &str, sequence: u64) -> Key {
    Key::new(log_pk, format!("EVT#{sequence:020}"))
}
pub const EVENT_LOG_PREFIX: &str = "EVT#";

/// The sequence number of a log sort key.
pub fn parse_event_log_sk(sk: &str) -> Option<u64> {
    sk.strip_prefix(EVENT_LOG_PREFIX)?.parse().ok()
}

/// The head of the log in partition `log_pk`: the next sequence number to assign. Replaced
/// only by the sealer (never by the writers, so writes to different objects never meet on
/// it).
pub fn log_head(log_pk: &str) -> Key {
    Key::new(log_pk, "EVTHEAD")
}

/// The audit record of a refused request of the account, by its time and request id (so a
/// listing reads the account's refusals oldest first). TTL: the audit retention.
pub fn audit_refusal(account: &str, timestamp_ms: i64, request_id: &str) -> Key {
    Key::new(
        account_pk(account),
        format!("AUD#{:013}#R#{request_id}", timestamp_ms.max(0)),
    )
}

/// The one summary of a principal's refusals in a minute beyond the per-minute bound, at the
/// minute's last millisecond (`minute_end_ms`), named by a digest of the principal (bounded
/// length, no separators). Replaced with the growing count; TTL: the audit retention.
pub fn audit_summary(account: &str, minute_end_ms: i64, principal: &str) -> Key {
    let digest = &client_key_hash(principal)[..32];
    Key::new(
        account_pk(account),
        format!("AUD#{:013}#S#{digest}", minute_end_ms.max(0)),
    )
}
pub const AUDIT_PREFIX: &str = "AUD#";

/// The sort key every audit record at or after `timestamp_ms` sorts after (a listing's start).
pub fn audit_start(timestamp_ms: i64) -> String {
    format!("AUD#{:013}#", timestamp_ms.max(0))
}

/// The time of an audit sort key.
pub fn parse_audit_sk(sk: &str) -> Option<i64> {
    sk.strip_prefix(AUDIT_PREFIX)?.get(..13)?.parse().ok()
}

/// A webhook sink of the account's change events (`flotilla serve`): its URL, types filter,
/// per-catalog delivered positions and delivery state, all in one item, so the delivery
/// loop advances the position with one conditional write on its version.
pub fn event_sink(account: &str, sink_id: &str) -> Key {
    Key::new(account_pk(account), format!("EVSINK#{sink_id}"))
}
pub const EVENT_SINK_PREFIX: &str = "EVSINK#";

/// How many event sinks the account has: replaced at its version by every sink create and
/// delete, so the per-account bound holds under concurrent creates.
pub fn event_sink_count(account: &str) -> Key {
    Key::new(account_pk(account), "EVSINKCOUNT")
}

/// The deployment-wide index of event sinks (`SYSTEM` / `EVSINK#{account}#{sink}`): the
/// delivery loop lists every sink with one query. Created and deleted in the same transaction
/// as the sink itself.
pub fn event_sink_index(account: &str, sink_id: &str) -> Key {
    Key::new(SYSTEM_PK, format!("EVSINK#{account}#{sink_id}"))
}
pub const EVENT_SINK_INDEX_PREFIX: &str = "EVSINK#";

/// The account and sink id of an event sink index sort key.
pub fn parse_event_sink_index_sk(sk: &str) -> Option<(String, String)> {
    let (account, sink) = sk.strip_prefix(EVENT_SINK_INDEX_PREFIX)?.split_once('#')?;
    Some((account.to_owned(), sink.to_owned()))
}

/// The credential-store owner id under which a sink's signing secret is kept (the secret
/// store's `integration_id` slot, at the generation the sink records): integration ids are
/// bare hex uuids, so the `evsink-` prefix can never name an integration.
pub fn event_sink_secret_owner(sink_id: &str) -> String {
    format!("{EVENT_SINK_SECRET_PREFIX}{sink_id}")
}
pub const EVENT_SINK_SECRET_PREFIX: &str = "evsink-";

/// Decodes the namespace and name of a relation sort key.
pub fn parse_relation_sk(sk: &str) -> Option<(Vec<String>, String)> {
    let rest = sk.strip_prefix(RELATION_PREFIX)?;
    let (ns, name) = rest.split_once(REL_SEP)?;
    Some((
        ns.split(NS_SEP).map(str::to_owned).collect(),
        name.to_owned(),
    ))
}

pub mod index_catalog {
    //! ParqDB index catalogs (`flotilla-parqdb`). The table in `docs/parqdb.md` lists the
    //! same formats; change both together.
    //!
    //! | item | pk | sk |
    //! |---|---|---|
    //! | index catalog | `ACCT#{account}` | `IXC#{name}` |
    //! | namespace | `IXC#{account}#{name}` | `NS#{path joined by U+001F}` |
    //! | index mapping | `IXC#{account}#{name}` | `IDX#{ns path joined by U+001F}U+001E{index}` |
    //! | lost reachability | `IXC#{account}#{name}` | `UNREACH#{absolute metadata location}` |
    //! | warehouse registration | `IXWH` | `{warehouse uri}U+001E{account}U+001E{name}` |
    //! | warehouse prefix claim | `IXWHCLAIM` | `{tenant prefix uri}` |
    //! | claim held by an account | `ACCT#{account}` | `WHCLAIM#{tenant prefix uri}` |
    //!
    //! Accounts never contain `#`, so `IXC#{account}#{name}` splits unambiguously. Namespace
    //! segments and index names never contain U+001E or U+001F (refused on input), so the
    //! separators cannot be forged, and the mapping prefix of namespace `[a]` (`IDX#a` U+001E)
    //! never matches an index of namespace `[a, b]` (`IDX#a` U+001F `b` U+001E ...).

    use super::Key;

    /// Joins namespace segments (the Iceberg REST multi-level separator).
    pub const NAMESPACE_SEPARATOR: char = '\u{1F}';
    /// Separates a namespace from an index name, and the parts of a warehouse registration.
    pub const NAME_SEPARATOR: char = '\u{1E}';

    pub const INDEX_CATALOG_PREFIX: &str = "IXC#";
    pub const NAMESPACE_PREFIX: &str = "NS#";
    pub const MAPPING_PREFIX: &str = "IDX#";
    pub const UNREACHABLE_PREFIX: &str = "UNREACH#";
    /// The one partition that lists which index catalogs use which warehouse, so that garbage
    /// collection of a warehouse sees every catalog whose mappings may reference its objects.
    pub const WAREHOUSE_PARTITION: &str = "IXWH";

    /// The one partition of warehouse prefix claims (see `flotilla_parqdb::warehouse`): which
    /// account a tenant prefix belongs to.
    pub const WAREHOUSE_CLAIM_PARTITION: &str = "IXWHCLAIM";
    /// Sort-key prefix of an account's reverse claim items, so that account delete finds the
    /// claims to release.
    pub const ACCOUNT_CLAIM_PREFIX: &str = "WHCLAIM#";

    /// The claim of a tenant prefix.
    pub fn warehouse_claim(prefix: &str) -> Key {
        Key::new(WAREHOUSE_CLAIM_PARTITION, prefix)
    }

    /// The reverse item of a claim, in the account partition.
    pub fn account_warehouse_claim(account: &str, prefix: &str) -> Key {
        Key::new(
            account_partition(account),
            format!("{ACCOUNT_CLAIM_PREFIX}{prefix}"),
        )
    }

    /// The account partition that holds index catalog records (the account's own partition).
    pub fn account_partition(account: &str) -> String {
        super::account_pk(account)
    }

    /// The index catalog record.
    pub fn index_catalog(account: &str, name: &str) -> Key {
        Key::new(
            account_partition(account),
            format!("{INDEX_CATALOG_PREFIX}{name}"),
        )
    }

    /// The partition holding one index catalog's namespaces, mappings and reachability records.
    pub fn catalog_partition(account: &str, name: &str) -> String {
        format!("IXC#{account}#{name}")
    }

    pub fn join_namespace(path: &[String]) -> String {
        let mut sep = [0u8; 4];
        path.join(NAMESPACE_SEPARATOR.encode_utf8(&mut sep))
    }

    pub fn namespace(account: &str, catalog: &str, path: &[String]) -> Key {
        Key::new(
            catalog_partition(account, catalog),
            format!("{NAMESPACE_PREFIX}{}", join_namespace(path)),
        )
    }

    /// The sort-key prefix of the direct and indirect children of a namespace.
    pub fn namespace_children_prefix(path: &[String]) -> String {
        format!(
            "{NAMESPACE_PREFIX}{}{NAMESPACE_SEPARATOR}",
            join_namespace(path)
        )
    }

    pub fn mapping(account: &str, catalog: &str, namespace: &[String], index: &str) -> Key {
        Key::new(
            catalog_partition(account, catalog),
            format!("{}{index}", mapping_prefix(namespace)),
        )
    }

    /// The sort-key prefix of the mappings of exactly one namespace.
    pub fn mapping_prefix(namespace: &[String]) -> String {
        format!(
            "{MAPPING_PREFIX}{}{NAME_SEPARATOR}",
            join_namespace(namespace)
        )
    }

    pub fn unreachable(account: &str, catalog: &str, location: &str) -> Key {
        Key::new(
            catalog_partition(account, catalog),
            format!("{UNREACHABLE_PREFIX}{location}"),
        )
    }

    pub fn warehouse_registration(warehouse: &str, account: &str, catalog: &str) -> Key {
        Key::new(
            WAREHOUSE_PARTITION,
            format!("{warehouse}{NAME_SEPARATOR}{account}{NAME_SEPARATOR}{catalog}"),
        )
    }

    /// The sort-key prefix of every registration of exactly this warehouse.
    pub fn warehouse_registration_prefix(warehouse: &str) -> String {
        format!("{warehouse}{NAME_SEPARATOR}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &[&str]) -> NamespacePath {
        NamespacePath::new(s.iter().map(|x| x.to_string()).collect()).unwrap()
    }

    #[test]
    fn child_prefix_does_not_match_sibling_with_common_prefix() {
        let ab = namespace("c", &p(&["a", "b"])).sk;
        let abc = namespace("c", &p(&["ab", "c"])).sk;
        let prefix = namespace_children_prefix(Some(&p(&["a"])));
        assert!(ab.starts_with(&prefix));
        assert!(!abc.starts_with(&prefix));
    }

    #[test]
    fn relations_prefix_is_exact_namespace() {
        let in_a = relation("c", &p(&["a"]), "t").sk;
        let in_ab = relation("c", &p(&["a", "b"]), "t").sk;
        let prefix = relations_in_prefix(&p(&["a"]));
        assert!(in_a.starts_with(&prefix));
        assert!(!in_ab.starts_with(&prefix));
        assert_eq!(
            parse_relation_sk(&in_ab),
            Some((vec!["a".into(), "b".into()], "t".into()))
        );
    }

    /// The storage layout: these bytes are on disk and in DynamoDB; a change here is a
    /// migration, not a refactor.
    #[test]
    fn storage_layout_is_stable() {
        let k = |pk: &str, sk: &str| Key::new(pk, sk);
        assert_eq!(account("acme"), k("ACCT#acme", "ACCOUNT"));
        assert_eq!(account_fence("acme"), k("ACCT#acme", "FENCE#DELETE"));
        assert_eq!(account_listing("acme"), k("SYSTEM", "ACCOUNT#acme"));
        assert_eq!(credential_sweep_cursor(), k("SYSTEM", "SWEEPCURSOR"));
        assert_eq!(event_sink("acme", "s1"), k("ACCT#acme", "EVSINK#s1"));
        assert_eq!(event_sink_count("acme"), k("ACCT#acme", "EVSINKCOUNT"));
        assert_eq!(
            event_sink_index("acme", "s1"),
            k("SYSTEM", "EVSINK#acme#s1")
        );
        assert_eq!(
            parse_event_sink_index_sk("EVSINK#acme#s1"),
            Some(("acme".into(), "s1".into()))
        );
        assert_eq!(event_sink_secret_owner("s1"), "evsink-s1");
        assert_eq!(due_backfill_cursor(), k("SYSTEM", "DUEBACKFILL"));
        assert_eq!(scheduler_state("acme", "i1"), k("ACCT#acme", "SCHED#i1"));
        let shard = due_shard("acme", "i1");
        assert!(shard < DUE_SHARDS);
        assert_eq!(
            due_entry("acme", "i1", 1_700_000_000_000),
            k(&format!("DUE#{shard:02}"), "001700000000000#acme#i1")
        );
        assert_eq!(
            parse_due_sk("001700000000000#acme#i1"),
            Some((1_700_000_000_000, "acme".into(), "i1".into()))
        );
        assert_eq!(catalog("acme", "c1"), k("ACCT#acme", "CAT#c1"));
        assert_eq!(acl_generation("acme"), k("ACCT#acme", "ACL#GEN"));
        assert_eq!(role("acme", "r"), k("ACCT#acme", "ACL#ROLE#r"));
        assert_eq!(
            role_member("acme", "r", "group:eng"),
            k("ACCT#acme", "ACL#MEMBER#r\u{1E}group:eng")
        );
        assert_eq!(grant("acme", "g1"), k("ACCT#acme", "ACL#GRANT#g1"));
        assert_eq!(
            service_principal("acme", "p1"),
            k("ACCT#acme", "ACL#PRINCIPAL#p1")
        );
        assert_eq!(
            service_principal_name("acme", "etl"),
            k("ACCT#acme", "ACL#PRINCIPALNAME#etl")
        );
        assert_eq!(
            catalog_name("acme", "sales"),
            k("ACCT#acme", "CATNAME#sales")
        );
        assert_eq!(
            namespace("c1", &p(&["a", "b"])),
            k("CAT#c1", "NS#02#a\u{1F}b")
        );
        assert_eq!(relation("c1", &p(&["a"]), "t"), k("CAT#c1", "REL#a\u{1E}t"));
        assert_eq!(capture_pointer("c1", "r1"), k("CAT#c1", "CAPTURE#r1"));
        assert_eq!(capture_attempt("c1", "r1"), k("CAT#c1", "CAPATTEMPT#r1"));
        assert_eq!(capture_sweep("c1"), k("SYSTEM", "CAPSWEEP#c1"));
        assert_eq!(
            validation_error("c1", "r1", "v7", 3),
            k("CAT#c1", "VALERR#r1#v7#000003")
        );
        assert_eq!(
            credential_generation("acme", "i1", 7),
            k("ACCT#acme", "CREDGEN#i1#00000000000000000007")
        );
        // Receipts: `IDEM#` and the hex SHA-256 of the client's key.
        let sha_abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(
            account_receipt("acme", "abc"),
            k("ACCT#acme", &format!("IDEM#{sha_abc}"))
        );
        assert_eq!(
            system_receipt("abc"),
            k("SYSTEM", &format!("IDEM#{sha_abc}"))
        );
        // Index catalogs share the account partition; their contents have their own.
        assert_eq!(
            index_catalog::index_catalog("acme", "ix"),
            k("ACCT#acme", "IXC#ix")
        );
        assert_eq!(
            index_catalog::mapping("acme", "ix", &["a".into(), "b".into()], "t"),
            k("IXC#acme#ix", "IDX#a\u{1F}b\u{1E}t")
        );
        assert_eq!(
            index_catalog::warehouse_claim("s3://b/p/"),
            k("IXWHCLAIM", "s3://b/p/")
        );
        // Event logs: a catalog's and an account's, under the same sort keys.
        assert_eq!(
            log_event_pending("CAT#c1", 7, "e1"),
            k("CAT#c1", "EVQ#0000000000007#e1")
        );
        assert_eq!(
            log_event("ACCT#acme", 3),
            k("ACCT#acme", "EVT#00000000000000000003")
        );
        assert_eq!(log_head("ACCT#acme"), k("ACCT#acme", "EVTHEAD"));
        assert_eq!(catalog_of_pk(&catalog_pk("c1")), Some("c1"));
        assert_eq!(account_of_pk(&account_pk("acme")), Some("acme"));
        assert_eq!(catalog_of_pk("ACCT#acme"), None);
        assert_eq!(account_of_pk("CAT#c1"), None);
        assert_eq!(account_of_pk("ACCT#"), None);
    }

    /// The account's event log shares the account partition: no other sort key of it may
    /// start with the log's prefixes (a listing of one would read the other).
    #[test]
    fn the_account_log_clashes_with_no_other_account_item() {
        let others = [
            account("a").sk,
            account_fence("a").sk,
            catalog("a", "c").sk,
            catalog_name("a", "n").sk,
            integration("a", "i").sk,
            integration_name("a", "n").sk,
            integration_fence("a", "i").sk,
            credential_generation("a", "i", 1).sk,
            integration_dependency("a", "i", "o").sk,
            overlay("a", "o").sk,
            overlay_name("a", "n").sk,
            overlay_status("a", "o").sk,
            overlay_fence("a", "o").sk,
            catalog_dependency("a", "c", "o").sk,
            scheduler_state("a", "i").sk,
            acl_generation("a").sk,
            role("a", "r").sk,
            grant("a", "g").sk,
            service_principal("a", "p").sk,
            account_receipt("a", "k").sk,
            audit_refusal("a", 1, "r").sk,
            index_catalog::index_catalog("a", "ix").sk,
        ];
        for sk in others {
            for prefix in [EVENT_PENDING_PREFIX, EVENT_LOG_PREFIX] {
                assert!(!sk.starts_with(prefix), "{sk} under {prefix}");
            }
            assert_ne!(sk, log_head("ACCT#a").sk);
        }
    }
}
