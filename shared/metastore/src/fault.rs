//! Placeholder: filled in by the metastore backends work.
