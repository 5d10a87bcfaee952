//! What identifies a compiled program: [`CacheKey`], its digest, and its components as
//! readable strings (for the disk cache's sidecars and `torchtpu-cache explain`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::Client;
use crate::error::Result;
use crate::options::CompileOptions;
pub use crate::store::CacheDigest;
use crate::store::{hex, named_digest, Components};

/// torchtpu's version, part of every persistent key.
pub const TORCHTPU_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything that decides what the compiler produces. To key on more, add a field here,
/// to [`CacheKey::digest`]'s encoding and to [`KeyComponents`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey<'a> {
    /// The StableHLO module as given to the compiler (MLIR text or bytecode).
    pub stablehlo: &'a [u8],
    /// `CompileOptions::serialize()`.
    pub compile_options: Vec<u8>,
    /// `Client::platform_name()`.
    pub platform_name: &'a str,
    /// `Client::platform_version()` (just "cpu" on the CPU plugin).
    pub platform_version: &'a str,
    /// `Plugin::binary_sha256()`: tells two builds of a plugin apart. Empty in
    /// [`CacheKey::in_process`] keys, where the client already fixes the plugin.
    pub plugin_sha256: &'a str,
    /// [`TORCHTPU_VERSION`].
    pub torchtpu_version: &'a str,
}

impl<'a> CacheKey<'a> {
    /// The full key for compiling `stablehlo` with `options` on `client`, valid across
    /// processes. Hashes the plugin binary the first time a process asks (see
    /// [`crate::Plugin::binary_sha256`]).
    pub fn new(
        client: &'a Client,
        stablehlo: &'a (impl AsRef<[u8]> + ?Sized),
        options: &CompileOptions,
    ) -> Result<Self> {
        let plugin_sha256 = client.plugin().binary_sha256()?;
        Ok(CacheKey { plugin_sha256, ..Self::in_process(client, stablehlo, options) })
    }

    /// The key without the plugin binary's hash: enough inside one process, where a client
    /// fixes the plugin (the in-memory cache keys on this plus the client).
    pub fn in_process(
        client: &'a Client,
        stablehlo: &'a (impl AsRef<[u8]> + ?Sized),
        options: &CompileOptions,
    ) -> Self {
        CacheKey {
            stablehlo: stablehlo.as_ref(),
            compile_options: options.serialize(),
            platform_name: client.platform_name(),
            platform_version: client.platform_version(),
            plugin_sha256: "",
            torchtpu_version: TORCHTPU_VERSION,
        }
    }

    /// SHA-256 over a versioned encoding in which every component is named and
    /// length-prefixed, so no two different keys encode the same way.
    pub fn digest(&self) -> CacheDigest {
        named_digest(&[
            ("torchtpu-executable-cache-key", b"v2"),
            ("stablehlo", self.stablehlo),
            ("compile_options", &self.compile_options),
            ("platform_name", self.platform_name.as_bytes()),
            ("platform_version", self.platform_version.as_bytes()),
            ("plugin_sha256", self.plugin_sha256.as_bytes()),
            ("torchtpu_version", self.torchtpu_version.as_bytes()),
        ])
    }

    /// The components as readable strings (the module as its SHA-256 and size).
    pub fn components(&self) -> KeyComponents {
        KeyComponents {
            module_sha256: hex(&Sha256::digest(self.stablehlo)),
            module_bytes: self.stablehlo.len() as u64,
            compile_options_hex: hex(&self.compile_options),
            platform_name: self.platform_name.to_owned(),
            platform_version: self.platform_version.to_owned(),
            plugin_sha256: self.plugin_sha256.to_owned(),
            torchtpu_version: self.torchtpu_version.to_owned(),
        }
    }
}

impl From<KeyComponents> for Components {
    fn from(k: KeyComponents) -> Components {
        Components(k.fields().into_iter().map(|(n, v)| (n.to_owned(), v)).collect())
    }
}

/// A key's components as strings, stored (as [`Components`]) in each disk entry's sidecar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyComponents {
    pub module_sha256: String,
    pub module_bytes: u64,
    pub compile_options_hex: String,
    pub platform_name: String,
    pub platform_version: String,
    pub plugin_sha256: String,
    pub torchtpu_version: String,
}

impl KeyComponents {
    /// `(name, value)` for every component, in key order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("module_sha256", self.module_sha256.clone()),
            ("module_bytes", self.module_bytes.to_string()),
            ("compile_options_hex", self.compile_options_hex.clone()),
            ("platform_name", self.platform_name.clone()),
            ("platform_version", self.platform_version.clone()),
            ("plugin_sha256", self.plugin_sha256.clone()),
            ("torchtpu_version", self.torchtpu_version.clone()),
        ]
    }

    /// The components whose values differ: `(name, self's value, other's value)`.
    pub fn differences(&self, other: &KeyComponents) -> Vec<(&'static str, String, String)> {
        self.fields()
            .into_iter()
            .zip(other.fields())
            .filter(|((_, a), (_, b))| a != b)
            .map(|((name, a), (_, b))| (name, a, b))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key<'a>(text: &'a str, opts: CompileOptions, version: &'a str) -> CacheKey<'a> {
        CacheKey {
            stablehlo: text.as_bytes(),
            compile_options: opts.serialize(),
            platform_name: "cpu",
            platform_version: version,
            plugin_sha256: "ab12",
            torchtpu_version: "0.1.0",
        }
    }

    #[test]
    fn every_component_changes_the_digest() {
        let base_key = key("module {}", CompileOptions::default(), "1");
        let base = base_key.digest();
        assert_eq!(base, base_key.clone().digest());
        let changed: Vec<CacheKey> = vec![
            key("module { }", CompileOptions::default(), "1"),
            key("module {}", CompileOptions::new(2, 1), "1"),
            key("module {}", CompileOptions::default(), "2"),
            CacheKey { platform_name: "gpu", ..base_key.clone() },
            CacheKey { plugin_sha256: "ab13", ..base_key.clone() },
            CacheKey { torchtpu_version: "0.2.0", ..base_key.clone() },
        ];
        for k in &changed {
            assert_ne!(base, k.digest(), "{k:?}");
            assert!(!base_key.components().differences(&k.components()).is_empty());
        }
        assert_eq!(base.hex().len(), 64);
    }

    #[test]
    fn length_prefixes_keep_boundaries_apart() {
        // "cp" + "u1" and "cpu" + "1" concatenate to the same bytes.
        let mut a = key("m", CompileOptions::default(), "u1");
        let mut b = key("m", CompileOptions::default(), "1");
        a.platform_name = "cp";
        b.platform_name = "cpu";
        assert_ne!(a.digest(), b.digest());
        // The same for the two new components.
        let c = CacheKey { plugin_sha256: "ab", torchtpu_version: "120.1", ..key("m", CompileOptions::default(), "1") };
        let d = CacheKey { plugin_sha256: "ab1", torchtpu_version: "20.1", ..key("m", CompileOptions::default(), "1") };
        assert_ne!(c.digest(), d.digest());
    }

    #[test]
    fn components_are_readable_and_name_differences() {
        let a = key("module {}", CompileOptions::default(), "1").components();
        assert_eq!(a.module_sha256, hex(&Sha256::digest(b"module {}")), "module hash");
        assert_eq!(a.module_bytes, 9);
        assert_eq!(a.compile_options_hex, hex(&CompileOptions::default().serialize()));
        let b = key("module {}", CompileOptions::default(), "2").components();
        assert_eq!(a.differences(&b), vec![("platform_version", "1".to_string(), "2".to_string())]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<KeyComponents>(&json).unwrap(), a);
    }
}
