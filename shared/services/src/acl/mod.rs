//! Access control: principals, roles and grants, and the one decision every route asks
//! ([`Access::authorize`]). See `docs/access-control.md`.
//!
//! - `model`: privileges, securables and the stored records;
//! - `view`: an account's grants as a host caches them, validated per request with one
//!   strong point read of the account's grants generation, and the operations that keep
//!   grants in step with their securables (cascades, renames);
//! - `decide`: [`Access`], the caller in one account, and its [`Action`] rules.
//!
//! This module sits below the application state (which holds the [`AclCache`]) and the
//! resource services (which add [`cascade_ops`] to their deletes).

mod decide;
pub mod model;
mod view;

pub use decide::{Access, Action, Unrestricted};
pub use model::{Privilege, Securable, SecurableType};
pub use view::{AclCache, AclView, Generation, cascade_ops, cascade_ops_all, move_ops};
