//! The one decision: what a caller may do to a securable ([`Access::authorize`]).
//!
//! Every route of `/v1`, `/iceberg`, the index catalogs and the console's calls holds an
//! [`Access`] for its account (built once per request by [`Access::resolve`]) and asks it,
//! for every securable it touches, whether the [`Action`] it is about to take is allowed.
//! Listings keep only what [`Access::visible`] admits. The answers follow one rule:
//!
//! - allowed: the caller is an operator, a token naming no principal (`ACCOUNT_ADMIN` of its
//!   accounts, as before access control existed), a principal with `ACCOUNT_ADMIN`, or one
//!   holding the action's privilege on the securable or on a container above it;
//! - refused and **visible** (the caller holds some privilege on it, above it or below it):
//!   `403 PERMISSION_DENIED`;
//! - refused and not visible: exactly what the route answers when the securable does not
//!   exist ([`Securable::absent`]), so a refusal is no existence oracle. The decision never
//!   reads the securable, so the answer cannot depend on whether it exists.

use std::collections::BTreeSet;
use std::sync::Arc;

use flotilla_metastore::Metastore;
use serde_json::{Value, json};

use super::model::{GrantRecord, Privilege, Securable};
use super::view::{AclCache, AclView};
use crate::auth::{AccountScope, Principal};
use crate::error::{Error, ErrorKind, Result};

/// What a route is about to do to a securable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// See that it exists and read its representation; list a container's visible
    /// children. Any privilege on it, above it or below it.
    Describe,
    /// Read its data or metadata (load a table, list its files, vend read credentials).
    Read,
    /// Change it or create inside it (commit to a table, create a table in a namespace).
    Write,
    /// Delete it: `WRITE` on its container, or `MANAGE` on itself.
    Drop,
    /// Its own settings, its deletion, granting on it; an integration's or overlay's
    /// updates, rotation, reconciliation and capture.
    Manage,
    /// Use an integration: create overlays on it, validate it, list its upstream.
    Use,
    /// Create a catalog, an integration or an index catalog in the account (the account
    /// privilege of that name).
    Create(Privilege),
    /// Administer the account: principals, roles, memberships and every grant.
    Administer,
}

impl Action {
    fn privilege(self) -> Privilege {
        match self {
            Action::Describe | Action::Read => Privilege::Read,
            Action::Write => Privilege::Write,
            Action::Drop | Action::Manage => Privilege::Manage,
            Action::Use => Privilege::Use,
            Action::Create(p) => p,
            Action::Administer => Privilege::AccountAdmin,
        }
    }
}

/// Why a caller is unrestricted in its account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unrestricted {
    Operator,
    /// A token or claims naming no principal: `ACCOUNT_ADMIN` of its accounts.
    UnnamedToken,
}

enum Basis {
    Unrestricted(Unrestricted),
    Granted {
        view: Arc<AclView>,
        roles: BTreeSet<String>,
        grants: Vec<GrantRecord>,
        admin: bool,
    },
}

/// A caller in one account, with what its grants allow there.
pub struct Access {
    pub principal: Principal,
    pub account: String,
    basis: Basis,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("subject", &self.principal.subject)
            .field("account", &self.account)
            .field("admin", &self.is_admin())
            .finish_non_exhaustive()
    }
}

impl Access {
    /// The caller's access in the account of `scope`. Operators and unnamed tokens read
    /// nothing; a named principal costs one strong point read of the account's grants
    /// generation (and a reload of the account's grants when they changed). A service
    /// principal's token is refused (`401`) once the principal is deleted or its secret
    /// rotated.
    pub async fn resolve(
        store: &dyn Metastore,
        cache: &AclCache,
        scope: AccountScope,
    ) -> Result<Access> {
        let AccountScope {
            principal, account, ..
        } = scope;
        let identity = match (&principal.identity, principal.operator) {
            (_, true) => None,
            (None, false) => {
                return Ok(Access {
                    principal,
                    account,
                    basis: Basis::Unrestricted(Unrestricted::UnnamedToken),
                });
            }
            (Some(i), false) => Some(i.clone()),
        };
        let Some(identity) = identity else {
            return Ok(Access {
                principal,
                account,
                basis: Basis::Unrestricted(Unrestricted::Operator),
            });
        };
        let view = cache.current(store, &account).await?;
        if let Some(t) = &identity.service {
            let live = view.principals.get(&t.id).is_some_and(|p| {
                p.secret_generation == t.secret_generation && p.name == identity.name
            });
            if !live {
                return Err(Error::new(
                    ErrorKind::Unauthenticated,
                    "the token's service principal was deleted or its secret rotated",
                ));
            }
        }
        let roles = view.roles_of(&identity);
        let grants = view.grants_of(&roles);
        let admin = grants
            .iter()
            .any(|g| g.privilege == Privilege::AccountAdmin);
        Ok(Access {
            principal,
            account,
            basis: Basis::Granted {
                view,
                roles,
                grants,
                admin,
            },
        })
    }

    /// Access that is not limited by grants (operators, unnamed tokens): for hosts and tests
    /// that act for such callers without a request.
    pub fn unrestricted(principal: Principal, account: &str) -> Access {
        let why = if principal.operator {
            Unrestricted::Operator
        } else {
            Unrestricted::UnnamedToken
        };
        Access {
            principal,
            account: account.to_owned(),
            basis: Basis::Unrestricted(why),
        }
    }

    /// `ACCOUNT_ADMIN` of the account (operators and unnamed tokens included).
    pub fn is_admin(&self) -> bool {
        match &self.basis {
            Basis::Unrestricted(_) => true,
            Basis::Granted { admin, .. } => *admin,
        }
    }

    /// Whether the caller's privileges come from grants (a named principal).
    pub fn is_named(&self) -> bool {
        matches!(self.basis, Basis::Granted { .. })
    }

    /// The roles the caller belongs to (none for unrestricted callers).
    pub fn roles(&self) -> BTreeSet<String> {
        match &self.basis {
            Basis::Unrestricted(_) => BTreeSet::new(),
            Basis::Granted { roles, .. } => roles.clone(),
        }
    }

    /// The view the decision rests on (named principals only).
    pub fn view(&self) -> Option<&Arc<AclView>> {
        match &self.basis {
            Basis::Unrestricted(_) => None,
            Basis::Granted { view, .. } => Some(view),
        }
    }

    fn grants(&self) -> &[GrantRecord] {
        match &self.basis {
            Basis::Unrestricted(_) => &[],
            Basis::Granted { grants, .. } => grants,
        }
    }

    /// Whether a grant of the caller includes `privilege` on `on` (directly or above it).
    fn holds(&self, privilege: Privilege, on: &Securable) -> bool {
        self.is_admin()
            || self
                .grants()
                .iter()
                .any(|g| g.privilege.includes(privilege) && g.securable.covers(on))
    }

    /// Whether the caller may know that `on` exists: a privilege on it, above it or below it
    /// (account privileges aside: `CATALOG_CREATE` shows no catalog).
    pub fn visible(&self, on: &Securable) -> bool {
        if self.is_admin() || matches!(on, Securable::Account) {
            return true;
        }
        self.grants().iter().any(|g| {
            !g.privilege.is_account_level() && (g.securable.covers(on) || on.covers(&g.securable))
        })
    }

    /// Whether `action` on `on` is allowed.
    pub fn allows(&self, action: Action, on: &Securable) -> bool {
        match action {
            Action::Describe => self.visible(on),
            Action::Drop => {
                self.holds(Privilege::Manage, on)
                    || on
                        .parent()
                        .is_some_and(|p| self.holds(Privilege::Write, &p))
            }
            Action::Create(p) => self.holds(p, &Securable::Account),
            other => self.holds(other.privilege(), on),
        }
    }

    /// The decision: `Ok` when allowed; `403 PERMISSION_DENIED` when refused on a visible
    /// securable; the securable's not-found answer otherwise (the highest invisible level
    /// first: a catalog the caller cannot see answers as a missing catalog).
    pub fn authorize(&self, action: Action, on: &Securable) -> Result<()> {
        if self.allows(action, on) {
            return Ok(());
        }
        Err(self.refusal(action, on))
    }

    /// What a refused `action` on `on` answers.
    pub fn refusal(&self, action: Action, on: &Securable) -> Error {
        if let Some(c) = on.catalog_id()
            && !matches!(on, Securable::Catalog { .. })
            && !self.visible(&Securable::catalog(c))
        {
            return Securable::catalog(c).absent();
        }
        if !self.visible(on) {
            return on.absent();
        }
        let needed = match action {
            Action::Drop => match on.parent() {
                Some(p) => format!("WRITE on {} or MANAGE on {}", p.describe(), on.describe()),
                None => format!("MANAGE on {}", on.describe()),
            },
            Action::Create(p) => format!("{p} on the account"),
            Action::Administer => "ACCOUNT_ADMIN on the account".to_owned(),
            other => format!("{} on {}", other.privilege(), on.describe()),
        };
        Error::new(
            ErrorKind::PermissionDenied,
            format!("this principal may not do that: {needed} is required"),
        )
        .with_detail("required", needed)
    }

    /// The caller's effective privileges on `on`, each with the grant it comes from (the
    /// explain route). Unrestricted callers and admins hold every privilege that applies.
    pub fn explain(&self, on: &Securable) -> Value {
        let kind = on.kind();
        let mut out = Vec::new();
        match &self.basis {
            Basis::Unrestricted(why) => {
                let source = match why {
                    Unrestricted::Operator => "OPERATOR",
                    Unrestricted::UnnamedToken => "UNNAMED_TOKEN",
                };
                for p in Privilege::ALL.iter().filter(|p| p.applies_to(kind)) {
                    out.push(json!({"privilege": p, "source": source, "grant": null}));
                }
            }
            Basis::Granted { grants, admin, .. } => {
                if *admin {
                    for g in grants
                        .iter()
                        .filter(|g| g.privilege == Privilege::AccountAdmin)
                    {
                        for p in Privilege::ALL.iter().filter(|p| p.applies_to(kind)) {
                            out.push(json!({"privilege": p, "source": "ACCOUNT_ADMIN", "grant": g.to_api()}));
                        }
                    }
                }
                for g in grants {
                    if g.privilege.is_account_level() {
                        if matches!(on, Securable::Account)
                            && g.privilege != Privilege::AccountAdmin
                        {
                            out.push(json!({"privilege": g.privilege, "source": "GRANT", "grant": g.to_api()}));
                        }
                        continue;
                    }
                    if g.securable.covers(on) {
                        let source = if &g.securable == on {
                            "GRANT"
                        } else {
                            "INHERITED"
                        };
                        for p in Privilege::ALL
                            .iter()
                            .filter(|p| p.applies_to(kind) && g.privilege.includes(**p))
                        {
                            out.push(
                                json!({"privilege": p, "source": source, "grant": g.to_api()}),
                            );
                        }
                    }
                }
            }
        }
        json!({
            "securable": on.to_api(),
            "principal": self.principal.identity.as_ref().map(|i| i.name.clone()),
            "account_admin": self.is_admin(),
            "roles": self.roles(),
            "privileges": out,
        })
    }
}
