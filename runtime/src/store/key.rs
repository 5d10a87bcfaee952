//! Keys of the store, at every level: a SHA-256 over named, length-prefixed components (so no
//! two different lists encode the same way), folder fingerprints made the same way, and the
//! components as readable `(name, value)` strings for sidecars and `torchtpu-cache explain`.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// SHA-256 of a key's encoding: what names an entry at every level.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheDigest(pub [u8; 32]);

impl CacheDigest {
    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl std::fmt::Debug for CacheDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheDigest({})", self.hex())
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 over `parts`, each named and length-prefixed. The first part should name the key
/// and its encoding version (e.g. `("torchtpu-graph-cache-key", b"v1")`).
pub fn named_digest(parts: &[(&str, &[u8])]) -> CacheDigest {
    let mut h = Sha256::new();
    for (name, bytes) in parts {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    CacheDigest(h.finalize().into())
}

/// A folder name for a group of entries: 16 hex characters of [`named_digest`] over `parts`.
pub fn fingerprint(parts: &[(&str, &[u8])]) -> String {
    hex(&named_digest(parts).0[..8])
}

/// Lower-case hex SHA-256 of `bytes` (how big components are recorded).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A key's components as readable strings, in key order; a JSON object in sidecars.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Components(pub Vec<(String, String)>);

impl Components {
    pub fn new() -> Components {
        Components::default()
    }

    pub fn with(mut self, name: &str, value: impl ToString) -> Components {
        self.0.push((name.to_owned(), value.to_string()));
        self
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }

    /// The components whose values differ or that only one side has: `(name, self's value,
    /// other's value)`, a missing value as "-".
    pub fn differences(&self, other: &Components) -> Vec<(String, String, String)> {
        let mut names: Vec<&str> = self.names().collect();
        names.extend(other.names().filter(|n| self.get(n).is_none()));
        names
            .into_iter()
            .filter_map(|n| {
                let (a, b) = (self.get(n), other.get(n));
                (a != b).then(|| (n.to_owned(), a.unwrap_or("-").to_owned(), b.unwrap_or("-").to_owned()))
            })
            .collect()
    }
}

impl Serialize for Components {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Components {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Components, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Components;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of key components")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Components, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
                    let v = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    out.push((k, v));
                }
                Ok(Components(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_prefixes_keep_boundaries_apart() {
        assert_ne!(named_digest(&[("a", b"bc")]), named_digest(&[("ab", b"c")]));
        assert_ne!(named_digest(&[("a", b"b"), ("c", b"")]), named_digest(&[("a", b"bc")]));
        assert_eq!(named_digest(&[("a", b"b")]), named_digest(&[("a", b"b")]));
        assert_eq!(fingerprint(&[("a", b"b")]).len(), 16);
    }

    #[test]
    fn components_keep_order_through_json_and_name_differences() {
        let a = Components::new().with("z", "1").with("a", 2);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"z":"1","a":"2"}"#);
        assert_eq!(serde_json::from_str::<Components>(&json).unwrap(), a);
        // Numbers (as in format-1 sidecars) read as strings.
        assert_eq!(serde_json::from_str::<Components>(r#"{"z":"1","a":2}"#).unwrap(), a);
        let b = Components::new().with("z", "1").with("a", 3).with("n", "x");
        assert_eq!(
            a.differences(&b),
            [("a".to_string(), "2".to_string(), "3".to_string()), ("n".to_string(), "-".to_string(), "x".to_string())]
        );
    }
}
