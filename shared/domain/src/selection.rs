//! Namespace selection of an overlay ("Namespace selection").
//!
//! Paths run from the upstream root to a leaf and match case-sensitively, segment by
//! segment (never by joined text, so `["a.b"]` and `["a", "b"]` are different paths). An
//! include selects a namespace and its descendants; an exclude removes a namespace and its
//! descendants and wins over includes; an empty include list selects everything.

use serde::{Deserialize, Serialize};

use crate::names::{NameError, NamespacePath};

/// A normalized selection: includes with no path subsumed by another include, excludes that
/// each lie inside some include (or anywhere when everything is included) and are not
/// subsumed by another exclude; both sorted and free of duplicates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Selection {
    pub include: Vec<NamespacePath>,
    pub exclude: Vec<NamespacePath>,
}

/// Most paths accepted in one include or one exclude list. Checked before any path is
/// parsed, so an oversized request costs nothing but its (size-capped) body.
pub const MAX_SELECTION_PATHS: usize = 1_000;

/// Sorted, deduplicated, and free of paths that have another path of the list as a prefix.
///
/// After sorting, a path's ancestors precede it, and every path sorted between an ancestor
/// and the path has that ancestor as a prefix too; so a path is subsumed exactly when the
/// last kept path is its prefix. One comparison per path: O(n log n) in all.
fn minimal(mut paths: Vec<NamespacePath>) -> Vec<NamespacePath> {
    paths.sort_unstable();
    paths.dedup();
    let mut kept: Vec<NamespacePath> = Vec::with_capacity(paths.len());
    for p in paths {
        if !kept.last().is_some_and(|k| k.is_prefix_of(&p)) {
            kept.push(p);
        }
    }
    kept
}

/// Whether some path of `set` (sorted, no path a prefix of another) is a prefix of `path`.
/// Only the greatest member not above `path` can be: a binary search.
fn has_prefix_in(set: &[NamespacePath], path: &NamespacePath) -> bool {
    let at = set.partition_point(|s| s <= path);
    at > 0 && set[at - 1].is_prefix_of(path)
}

/// Whether `path` is a prefix of some path of `set` (sorted). The members below `path`
/// form a contiguous run starting at the first member not below `path`.
fn is_prefix_of_some(set: &[NamespacePath], path: &NamespacePath) -> bool {
    let at = set.partition_point(|s| s < path);
    set.get(at).is_some_and(|s| path.is_prefix_of(s))
}

impl Selection {
    /// Validates and normalizes raw include / exclude paths. Each list holds at most
    /// [`MAX_SELECTION_PATHS`] paths; a longer one is refused before any path is examined.
    pub fn normalize(
        include: Vec<Vec<String>>,
        exclude: Vec<Vec<String>>,
    ) -> Result<Self, NameError> {
        for (what, list) in [
            ("include_namespaces", &include),
            ("exclude_namespaces", &exclude),
        ] {
            if list.len() > MAX_SELECTION_PATHS {
                return Err(NameError(format!(
                    "{what} lists {} paths; at most {MAX_SELECTION_PATHS} are accepted",
                    list.len()
                )));
            }
        }
        let include = include
            .into_iter()
            .map(NamespacePath::new)
            .collect::<Result<Vec<_>, _>>()?;
        let exclude = exclude
            .into_iter()
            .map(NamespacePath::new)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::from_paths(include, exclude))
    }

    /// Normalizes parsed paths in O(n log n) (n = both lists together).
    pub fn from_paths(include: Vec<NamespacePath>, exclude: Vec<NamespacePath>) -> Self {
        let include = minimal(include);
        // An exclude matters only inside an include (or anywhere when everything is
        // included): below an include, or above one.
        let exclude: Vec<NamespacePath> = minimal(exclude)
            .into_iter()
            .filter(|e| {
                include.is_empty() || has_prefix_in(&include, e) || is_prefix_of_some(&include, e)
            })
            .collect();
        // An include wholly inside an exclude selects nothing: drop it, but never let the
        // include list become empty through that (empty means "everything").
        let surviving: Vec<NamespacePath> = include
            .iter()
            .filter(|i| !has_prefix_in(&exclude, i))
            .cloned()
            .collect();
        if !include.is_empty() && surviving.is_empty() {
            // Everything included is excluded: keep the includes and excludes that say so.
            return Self { include, exclude };
        }
        let exclude = exclude
            .into_iter()
            .filter(|e| surviving.is_empty() || has_prefix_in(&surviving, e))
            .collect();
        Self {
            include: surviving,
            exclude,
        }
    }

    /// Whether the upstream namespace `path` is selected.
    pub fn selects(&self, path: &NamespacePath) -> bool {
        let included = self.include.is_empty() || self.include.iter().any(|i| i.is_prefix_of(path));
        included && !self.exclude.iter().any(|e| e.is_prefix_of(path))
    }

    /// Whether a walk must descend into `path` because something at or below it may be
    /// selected (used to prune discovery).
    pub fn may_select_below(&self, path: &NamespacePath) -> bool {
        if self.exclude.iter().any(|e| e.is_prefix_of(path)) {
            return false;
        }
        self.include.is_empty()
            || self
                .include
                .iter()
                .any(|i| i.is_prefix_of(path) || path.is_prefix_of(i))
    }

    pub fn include_segments(&self) -> Vec<Vec<String>> {
        self.include.iter().map(|p| p.segments().to_vec()).collect()
    }

    pub fn exclude_segments(&self) -> Vec<Vec<String>> {
        self.exclude.iter().map(|p| p.segments().to_vec()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &[&str]) -> NamespacePath {
        NamespacePath::new(s.iter().map(|x| x.to_string()).collect()).unwrap()
    }

    fn naive(include: &[NamespacePath], exclude: &[NamespacePath], path: &NamespacePath) -> bool {
        let inc = include.is_empty()
            || include
                .iter()
                .any(|i| path.segments().starts_with(i.segments()));
        let exc = exclude
            .iter()
            .any(|e| path.segments().starts_with(e.segments()));
        inc && !exc
    }

    #[test]
    fn subsumed_includes_collapse_and_outside_excludes_drop() {
        let s = Selection::from_paths(
            vec![p(&["a"]), p(&["a", "b"]), p(&["c"]), p(&["a"])],
            vec![p(&["a", "x"]), p(&["z"])],
        );
        assert_eq!(s.include, vec![p(&["a"]), p(&["c"])]);
        assert_eq!(s.exclude, vec![p(&["a", "x"])]);
    }

    #[test]
    fn segment_boundaries_are_not_flattened() {
        let s = Selection::from_paths(vec![p(&["a.b"])], vec![]);
        assert!(s.selects(&p(&["a.b", "c"])));
        assert!(!s.selects(&p(&["a", "b"])));
        let s = Selection::from_paths(vec![p(&["ab"])], vec![]);
        assert!(!s.selects(&p(&["a"])));
        assert!(!s.selects(&p(&["abc"])));
    }

    #[test]
    fn exclude_wins_and_empty_include_selects_everything() {
        let s = Selection::from_paths(vec![], vec![p(&["tmp"])]);
        assert!(s.selects(&p(&["crm"])));
        assert!(!s.selects(&p(&["tmp", "x"])));
        let s = Selection::from_paths(vec![p(&["crm"])], vec![p(&["crm"])]);
        assert!(!s.selects(&p(&["crm"])));
        assert!(!s.selects(&p(&["other"])));
    }

    #[test]
    fn case_sensitive() {
        let s = Selection::from_paths(vec![p(&["CRM"])], vec![]);
        assert!(!s.selects(&p(&["crm"])));
    }

    #[test]
    fn oversized_lists_are_refused_before_any_work() {
        let path = vec!["a".to_owned()];
        let ok = Selection::normalize(vec![path.clone(); MAX_SELECTION_PATHS], vec![]);
        assert!(ok.is_ok());
        // Paths that would not even parse: refused for the count, not for the content.
        let bad = vec![vec![String::new()]; MAX_SELECTION_PATHS + 1];
        let e = Selection::normalize(vec![], bad).unwrap_err();
        assert!(
            e.0.contains("exclude_namespaces") && e.0.contains("1000"),
            "{e}"
        );
        let e = Selection::normalize(vec![path; 50_000], vec![]).unwrap_err();
        assert!(e.0.contains("include_namespaces"), "{e}");
    }

    #[test]
    fn large_disjoint_lists_normalize_in_n_log_n() {
        // 1,000 distinct includes and 1,000 excludes below them: the quadratic version did
        // ~10^6 prefix checks per list; this one does ~10^4. Checked for meaning, not time.
        let include: Vec<NamespacePath> = (0..MAX_SELECTION_PATHS)
            .map(|i| p(&[&format!("ns{i:05}")]))
            .collect();
        let exclude: Vec<NamespacePath> = (0..MAX_SELECTION_PATHS)
            .map(|i| p(&[&format!("ns{i:05}"), "tmp"]))
            .collect();
        let s = Selection::from_paths(include.clone(), exclude.clone());
        assert_eq!(s.include.len(), MAX_SELECTION_PATHS);
        assert_eq!(s.exclude.len(), MAX_SELECTION_PATHS);
        assert!(s.selects(&p(&["ns00007", "x"])));
        assert!(!s.selects(&p(&["ns00007", "tmp", "x"])));
    }

    fn arb_path() -> impl Strategy<Value = NamespacePath> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "a.b", "B", "ab"]), 1..4)
            .prop_map(|v| NamespacePath::new(v.into_iter().map(String::from).collect()).unwrap())
    }

    proptest! {
        #[test]
        fn normalization_preserves_meaning(
            include in prop::collection::vec(arb_path(), 0..10),
            exclude in prop::collection::vec(arb_path(), 0..10),
            probes in prop::collection::vec(arb_path(), 1..20),
        ) {
            let s = Selection::from_paths(include.clone(), exclude.clone());
            for probe in &probes {
                prop_assert_eq!(s.selects(probe), naive(&include, &exclude, probe), "probe {:?}", probe);
            }
            // Idempotent.
            let again = Selection::from_paths(s.include.clone(), s.exclude.clone());
            prop_assert_eq!(&again, &s);
        }

        #[test]
        fn descend_prunes_only_what_cannot_be_selected(
            include in prop::collection::vec(arb_path(), 0..4),
            exclude in prop::collection::vec(arb_path(), 0..4),
            probe in arb_path(),
            tail in prop::collection::vec(prop::sample::select(vec!["a", "b"]), 0..2),
        ) {
            let s = Selection::from_paths(include, exclude);
            let mut segs = probe.segments().to_vec();
            segs.extend(tail.into_iter().map(String::from));
            let deeper = NamespacePath::new(segs).unwrap();
            if s.selects(&deeper) {
                prop_assert!(s.may_select_below(&probe));
            }
        }
    }
}
