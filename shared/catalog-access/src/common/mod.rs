//! Helpers shared by more than one provider, so that no provider module imports another:
//! JSON accessors ([`json`]), the vended-credential cache ([`vend_cache`]) and the Spark
//! schema conversion ([`spark_schema`]).

pub(crate) mod json;
pub(crate) mod spark_schema;
pub(crate) mod vend_cache;

pub(crate) use json::{
    dedup, epoch_ms, list_field, names, next_token, optional_str, required_str, secret_part,
};
pub(crate) use spark_schema::{
    convert_primitive, spark_fields_to_iceberg, spark_struct_to_iceberg,
};
pub(crate) use vend_cache::{VendCache, check_fresh_and_scoped, lock};
