//! One discovery for several overlays of an integration (`docs/reconciliation.md`, "Shared
//! discovery"): what their destinations hold decides the conditional loads of the shared
//! pass, and each overlay takes its share of the result. Used by the plan job (`schedule`)
//! and by the legs of its checkpointed runs (`chain`).

use flotilla_domain::names::NamespacePath;
use flotilla_domain::selection::Selection;

use super::discover::{Discovered, Hints};
use super::target::TargetState;

/// What the destinations of a shared pass hold: a table is loaded conditionally only when
/// every overlay that selects it holds it under the same upstream ETag, and a namespace's
/// properties are loaded when any overlay that selects it creates (or created) it.
pub(crate) struct SharedHints<'a> {
    pub(crate) members: Vec<(&'a Selection, &'a TargetState, &'a str)>,
}

impl Hints for SharedHints<'_> {
    fn etag(&self, ns: &NamespacePath, name: &str) -> Option<String> {
        let mut tag: Option<&str> = None;
        for (sel, target, overlay) in &self.members {
            if !sel.selects(ns) {
                continue;
            }
            let t = target.conditional_etag(ns, name, overlay)?;
            if tag.is_some_and(|x| x != t) {
                return None;
            }
            tag = Some(t);
        }
        tag.map(str::to_owned)
    }

    fn wants_properties(&self, ns: &NamespacePath) -> bool {
        self.members.iter().any(|(sel, target, _)| {
            sel.selects(ns)
                && target
                    .namespaces
                    .get(ns)
                    .is_none_or(|n| n.value.created_by_overlay)
        })
    }
}

/// One overlay's share of a shared discovery pass: exactly what a walk of its own selection
/// would have found (the counts of dropped entries are the pass's).
pub fn share(d: &Discovered, sel: &Selection) -> Discovered {
    let visible_parent = |levels: &[String]| {
        levels.len() <= 1
            || NamespacePath::new(levels[..levels.len() - 1].to_vec())
                .is_ok_and(|p| sel.may_select_below(&p))
    };
    Discovered {
        namespaces: d
            .namespaces
            .iter()
            .filter(|n| sel.selects(n))
            .cloned()
            .collect(),
        namespace_properties: d
            .namespace_properties
            .iter()
            .filter(|(n, _)| sel.selects(n))
            .map(|(n, p)| (n.clone(), p.clone()))
            .collect(),
        tables: d
            .tables
            .iter()
            .filter(|t| sel.selects(&t.namespace))
            .cloned()
            .collect(),
        views: d
            .views
            .iter()
            .filter(|v| sel.selects(&v.namespace))
            .cloned()
            .collect(),
        both: d
            .both
            .iter()
            .filter(|(n, _)| sel.selects(n))
            .cloned()
            .collect(),
        invalid: d
            .invalid
            .iter()
            .filter(|c| visible_parent(&c.path))
            .cloned()
            .collect(),
        dropped: d.dropped,
        stable_ids: d.stable_ids,
        vanished: d
            .vanished
            .iter()
            .filter(|n| sel.selects(n))
            .cloned()
            .collect(),
    }
}
