//! Which catalog API an integration speaks: below the SPI and the HTTP layer, which both
//! name it (the SPI re-exports it).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{CatalogAccessError, Result};

/// Which catalog API an integration speaks. It identifies the access protocol, not the
/// format of the tables behind it (a Unity catalog serves Delta and Iceberg tables alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CatalogProtocol {
    /// Apache Iceberg REST catalog.
    IcebergRest,
    /// Unity Catalog OSS REST API.
    Unity,
    /// Delta Sharing protocol.
    DeltaSharing,
}

impl CatalogProtocol {
    /// Stable wire name, e.g. `ICEBERG_REST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IcebergRest => "ICEBERG_REST",
            Self::Unity => "UNITY",
            Self::DeltaSharing => "DELTA_SHARING",
        }
    }
}

impl fmt::Display for CatalogProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CatalogProtocol {
    type Err = CatalogAccessError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ICEBERG_REST" => Ok(Self::IcebergRest),
            "UNITY" => Ok(Self::Unity),
            "DELTA_SHARING" => Ok(Self::DeltaSharing),
            other => Err(CatalogAccessError::config(format!(
                "unknown catalog protocol `{other}`"
            ))),
        }
    }
}
