//! Every metastore key this crate reads or writes. The table in `docs/parqdb.md` lists the
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

use flotilla_metastore::Key;

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

/// The one partition of warehouse prefix claims (see [`crate::warehouse`]): which account a
/// tenant prefix belongs to.
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

/// The account partition that holds index catalog records.
pub fn account_partition(account: &str) -> String {
    format!("ACCT#{account}")
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
