//! The `<key>.json` sidecar: an entry's level, key components as readable strings and its
//! bookkeeping (sizes, compile time, creation, hits). Only informative: a lookup trusts the
//! `.bin` header, so a missing or unreadable sidecar never makes an entry unusable.

use serde::{Deserialize, Serialize};

use super::key::Components;

/// Version of the sidecar's fields (2: `level`, components as a generic object).
pub const META_FORMAT: u32 = 2;

/// Everything the sidecar records about one entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EntryMeta {
    /// The sidecar layout version.
    pub format: u32,
    /// `"graph"` or `"executable"` ([`super::Level::name`]).
    pub level: String,
    /// The key digest, 64 hex characters (also the file names).
    pub key: String,
    pub components: Components,
    /// What the caller called the compiled graph, if it said.
    pub graph_name: Option<String>,
    /// The payload (a serialized executable, a lowered graph).
    pub payload_bytes: u64,
    /// The `.bin` file: header plus payload.
    pub entry_bytes: u64,
    /// How long making the payload took (compile, or passes + lowering): what each hit saves.
    pub compile_seconds: f64,
    /// Milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    pub last_hit_unix_ms: Option<u64>,
    /// Best effort: concurrent hits in several processes may each count once.
    pub hit_count: u64,
}

impl EntryMeta {
    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("EntryMeta always serializes");
        bytes.push(b'\n');
        bytes
    }

    pub fn from_json(bytes: &[u8]) -> Result<EntryMeta, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("unreadable sidecar: {e}"))
    }
}
