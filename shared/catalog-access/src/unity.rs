//! Unity Catalog provider (placeholder: being written on top of [`crate::spi`]).
