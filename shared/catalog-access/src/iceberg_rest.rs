//! Iceberg REST catalog provider (being written).
