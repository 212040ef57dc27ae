//! What access control stores and decides on: privileges, securables, and the records of
//! service principals, roles, memberships and grants.

use std::fmt;

use flotilla_domain::keys;
use flotilla_domain::model::etag_for;
use flotilla_domain::names::{NamespacePath, validate_resource_id, validate_segment};
use flotilla_metastore::Key;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// What a grant allows. Catalog objects and index catalogs rank `READ` < `WRITE` <
/// `MANAGE`; integrations rank `USE` < `MANAGE`; the four account privileges stand alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Privilege {
    AccountAdmin,
    CatalogCreate,
    IntegrationCreate,
    IndexCatalogCreate,
    Read,
    Write,
    Manage,
    Use,
}

impl Privilege {
    pub const ALL: [Privilege; 8] = [
        Privilege::AccountAdmin,
        Privilege::CatalogCreate,
        Privilege::IntegrationCreate,
        Privilege::IndexCatalogCreate,
        Privilege::Read,
        Privilege::Write,
        Privilege::Manage,
        Privilege::Use,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Privilege::AccountAdmin => "ACCOUNT_ADMIN",
            Privilege::CatalogCreate => "CATALOG_CREATE",
            Privilege::IntegrationCreate => "INTEGRATION_CREATE",
            Privilege::IndexCatalogCreate => "INDEX_CATALOG_CREATE",
            Privilege::Read => "READ",
            Privilege::Write => "WRITE",
            Privilege::Manage => "MANAGE",
            Privilege::Use => "USE",
        }
    }

    /// Privileges held on the account itself.
    pub fn is_account_level(self) -> bool {
        matches!(
            self,
            Privilege::AccountAdmin
                | Privilege::CatalogCreate
                | Privilege::IntegrationCreate
                | Privilege::IndexCatalogCreate
        )
    }

    /// Whether a grant of this privilege can name `on` (the table of docs/access-control.md).
    pub fn applies_to(self, on: SecurableType) -> bool {
        use SecurableType as T;
        match self {
            p if p.is_account_level() => on == T::Account,
            Privilege::Read | Privilege::Write => matches!(
                on,
                T::Catalog | T::Namespace | T::Table | T::View | T::IndexCatalog
            ),
            Privilege::Manage => !matches!(on, T::Account),
            Privilege::Use => on == T::Integration,
            _ => false,
        }
    }

    /// Whether holding `self` includes `wanted` (on the same securable).
    pub fn includes(self, wanted: Privilege) -> bool {
        use Privilege as P;
        self == wanted
            || matches!(
                (self, wanted),
                (P::Write, P::Read)
                    | (P::Manage, P::Read)
                    | (P::Manage, P::Write)
                    | (P::Manage, P::Use)
            )
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kinds of securables (`securable_type` in listings and the explain route).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SecurableType {
    Account,
    Catalog,
    Namespace,
    Table,
    View,
    Integration,
    Overlay,
    IndexCatalog,
}

impl SecurableType {
    pub fn parse(s: &str) -> Result<Self> {
        serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
            Error::invalid(
                "securable_type must be one of ACCOUNT, CATALOG, NAMESPACE, TABLE, VIEW, \
                 INTEGRATION, OVERLAY, INDEX_CATALOG",
            )
        })
    }

    fn word(self) -> &'static str {
        match self {
            SecurableType::Account => "account",
            SecurableType::Catalog => "catalog",
            SecurableType::Namespace => "namespace",
            SecurableType::Table => "table",
            SecurableType::View => "view",
            SecurableType::Integration => "integration",
            SecurableType::Overlay => "overlay",
            SecurableType::IndexCatalog => "index catalog",
        }
    }
}

/// Something a grant can name. Catalog objects are named by catalog id and path, so a grant
/// on a container covers everything below it; a rename moves the grants of a table or view
/// with it, and deleting any securable deletes the grants that name it (or anything below
/// it) in the same protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum Securable {
    Account,
    Catalog {
        catalog_id: String,
    },
    Namespace {
        catalog_id: String,
        path: Vec<String>,
    },
    Table {
        catalog_id: String,
        path: Vec<String>,
        name: String,
    },
    View {
        catalog_id: String,
        path: Vec<String>,
        name: String,
    },
    Integration {
        integration_id: String,
    },
    Overlay {
        overlay_id: String,
    },
    IndexCatalog {
        name: String,
    },
}

impl Securable {
    pub fn catalog(id: &str) -> Self {
        Securable::Catalog {
            catalog_id: id.to_owned(),
        }
    }

    pub fn namespace(catalog_id: &str, path: &NamespacePath) -> Self {
        Securable::Namespace {
            catalog_id: catalog_id.to_owned(),
            path: path.segments().to_vec(),
        }
    }

    /// The namespace at `path`, or the catalog for the root (where namespaces are created).
    pub fn container(catalog_id: &str, path: Option<&NamespacePath>) -> Self {
        match path {
            Some(p) => Self::namespace(catalog_id, p),
            None => Self::catalog(catalog_id),
        }
    }

    pub fn relation(
        catalog_id: &str,
        path: &NamespacePath,
        name: &str,
        kind: flotilla_domain::model::RelationKind,
    ) -> Self {
        let (catalog_id, path, name) = (
            catalog_id.to_owned(),
            path.segments().to_vec(),
            name.to_owned(),
        );
        match kind {
            flotilla_domain::model::RelationKind::Table => Securable::Table {
                catalog_id,
                path,
                name,
            },
            flotilla_domain::model::RelationKind::View => Securable::View {
                catalog_id,
                path,
                name,
            },
        }
    }

    pub fn table(catalog_id: &str, path: &NamespacePath, name: &str) -> Self {
        Self::relation(
            catalog_id,
            path,
            name,
            flotilla_domain::model::RelationKind::Table,
        )
    }

    pub fn integration(id: &str) -> Self {
        Securable::Integration {
            integration_id: id.to_owned(),
        }
    }

    pub fn overlay(id: &str) -> Self {
        Securable::Overlay {
            overlay_id: id.to_owned(),
        }
    }

    pub fn index_catalog(name: &str) -> Self {
        Securable::IndexCatalog {
            name: name.to_owned(),
        }
    }

    pub fn kind(&self) -> SecurableType {
        match self {
            Securable::Account => SecurableType::Account,
            Securable::Catalog { .. } => SecurableType::Catalog,
            Securable::Namespace { .. } => SecurableType::Namespace,
            Securable::Table { .. } => SecurableType::Table,
            Securable::View { .. } => SecurableType::View,
            Securable::Integration { .. } => SecurableType::Integration,
            Securable::Overlay { .. } => SecurableType::Overlay,
            Securable::IndexCatalog { .. } => SecurableType::IndexCatalog,
        }
    }

    /// The catalog a catalog object lives in.
    pub fn catalog_id(&self) -> Option<&str> {
        match self {
            Securable::Catalog { catalog_id }
            | Securable::Namespace { catalog_id, .. }
            | Securable::Table { catalog_id, .. }
            | Securable::View { catalog_id, .. } => Some(catalog_id),
            _ => None,
        }
    }

    /// The container a drop is decided on: a relation's namespace, a namespace's parent (or
    /// its catalog). `None` for the rest, whose deletion needs `MANAGE` on themselves.
    pub fn parent(&self) -> Option<Securable> {
        match self {
            Securable::Table {
                catalog_id, path, ..
            }
            | Securable::View {
                catalog_id, path, ..
            } => Some(Securable::Namespace {
                catalog_id: catalog_id.clone(),
                path: path.clone(),
            }),
            Securable::Namespace { catalog_id, path } if path.len() > 1 => {
                Some(Securable::Namespace {
                    catalog_id: catalog_id.clone(),
                    path: path[..path.len() - 1].to_vec(),
                })
            }
            Securable::Namespace { catalog_id, .. } => Some(Securable::catalog(catalog_id)),
            _ => None,
        }
    }

    /// Whether `self` is `other` or contains it (a grant on `self` applies to `other`).
    pub fn covers(&self, other: &Securable) -> bool {
        use Securable as S;
        match (self, other) {
            (S::Account, _) => true,
            (S::Catalog { catalog_id: a }, o) => o.catalog_id() == Some(a.as_str()),
            (
                S::Namespace {
                    catalog_id: a,
                    path: p,
                },
                S::Namespace {
                    catalog_id: b,
                    path: q,
                },
            )
            | (
                S::Namespace {
                    catalog_id: a,
                    path: p,
                },
                S::Table {
                    catalog_id: b,
                    path: q,
                    ..
                }
                | S::View {
                    catalog_id: b,
                    path: q,
                    ..
                },
            ) => a == b && q.starts_with(p),
            (a, b) => a == b,
        }
    }

    /// Checks ids, paths and names before anything is read.
    pub fn validate(&self) -> Result<()> {
        let id = |what: &str, v: &str| {
            validate_resource_id(v).map_err(|_| Error::invalid(format!("{what} is malformed")))
        };
        let path = |p: &[String]| {
            NamespacePath::new(p.to_vec())
                .map(|_| ())
                .map_err(Error::from)
        };
        match self {
            Securable::Account => Ok(()),
            Securable::Catalog { catalog_id } => id("catalog_id", catalog_id),
            Securable::Namespace {
                catalog_id,
                path: p,
            } => {
                id("catalog_id", catalog_id)?;
                path(p)
            }
            Securable::Table {
                catalog_id,
                path: p,
                name,
            }
            | Securable::View {
                catalog_id,
                path: p,
                name,
            } => {
                id("catalog_id", catalog_id)?;
                path(p)?;
                Ok(validate_segment("name", name)?)
            }
            Securable::Integration { integration_id } => id("integration_id", integration_id),
            Securable::Overlay { overlay_id } => id("overlay_id", overlay_id),
            Securable::IndexCatalog { name } => Ok(validate_segment("index catalog name", name)?),
        }
    }

    /// The record that must exist while a grant names this securable (asserted in the
    /// grant's transaction). The account needs none beyond the account guards.
    pub fn record_key(&self, account: &str) -> Option<Key> {
        let ns = |p: &[String]| NamespacePath::new(p.to_vec()).ok();
        match self {
            Securable::Account => None,
            Securable::Catalog { catalog_id } => Some(keys::catalog(account, catalog_id)),
            Securable::Namespace { catalog_id, path } => {
                Some(keys::namespace(catalog_id, &ns(path)?))
            }
            Securable::Table {
                catalog_id,
                path,
                name,
            }
            | Securable::View {
                catalog_id,
                path,
                name,
            } => Some(keys::relation(catalog_id, &ns(path)?, name)),
            Securable::Integration { integration_id } => {
                Some(keys::integration(account, integration_id))
            }
            Securable::Overlay { overlay_id } => Some(keys::overlay(account, overlay_id)),
            Securable::IndexCatalog { name } => {
                Some(keys::index_catalog::index_catalog(account, name))
            }
        }
    }

    /// The answer a route gives for this securable when it does not exist: what a caller
    /// that may not see it gets too, so that the two cannot be told apart.
    pub fn absent(&self) -> Error {
        let path = |p: &[String]| match NamespacePath::new(p.to_vec()) {
            Ok(p) => format!("namespace {p}"),
            Err(_) => "namespace".to_owned(),
        };
        match self {
            Securable::Account => Error::not_found("account"),
            Securable::Catalog { .. } => Error::not_found("catalog"),
            Securable::Namespace { path: p, .. } => Error::not_found(&path(p)),
            Securable::Table { .. } => Error::not_found("table"),
            Securable::View { .. } => Error::not_found("view"),
            Securable::Integration { .. } => Error::not_found("integration"),
            Securable::Overlay { .. } => Error::not_found("overlay"),
            Securable::IndexCatalog { name } => Error::new(
                crate::error::ErrorKind::NotFound,
                format!("index catalog {name:?} does not exist"),
            ),
        }
    }

    /// A short description for messages ("the catalog", "table \"t\"").
    pub fn describe(&self) -> String {
        match self {
            Securable::Account => "the account".to_owned(),
            Securable::Table { name, .. } | Securable::View { name, .. } => {
                format!("{} {name:?}", self.kind().word())
            }
            Securable::Namespace { path, .. } => match NamespacePath::new(path.clone()) {
                Ok(p) => format!("namespace {p}"),
                Err(_) => "the namespace".to_owned(),
            },
            other => format!("this {}", other.kind().word()),
        }
    }

    pub fn to_api(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

// ---- records ---------------------------------------------------------------------------

/// A service principal: authenticates with OAuth2 client credentials. Only a salted hash of
/// its secret is kept (PHC string); the secret itself is shown once, at creation or rotation.
#[derive(Clone, Serialize, Deserialize)]
pub struct ServicePrincipalRecord {
    pub id: String,
    pub name: String,
    pub client_id: String,
    pub secret_hash: String,
    /// Incremented by every rotation: tokens carry it, so a rotation ends the old ones.
    pub secret_generation: u64,
    pub revision: u64,
    pub create_time: String,
    pub update_time: String,
}

impl fmt::Debug for ServicePrincipalRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServicePrincipalRecord")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("secret_generation", &self.secret_generation)
            .finish_non_exhaustive()
    }
}

impl ServicePrincipalRecord {
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "client_id": self.client_id,
            "secret_generation": self.secret_generation,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoleRecord {
    pub id: String,
    pub name: String,
    pub revision: u64,
    pub create_time: String,
    pub update_time: String,
}

impl RoleRecord {
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberRecord {
    pub role: String,
    pub member: String,
    pub create_time: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrantRecord {
    pub id: String,
    pub role: String,
    pub privilege: Privilege,
    pub securable: Securable,
    pub revision: u64,
    pub create_time: String,
    /// The log identity of the caller that granted it.
    #[serde(default)]
    pub granted_by: String,
}

impl GrantRecord {
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "role": self.role,
            "privilege": self.privilege,
            "securable": self.securable,
            "granted_by": self.granted_by,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
        })
    }
}

/// A role member as written in routes and records: a principal name, or `group:<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Member {
    Principal(String),
    Group(String),
}

pub use crate::auth::{GROUP_PREFIX, validate_principal_name};

impl Member {
    pub fn parse(s: &str) -> Result<Self> {
        match s.strip_prefix(GROUP_PREFIX) {
            Some(g) => {
                validate_principal_name("group name", g)?;
                Ok(Member::Group(g.to_owned()))
            }
            None => {
                validate_principal_name("principal name", s)?;
                Ok(Member::Principal(s.to_owned()))
            }
        }
    }

    pub fn as_string(&self) -> String {
        match self {
            Member::Principal(p) => p.clone(),
            Member::Group(g) => format!("{GROUP_PREFIX}{g}"),
        }
    }
}

/// Role names: the identifier rules, at most 128 bytes.
pub fn validate_role_name(name: &str) -> Result<()> {
    validate_principal_name("role name", name)
}

/// Service principal names: `[A-Za-z0-9._-]{1,64}` (they appear in logs and token files).
pub fn validate_service_principal_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "a service principal name must match [A-Za-z0-9._-]{1,64}",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn containers_cover_what_is_below_them_only() {
        let c = Securable::catalog("c1");
        let a = Securable::Namespace {
            catalog_id: "c1".into(),
            path: ns(&["a"]),
        };
        let ab_t = Securable::Table {
            catalog_id: "c1".into(),
            path: ns(&["a", "b"]),
            name: "t".into(),
        };
        let ax = Securable::Namespace {
            catalog_id: "c1".into(),
            path: ns(&["ax"]),
        };
        assert!(c.covers(&ab_t) && a.covers(&ab_t) && a.covers(&a));
        assert!(!ax.covers(&ab_t), "a prefix of a segment is not a parent");
        assert!(!ab_t.covers(&a));
        assert!(!Securable::catalog("c2").covers(&ab_t));
        let view = Securable::View {
            catalog_id: "c1".into(),
            path: ns(&["a", "b"]),
            name: "t".into(),
        };
        assert!(!ab_t.covers(&view), "a table grant is not a view grant");
        assert_eq!(ab_t.parent().and_then(|p| p.parent()), Some(a.clone()));
        assert_eq!(a.parent(), Some(c));
    }

    #[test]
    fn securables_parse_strictly() {
        let s: Securable = serde_json::from_value(json!({
            "type": "TABLE", "catalog_id": "c1", "path": ["a"], "name": "t"
        }))
        .unwrap();
        assert_eq!(s.kind(), SecurableType::Table);
        for bad in [
            json!({"type": "TABLE", "catalog_id": "c1", "path": ["a"]}),
            json!({"type": "CATALOG", "catalog_id": "c1", "extra": 1}),
            json!({"type": "SCHEMA", "catalog_id": "c1"}),
        ] {
            assert!(
                serde_json::from_value::<Securable>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn privileges_apply_to_their_securables_only() {
        use SecurableType as T;
        assert!(Privilege::Read.applies_to(T::Table));
        assert!(!Privilege::Read.applies_to(T::Integration));
        assert!(Privilege::Use.applies_to(T::Integration));
        assert!(!Privilege::Use.applies_to(T::Catalog));
        assert!(Privilege::Manage.applies_to(T::Overlay));
        assert!(!Privilege::Write.applies_to(T::Overlay));
        assert!(Privilege::AccountAdmin.applies_to(T::Account));
        assert!(!Privilege::CatalogCreate.applies_to(T::Catalog));
        assert!(Privilege::Manage.includes(Privilege::Read));
        assert!(!Privilege::Read.includes(Privilege::Write));
    }
}
