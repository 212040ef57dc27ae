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
//! Separators: `0x1F` joins namespace levels and `0x1E` separates a namespace from a
//! relation name. Names can never contain control characters (see `names`), so neither
//! separator can occur inside a segment and a prefix never matches across a boundary.

use crate::names::NamespacePath;

pub const NS_SEP: char = '\u{1F}';
pub const REL_SEP: char = '\u{1E}';

pub const SYSTEM_PK: &str = "SYSTEM";

fn ns_str(path: &NamespacePath) -> String {
    path.segments().join(&NS_SEP.to_string())
}

/// `(pk, sk)` pairs as `flotilla_metastore::Key`-compatible tuples.
pub type KeyParts = (String, String);

// ---- deployment-wide -------------------------------------------------------------------

/// The listing entry of an account (`SYSTEM` / `ACCOUNT#{id}`).
pub fn account_listing(account: &str) -> KeyParts {
    (SYSTEM_PK.into(), format!("ACCOUNT#{account}"))
}
pub const ACCOUNT_LISTING_PREFIX: &str = "ACCOUNT#";

/// The directory authority marker: present once catalog-finalize ran.
pub fn directory_authority() -> KeyParts {
    (SYSTEM_PK.into(), "DIRECTORY_AUTHORITY".into())
}

/// Idempotency receipts of operator-scoped creates (accounts).
pub fn system_idempotency(key_hash: &str) -> KeyParts {
    (SYSTEM_PK.into(), format!("IDEM#{key_hash}"))
}

// ---- account partition -----------------------------------------------------------------

pub fn account_pk(account: &str) -> String {
    format!("ACCT#{account}")
}

pub fn account(account: &str) -> KeyParts {
    (account_pk(account), "ACCOUNT".into())
}

/// The durable account deletion fence. Every create asserts its absence.
pub fn account_fence(account: &str) -> KeyParts {
    (account_pk(account), "FENCE#DELETE".into())
}

pub fn account_idempotency(account: &str, key_hash: &str) -> KeyParts {
    (account_pk(account), format!("IDEM#{key_hash}"))
}
pub const IDEMPOTENCY_PREFIX: &str = "IDEM#";

pub fn catalog(account: &str, catalog_id: &str) -> KeyParts {
    (account_pk(account), format!("CAT#{catalog_id}"))
}
pub const CATALOG_PREFIX: &str = "CAT#";

/// Unique display name of a catalog within the account; body holds the catalog id.
pub fn catalog_name(account: &str, name: &str) -> KeyParts {
    (account_pk(account), format!("CATNAME#{name}"))
}

pub fn integration(account: &str, id: &str) -> KeyParts {
    (account_pk(account), format!("INT#{id}"))
}
pub const INTEGRATION_PREFIX: &str = "INT#";

pub fn integration_name(account: &str, name: &str) -> KeyParts {
    (account_pk(account), format!("INTNAME#{name}"))
}

/// Durable integration deletion fence (cascade delete).
pub fn integration_fence(account: &str, id: &str) -> KeyParts {
    (account_pk(account), format!("INTFENCE#{id}"))
}

/// A credential generation not (or no longer) referenced by its published integration:
/// prepared before publication, or retiring after a rotation (see `sweep-credentials`).
pub fn credential_generation(account: &str, integration_id: &str, generation: u64) -> KeyParts {
    (
        account_pk(account),
        format!("CREDGEN#{integration_id}#{generation:020}"),
    )
}
pub const CREDENTIAL_GENERATION_PREFIX: &str = "CREDGEN#";
pub fn credential_generations_prefix(integration_id: &str) -> String {
    format!("CREDGEN#{integration_id}#")
}

/// Dependency record: overlay `overlay_id` uses integration `integration_id`.
pub fn integration_dependency(account: &str, integration_id: &str, overlay_id: &str) -> KeyParts {
    (
        account_pk(account),
        format!("INTDEP#{integration_id}#{overlay_id}"),
    )
}
pub fn integration_dependency_prefix(integration_id: &str) -> String {
    format!("INTDEP#{integration_id}#")
}

pub fn overlay(account: &str, id: &str) -> KeyParts {
    (account_pk(account), format!("OVL#{id}"))
}
pub const OVERLAY_PREFIX: &str = "OVL#";

pub fn overlay_name(account: &str, name: &str) -> KeyParts {
    (account_pk(account), format!("OVLNAME#{name}"))
}

/// The overlay's status (last reconciliation summary, scheduling state).
pub fn overlay_status(account: &str, id: &str) -> KeyParts {
    (account_pk(account), format!("OVLSTATUS#{id}"))
}

/// Durable overlay deletion fence.
pub fn overlay_fence(account: &str, id: &str) -> KeyParts {
    (account_pk(account), format!("OVLFENCE#{id}"))
}

/// Dependency record: overlay `overlay_id` targets catalog `catalog_id`.
pub fn catalog_dependency(account: &str, catalog_id: &str, overlay_id: &str) -> KeyParts {
    (
        account_pk(account),
        format!("CATDEP#{catalog_id}#{overlay_id}"),
    )
}
pub fn catalog_dependency_prefix(catalog_id: &str) -> String {
    format!("CATDEP#{catalog_id}#")
}

// ---- catalog partition -----------------------------------------------------------------

pub fn catalog_pk(catalog_id: &str) -> String {
    format!("CAT#{catalog_id}")
}

/// Transient guard installed by a catalog delete while it proves emptiness; creates in the
/// catalog assert its absence. A stale guard (crashed deleter) is removed by the next
/// writer that meets it.
pub fn catalog_guard(catalog_id: &str) -> KeyParts {
    (catalog_pk(catalog_id), "GUARD#DELETE".into())
}

/// A namespace. The depth prefix makes "children of P" one prefix query.
pub fn namespace(catalog_id: &str, path: &NamespacePath) -> KeyParts {
    (
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
pub fn namespace_guard(catalog_id: &str, path: &NamespacePath) -> KeyParts {
    (catalog_pk(catalog_id), format!("NSGUARD#{}", ns_str(path)))
}

/// A relation (table or view): one name slot per namespace, so a name is never both.
pub fn relation(catalog_id: &str, ns: &NamespacePath, name: &str) -> KeyParts {
    (
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
pub fn namespace_claim(catalog_id: &str, path: &NamespacePath, overlay_id: &str) -> KeyParts {
    (
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
pub fn directory_generation(catalog_id: &str) -> KeyParts {
    (catalog_pk(catalog_id), "DIRGEN".into())
}

/// Decodes the namespace and name of a relation sort key.
pub fn parse_relation_sk(sk: &str) -> Option<(Vec<String>, String)> {
    let rest = sk.strip_prefix(RELATION_PREFIX)?;
    let (ns, name) = rest.split_once(REL_SEP)?;
    Some((
        ns.split(NS_SEP).map(str::to_owned).collect(),
        name.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &[&str]) -> NamespacePath {
        NamespacePath::new(s.iter().map(|x| x.to_string()).collect()).unwrap()
    }

    #[test]
    fn child_prefix_does_not_match_sibling_with_common_prefix() {
        let (_, ab) = namespace("c", &p(&["a", "b"]));
        let (_, abc) = namespace("c", &p(&["ab", "c"]));
        let prefix = namespace_children_prefix(Some(&p(&["a"])));
        assert!(ab.starts_with(&prefix));
        assert!(!abc.starts_with(&prefix));
    }

    #[test]
    fn relations_prefix_is_exact_namespace() {
        let (_, in_a) = relation("c", &p(&["a"]), "t");
        let (_, in_ab) = relation("c", &p(&["a", "b"]), "t");
        let prefix = relations_in_prefix(&p(&["a"]));
        assert!(in_a.starts_with(&prefix));
        assert!(!in_ab.starts_with(&prefix));
        assert_eq!(
            parse_relation_sk(&in_ab),
            Some((vec!["a".into(), "b".into()], "t".into()))
        );
    }
}
