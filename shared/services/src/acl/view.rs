//! An account's grants as a host caches them, and the generation that keeps the cache true.
//!
//! The protocol is the directory generation's ([`flotilla_directory`]): every write of an
//! access-control item (service principal, role, membership, grant, and the cascades that
//! remove grants with their securables) replaces the account's generation item
//! (`ACCT#{a}` / `ACL#GEN`) in the same transaction, conditioned on the version it read. So
//! - a host validates its cached view with one strong point read of the generation per
//!   request: equal means nothing changed, and a revoke is in force on the next request on
//!   every host;
//! - a reload is one strong prefix query of `ACL#` between two equal generation reads, so it
//!   sees one state;
//! - all access-control writes of an account are serialized by the generation's version,
//!   which is what lets a write decide from the view (a duplicate grant, a role's members)
//!   and lets a securable's delete know it removes every grant naming it: a grant created
//!   after the delete read the view fails the delete's condition, and the delete retries.
//!
//! The generation is opaque and random (never reused, so no ABA after an account is deleted
//! and recreated) and never leaves this module: `Debug` is redacted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_domain::keys;
use flotilla_metastore::{Consistency, Item, Metastore, Op, Query, query_all};
use serde::{Deserialize, Serialize};

use super::model::{
    GrantRecord, MemberRecord, Privilege, RoleRecord, Securable, ServicePrincipalRecord,
};
use crate::auth::Identity;
use crate::error::{Error, Result};

/// How many times a reload retries its scan because an access-control write moved the
/// generation underneath it.
const MAX_SCAN_ATTEMPTS: usize = 4;
/// Accounts whose views one host keeps; beyond it the cache starts over (a view is one
/// point read and one query away).
const MAX_CACHED_ACCOUNTS: usize = 10_000;

#[derive(Serialize, Deserialize)]
struct GenerationBody {
    value: String,
}

/// The generation item as read: its body (compared, never decoded or shown) and version.
#[derive(Clone, PartialEq, Eq)]
pub struct Generation(Option<(Vec<u8>, u64)>);

impl fmt::Debug for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Generation(<redacted>)")
    }
}

impl Generation {
    fn same_state(&self, other: &Generation) -> bool {
        self.0.as_ref().map(|(b, _)| b) == other.0.as_ref().map(|(b, _)| b)
    }

    /// The operation every access-control write adds: replace the generation at the version
    /// the decision was made on (create it when there was none).
    pub fn bump_op(&self, account: &str) -> Result<Op> {
        use rand::RngCore;
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        let body = flotilla_base::store::to_body(&GenerationBody {
            value: hex::encode(bytes),
        })?;
        let key = keys::acl_generation(account);
        Ok(match &self.0 {
            Some((_, version)) => Op::replace(key, *version, body),
            None => Op::create(key, body),
        })
    }

    /// The condition a write that changes no access-control item but must not race one
    /// adds (a securable delete that found no grant naming it).
    pub fn unchanged_op(&self, account: &str) -> Op {
        let key = keys::acl_generation(account);
        match &self.0 {
            Some((_, version)) => Op::check(key, flotilla_metastore::Condition::Version(*version)),
            None => Op::check(key, flotilla_metastore::Condition::Absent),
        }
    }
}

async fn read_generation(store: &dyn Metastore, account: &str) -> Result<Generation> {
    let item = store
        .get(&keys::acl_generation(account), Consistency::Strong)
        .await?;
    Ok(Generation(item.map(|i| (i.body, i.version))))
}

/// One account's access control at one generation. Immutable once published.
pub struct AclView {
    generation: Generation,
    /// Service principals by id.
    pub principals: BTreeMap<String, ServicePrincipalRecord>,
    /// Service principal ids by name.
    pub principal_names: BTreeMap<String, String>,
    pub roles: BTreeMap<String, RoleRecord>,
    /// Members (principal names and `group:` names) by role.
    pub members: BTreeMap<String, BTreeSet<String>>,
    /// Every grant, by id.
    pub grants: BTreeMap<String, GrantRecord>,
}

impl fmt::Debug for AclView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclView")
            .field("roles", &self.roles.len())
            .field("grants", &self.grants.len())
            .finish_non_exhaustive()
    }
}

impl AclView {
    pub fn generation(&self) -> &Generation {
        &self.generation
    }

    /// The roles `identity` belongs to: by its name or one of its groups.
    pub fn roles_of(&self, identity: &Identity) -> BTreeSet<String> {
        let groups: BTreeSet<String> = identity
            .groups
            .iter()
            .map(|g| format!("{}{g}", super::model::GROUP_PREFIX))
            .collect();
        self.members
            .iter()
            .filter(|(_, m)| m.contains(&identity.name) || m.iter().any(|x| groups.contains(x)))
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// The grants of `roles`.
    pub fn grants_of(&self, roles: &BTreeSet<String>) -> Vec<GrantRecord> {
        self.grants
            .values()
            .filter(|g| roles.contains(&g.role))
            .cloned()
            .collect()
    }

    /// The grants that name `securable` or anything below it.
    pub fn grants_within(&self, securable: &Securable) -> Vec<&GrantRecord> {
        self.grants
            .values()
            .filter(|g| securable.covers(&g.securable))
            .collect()
    }

    /// Whether any grant is ACCOUNT_ADMIN (the admin check of the explain route).
    pub fn is_admin_grant(g: &GrantRecord) -> bool {
        g.privilege == Privilege::AccountAdmin
    }

    fn from_items(generation: Generation, items: Vec<Item>) -> Result<Self> {
        let mut v = AclView {
            generation,
            principals: BTreeMap::new(),
            principal_names: BTreeMap::new(),
            roles: BTreeMap::new(),
            members: BTreeMap::new(),
            grants: BTreeMap::new(),
        };
        for item in items {
            let sk = item.key.sk.as_str();
            if sk.starts_with(keys::SERVICE_PRINCIPAL_PREFIX) {
                let p: ServicePrincipalRecord = item.json()?;
                v.principal_names.insert(p.name.clone(), p.id.clone());
                v.principals.insert(p.id.clone(), p);
            } else if sk.starts_with(keys::ROLE_PREFIX) {
                let r: RoleRecord = item.json()?;
                v.roles.insert(r.name.clone(), r);
            } else if sk.starts_with(keys::ROLE_MEMBER_PREFIX) {
                let m: MemberRecord = item.json()?;
                v.members.entry(m.role).or_default().insert(m.member);
            } else if sk.starts_with(keys::GRANT_PREFIX) {
                let g: GrantRecord = item.json()?;
                v.grants.insert(g.id.clone(), g);
            }
        }
        Ok(v)
    }
}

/// The views this host holds, per account.
#[derive(Default)]
pub struct AclCache {
    views: Mutex<HashMap<String, Arc<AclView>>>,
}

impl fmt::Debug for AclCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclCache").finish_non_exhaustive()
    }
}

impl AclCache {
    pub fn new() -> Self {
        Self::default()
    }

    fn cached(&self, account: &str) -> Option<Arc<AclView>> {
        self.views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(account)
            .cloned()
    }

    fn publish(&self, account: &str, view: Arc<AclView>) {
        let mut map = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_CACHED_ACCOUNTS && !map.contains_key(account) {
            map.clear();
        }
        map.insert(account.to_owned(), view);
    }

    /// The account's view as of now: one strong point read of the generation, plus a reload
    /// when it moved since this host last looked.
    pub async fn current(&self, store: &dyn Metastore, account: &str) -> Result<Arc<AclView>> {
        let generation = read_generation(store, account).await?;
        if let Some(v) = self.cached(account)
            && v.generation.same_state(&generation)
        {
            return Ok(v);
        }
        let view = Arc::new(Self::load(store, account, generation).await?);
        self.publish(account, view.clone());
        Ok(view)
    }

    /// A full scan between two equal generation reads (the first one given).
    async fn load(store: &dyn Metastore, account: &str, mut start: Generation) -> Result<AclView> {
        for _ in 0..MAX_SCAN_ATTEMPTS {
            let items = if start.0.is_none() {
                // No access-control write ever happened in this account: nothing to scan.
                Vec::new()
            } else {
                query_all(
                    store,
                    Query::new(
                        keys::account_pk(account),
                        keys::ACL_PREFIX,
                        Consistency::Strong,
                    ),
                )
                .await?
            };
            let end = if start.0.is_none() {
                start.clone()
            } else {
                read_generation(store, account).await?
            };
            if end.same_state(&start) {
                return AclView::from_items(end, items);
            }
            start = end;
        }
        Err(Error::unavailable(
            "the account's grants changed during every reload; retry",
        ))
    }
}

/// The operations that remove every grant naming `securable` or anything below it, for the
/// transaction that deletes the securable: the deletes and a generation bump when there are
/// grants, else a check that no grant appeared since (the generation is unchanged). A grant
/// created concurrently therefore fails the delete's transaction, which retries and removes
/// it too: no grant outlives its securable.
pub async fn cascade_ops(
    store: &dyn Metastore,
    cache: &AclCache,
    account: &str,
    securable: &Securable,
) -> Result<Vec<Op>> {
    cascade_ops_all(store, cache, account, std::slice::from_ref(securable)).await
}

/// [`cascade_ops`] for several securables deleted in one transaction (one generation op).
pub async fn cascade_ops_all(
    store: &dyn Metastore,
    cache: &AclCache,
    account: &str,
    securables: &[Securable],
) -> Result<Vec<Op>> {
    let view = cache.current(store, account).await?;
    let doomed: Vec<&GrantRecord> = view
        .grants
        .values()
        .filter(|g| securables.iter().any(|s| s.covers(&g.securable)))
        .collect();
    let mut ops: Vec<Op> = doomed
        .iter()
        .map(|g| Op::delete(keys::grant(account, &g.id)))
        .collect();
    ops.push(if doomed.is_empty() {
        view.generation.unchanged_op(account)
    } else {
        view.generation.bump_op(account)?
    });
    Ok(ops)
}

/// The operations that move the grants naming relation `from` to `to` (a rename or move of a
/// table or view keeps its grants), with the generation bump; a check that the generation
/// is unchanged when none name it.
pub async fn move_ops(
    store: &dyn Metastore,
    cache: &AclCache,
    account: &str,
    from: &Securable,
    to: &Securable,
) -> Result<Vec<Op>> {
    let view = cache.current(store, account).await?;
    let moved: Vec<&GrantRecord> = view
        .grants
        .values()
        .filter(|g| &g.securable == from)
        .collect();
    let mut ops = Vec::with_capacity(moved.len() + 1);
    for g in &moved {
        let mut next = (*g).clone();
        next.securable = to.clone();
        next.revision += 1;
        ops.push(Op::put(
            keys::grant(account, &g.id),
            flotilla_base::store::to_body(&next)?,
        ));
    }
    ops.push(if moved.is_empty() {
        view.generation.unchanged_op(account)
    } else {
        view.generation.bump_op(account)?
    });
    Ok(ops)
}
