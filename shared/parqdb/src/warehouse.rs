//! Which warehouses a tenant may use: the location rules of a host and the binding of a
//! warehouse prefix to one account. One reusable place for every resource that names a
//! warehouse (ParqDB index catalogs, and any catalog endpoint that takes a warehouse):
//!
//! 1. [`WarehousePolicy::admit`] before anything else: `s3://` warehouses lie at least one
//!    directory below the bucket; `file://` warehouses exist only on hosts whose operator
//!    configured a root (`flotilla serve`), and lie strictly below it. A pure string check:
//!    no path outside the root is ever opened, so nothing can be learnt about it.
//! 2. [`claim_ops`] in the same metastore transaction that creates the resource: the
//!    warehouse's *tenant prefix* (the first directory below the bucket or the root) belongs
//!    to the first account that uses it; any other account is refused. Every warehouse of an
//!    account lies inside one of its own tenant prefixes, so warehouses of two accounts never
//!    overlap (neither contains the other).
//!
//! Race freedom: the claim is one item per tenant prefix (`IXWHCLAIM`, sort key the prefix),
//! created with an absence condition or asserted at the version read. Two accounts claiming
//! overlapping warehouses claim the *same* item, so at most one of their transactions
//! applies; a later reader sees the winner's claim. [`release_ops`] (account delete) removes
//! the claims an account holds, found through the account's reverse items.

use std::path::{Path, PathBuf};

use flotilla_metastore::{Condition, Consistency, Key, Metastore, Op};
use serde::{Deserialize, Serialize};

use crate::error::{IndexCatalogError, Result};
use crate::keys;
use crate::location::{LocationError, Warehouse, WarehouseKind};

/// The location rules of one host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WarehousePolicy {
    /// Absolute, canonical (symlink-free) directory below which `file://` warehouses may
    /// lie, ending with `/`. `None`: `file://` warehouses are refused (AWS hosts).
    file_root: Option<String>,
}

impl WarehousePolicy {
    /// `s3://` warehouses only: the policy of every host without a local warehouse root.
    pub const S3_ONLY: WarehousePolicy = WarehousePolicy { file_root: None };

    /// Also admits `file://` warehouses below `root`, which is created (mode 0700) when
    /// missing and canonicalized, so that a warehouse path can be compared with it as text.
    pub fn with_file_root(root: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        let canonical = std::fs::canonicalize(root)?;
        let mut text = canonical
            .to_str()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the warehouse root is not valid UTF-8",
                )
            })?
            .to_owned();
        if !text.ends_with('/') {
            text.push('/');
        }
        if text == "/" {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the warehouse root must not be the filesystem root",
            ));
        }
        Ok(Self {
            file_root: Some(text),
        })
    }

    /// The `file://` warehouse root, when this host has one.
    pub fn file_root(&self) -> Option<&str> {
        self.file_root.as_deref()
    }

    /// Checks a (syntactically valid) warehouse against the host's location rules. The
    /// message never depends on the filesystem.
    pub fn admit(&self, warehouse: &Warehouse) -> Result<(), LocationError> {
        self.tenant_prefix(warehouse).map(|_| ())
    }

    /// The prefix the warehouse binds to an account: `s3://bucket/first/` or
    /// `file://{root}first/`.
    pub fn tenant_prefix(&self, warehouse: &Warehouse) -> Result<String, LocationError> {
        match warehouse.kind() {
            WarehouseKind::S3 { bucket, prefix } => {
                let Some((first, _)) = prefix.split_once('/') else {
                    return Err(LocationError(
                        "an s3 warehouse must lie at least one directory below the bucket (s3://bucket/dir/)"
                            .into(),
                    ));
                };
                Ok(format!("s3://{bucket}/{first}/"))
            }
            WarehouseKind::File { root } => {
                let Some(allowed) = &self.file_root else {
                    return Err(LocationError(
                        "file:// warehouses are not available on this host".into(),
                    ));
                };
                let below = root
                    .strip_prefix(allowed.as_str())
                    .filter(|rest| !rest.is_empty());
                let Some(rest) = below else {
                    return Err(LocationError(format!(
                        "a file:// warehouse must lie below the warehouse root file://{allowed}"
                    )));
                };
                let first = rest.split('/').next().unwrap_or_default();
                Ok(format!("file://{allowed}{first}/"))
            }
        }
    }

    /// The account whose host-assigned home `warehouse` lies in, if any: on a host with a
    /// `file://` root, catalogs without a warehouse of their own live at
    /// `{root}{account}/{catalog id}/`, so every first directory below the root spelt like an
    /// account id (`[a-z0-9-]{1,63}`, compared in ASCII lowercase so that a case-insensitive
    /// filesystem cannot alias it) is that account's home, reserved for it whether or not the
    /// account exists yet. A pure string check, like [`Self::admit`].
    pub fn home_account(&self, warehouse: &Warehouse) -> Option<String> {
        let WarehouseKind::File { root } = warehouse.kind() else {
            return None;
        };
        let rest = root.strip_prefix(self.file_root.as_deref()?)?;
        let first = rest.split('/').next()?.to_ascii_lowercase();
        flotilla_domain::names::validate_account_id(&first)
            .is_ok()
            .then_some(first)
    }

    /// Refuses a warehouse of `account` that lies in another account's host-assigned home
    /// (see [`Self::home_account`]): it equals that home, lies inside it (a catalog
    /// directory of that account) or, at the root itself, would contain it (refused by
    /// [`Self::admit`] already). The message names only the directory the caller gave.
    pub fn check_home(&self, account: &str, warehouse: &Warehouse) -> Result<(), LocationError> {
        match self.home_account(warehouse) {
            Some(home) if home != account => {
                let root = self.file_root.as_deref().unwrap_or_default();
                Err(LocationError(format!(
                    "the directory file://{root}{home}/ is reserved as the home of account id {home:?} (catalogs without a warehouse of their own); a file:// warehouse lies in your own account's directory file://{root}{account}/ or below a directory whose name is not an account id"
                )))
            }
            _ => Ok(()),
        }
    }

    /// The local directory of a `file://` warehouse this policy admits.
    pub fn local_dir(&self, warehouse: &Warehouse) -> Option<PathBuf> {
        match warehouse.kind() {
            WarehouseKind::File { root } if self.admit(warehouse).is_ok() => {
                Some(PathBuf::from(root))
            }
            _ => None,
        }
    }
}

/// The claim of a tenant prefix.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ClaimRecord {
    prefix: String,
    account: String,
}

/// The error for a warehouse whose tenant prefix another account holds. Names neither the
/// account nor anything about its resources.
fn claimed_elsewhere(prefix: &str) -> IndexCatalogError {
    IndexCatalogError::WarehouseNotAllowed {
        message: format!(
            "warehouse: the prefix {prefix} belongs to another account; choose a warehouse in a prefix of your own"
        ),
    }
}

/// The operations that bind `warehouse`'s tenant prefix to `account`, to be added to the
/// transaction that creates the resource naming the warehouse. Refuses a warehouse the policy
/// does not admit (`INVALID_ARGUMENT`) or whose prefix another account holds
/// (`WAREHOUSE_NOT_ALLOWED`). When that transaction fails its conditions, re-read and call
/// again: a concurrent claim by another account is then refused here.
pub async fn claim_ops(
    store: &dyn Metastore,
    policy: &WarehousePolicy,
    account: &str,
    warehouse: &Warehouse,
) -> Result<Vec<Op>> {
    let prefix = policy
        .tenant_prefix(warehouse)
        .map_err(|e| IndexCatalogError::invalid_argument(format!("warehouse: {e}")))?;
    // Another account's host-assigned home is never claimable, whoever claimed it first.
    policy
        .check_home(account, warehouse)
        .map_err(|e| IndexCatalogError::WarehouseNotAllowed {
            message: format!("warehouse: {e}"),
        })?;
    let key = keys::warehouse_claim(&prefix);
    let reverse = Op::put(
        keys::account_warehouse_claim(account, &prefix),
        body(&ClaimRecord {
            prefix: prefix.clone(),
            account: account.to_owned(),
        })?,
    );
    match store.get(&key, Consistency::Strong).await? {
        None => Ok(vec![
            Op::create(
                key,
                body(&ClaimRecord {
                    prefix,
                    account: account.to_owned(),
                })?,
            ),
            reverse,
        ]),
        Some(item) => {
            let claim: ClaimRecord = item.json().map_err(|e| IndexCatalogError::Internal {
                message: format!("warehouse claim: {e}"),
            })?;
            if claim.account != account {
                return Err(claimed_elsewhere(&prefix));
            }
            // Still ours when the transaction applies (not released meanwhile).
            Ok(vec![
                Op::Check {
                    key,
                    condition: Condition::Version(item.version),
                },
                reverse,
            ])
        }
    }
}

/// Whether the tenant prefix of `warehouse` is held by an account other than `account` (for
/// explaining a failed transaction).
pub async fn claimed_by_other(
    store: &dyn Metastore,
    policy: &WarehousePolicy,
    account: &str,
    warehouse: &Warehouse,
) -> Result<Option<IndexCatalogError>> {
    let Ok(prefix) = policy.tenant_prefix(warehouse) else {
        return Ok(None);
    };
    if let Err(e) = policy.check_home(account, warehouse) {
        return Ok(Some(IndexCatalogError::WarehouseNotAllowed {
            message: format!("warehouse: {e}"),
        }));
    }
    let Some(item) = store
        .get(&keys::warehouse_claim(&prefix), Consistency::Strong)
        .await?
    else {
        return Ok(None);
    };
    let claim: ClaimRecord = item.json().map_err(|e| IndexCatalogError::Internal {
        message: format!("warehouse claim: {e}"),
    })?;
    Ok((claim.account != account).then(|| claimed_elsewhere(&prefix)))
}

/// For an account's reverse claim item (sort key `WHCLAIM#{prefix}` in the account
/// partition), the operation that releases the claim, if `item` is one. Only a claim still
/// held by `account` is deleted.
pub async fn release_ops(
    store: &dyn Metastore,
    account: &str,
    item_sort_key: &str,
) -> Result<Vec<Op>> {
    let Some(prefix) = item_sort_key.strip_prefix(keys::ACCOUNT_CLAIM_PREFIX) else {
        return Ok(Vec::new());
    };
    let key = keys::warehouse_claim(prefix);
    let Some(item) = store.get(&key, Consistency::Strong).await? else {
        return Ok(Vec::new());
    };
    let claim: ClaimRecord = item.json().map_err(|e| IndexCatalogError::Internal {
        message: format!("warehouse claim: {e}"),
    })?;
    if claim.account != account {
        return Ok(Vec::new());
    }
    Ok(vec![Op::delete_at(key, item.version)])
}

fn body<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| IndexCatalogError::Internal {
        message: format!("cannot encode record: {e}"),
    })
}

/// The claim key of a prefix, for tests and tooling.
pub fn claim_key(prefix: &str) -> Key {
    keys::warehouse_claim(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wh(s: &str) -> Warehouse {
        Warehouse::parse(s).unwrap()
    }

    #[test]
    fn s3_warehouses_bind_their_first_directory() {
        let p = WarehousePolicy::S3_ONLY;
        assert_eq!(
            p.tenant_prefix(&wh("s3://bucket/acme/lake/")).unwrap(),
            "s3://bucket/acme/"
        );
        assert_eq!(
            p.tenant_prefix(&wh("s3://bucket/acme/")).unwrap(),
            "s3://bucket/acme/"
        );
        assert!(p.admit(&wh("s3://bucket/")).is_err());
        let e = p.admit(&wh("file:///etc/")).unwrap_err();
        assert!(e.0.contains("not available"), "{e}");
    }

    #[test]
    fn file_warehouses_lie_strictly_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let p = WarehousePolicy::with_file_root(&dir.path().join("warehouses")).unwrap();
        let root = p.file_root().unwrap().to_owned();
        assert!(root.ends_with("/warehouses/"));
        assert_eq!(
            p.tenant_prefix(&wh(&format!("file://{root}acme/lake/")))
                .unwrap(),
            format!("file://{root}acme/")
        );
        for outside in [
            "file:///etc/".to_owned(),
            "file:///proc/self/".to_owned(),
            format!("file://{root}"),
            format!("file://{}", root.trim_end_matches("warehouses/")),
            format!("file://{}x/", root.trim_end_matches('/')),
        ] {
            let e = p.admit(&wh(&outside)).unwrap_err();
            assert!(e.0.contains("below the warehouse root"), "{outside}: {e}");
        }
    }

    #[test]
    fn account_homes_below_a_file_root_are_reserved_for_their_account() {
        let dir = tempfile::tempdir().unwrap();
        let p = WarehousePolicy::with_file_root(&dir.path().join("warehouse")).unwrap();
        let root = p.file_root().unwrap().to_owned();
        for (uri, home) in [
            (format!("file://{root}acme/"), Some("acme")),
            (format!("file://{root}acme/0192/db/"), Some("acme")),
            (format!("file://{root}ACME/x/"), Some("acme")),
            (
                format!("file://{root}not-yet-an-account/"),
                Some("not-yet-an-account"),
            ),
            (format!("file://{root}.shared/"), None),
            (format!("file://{root}team_lake/"), None),
            ("s3://bucket/acme/".to_owned(), None),
        ] {
            let w = wh(&uri);
            assert_eq!(p.home_account(&w).as_deref(), home, "{uri}");
            assert_eq!(p.check_home("beta", &w).is_ok(), home.is_none(), "{uri}");
            if let Some(home) = home {
                assert!(p.check_home(home, &w).is_ok(), "{uri}");
            }
        }
        // No file root: nothing is a home.
        let w = wh("file:///srv/acme/");
        assert_eq!(WarehousePolicy::S3_ONLY.home_account(&w), None);
    }
}
