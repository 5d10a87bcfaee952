//! An in-memory cache of compiled executables, keyed by a digest of everything that decides
//! what the compiler produces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::client::Client;
use crate::error::Result;
use crate::executable::Executable;
use crate::options::CompileOptions;

/// What identifies a compiled program. To key on more (e.g. the plugin binary's hash for a
/// disk cache), add a field here and to [`CacheKey::digest`]'s encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey<'a> {
    /// The StableHLO module as given to the compiler (MLIR text or bytecode).
    pub stablehlo: &'a [u8],
    /// `CompileOptions::serialize()`.
    pub compile_options: Vec<u8>,
    /// `Client::platform_name()`.
    pub platform_name: &'a str,
    /// `Client::platform_version()`.
    pub platform_version: &'a str,
}

/// SHA-256 of a [`CacheKey`]'s encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheDigest(pub [u8; 32]);

impl CacheDigest {
    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for CacheDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheDigest({})", self.hex())
    }
}

impl<'a> CacheKey<'a> {
    /// The key for compiling `stablehlo` with `options` on `client`.
    pub fn new(client: &'a Client, stablehlo: &'a (impl AsRef<[u8]> + ?Sized), options: &CompileOptions) -> Self {
        CacheKey {
            stablehlo: stablehlo.as_ref(),
            compile_options: options.serialize(),
            platform_name: client.platform_name(),
            platform_version: client.platform_version(),
        }
    }

    /// SHA-256 over a versioned encoding in which every component is named and
    /// length-prefixed, so no two different keys encode the same way.
    pub fn digest(&self) -> CacheDigest {
        let mut h = Sha256::new();
        let mut part = |name: &str, bytes: &[u8]| {
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        part("torchtpu-executable-cache-key", b"v1");
        part("stablehlo", self.stablehlo);
        part("compile_options", &self.compile_options);
        part("platform_name", self.platform_name.as_bytes());
        part("platform_version", self.platform_version.as_bytes());
        CacheDigest(h.finalize().into())
    }
}

#[derive(Default)]
struct CacheState {
    /// Keyed by digest and by client: an executable is loaded on one client only.
    entries: HashMap<(usize, CacheDigest), Arc<Executable>>,
    hits: u64,
    misses: u64,
}

/// Thread-safe in-memory executable cache. Entries live until [`ExecutableCache::clear`] or drop.
#[derive(Default)]
pub struct ExecutableCache {
    state: Mutex<CacheState>,
}

impl std::fmt::Debug for ExecutableCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutableCache")
            .field("len", &self.len())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
            .finish()
    }
}

impl ExecutableCache {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached executable for (`mlir` text or bytecode, `options`, `client`'s platform),
    /// compiling on a miss.
    /// The lock is not held while compiling; if two threads miss at once, both compile and the
    /// first to finish wins (both count as misses).
    pub fn get_or_compile(
        &self,
        client: &Client,
        mlir: &(impl AsRef<[u8]> + ?Sized),
        options: &CompileOptions,
    ) -> Result<Arc<Executable>> {
        let mlir = mlir.as_ref();
        let slot = (
            client.identity(),
            CacheKey::new(client, mlir, options).digest(),
        );
        {
            let mut state = self.lock();
            if let Some(exe) = state.entries.get(&slot).cloned() {
                state.hits += 1;
                return Ok(exe);
            }
            state.misses += 1;
        }
        let compiled = Arc::new(client.compile_bytes(mlir, options)?);
        let mut state = self.lock();
        Ok(Arc::clone(state.entries.entry(slot).or_insert(compiled)))
    }

    pub fn hits(&self) -> u64 {
        self.lock().hits
    }

    pub fn misses(&self) -> u64 {
        self.lock().misses
    }

    /// Number of cached executables.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry (executables still referenced elsewhere stay alive); keeps the counters.
    pub fn clear(&self) {
        self.lock().entries.clear();
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
        }
    }

    #[test]
    fn every_component_changes_the_digest() {
        let base = key("module {}", CompileOptions::default(), "1").digest();
        assert_eq!(
            base,
            key("module {}", CompileOptions::default(), "1").digest()
        );
        assert_ne!(
            base,
            key("module { }", CompileOptions::default(), "1").digest()
        );
        assert_ne!(
            base,
            key(
                "module {}",
                CompileOptions {
                    num_replicas: 2,
                    num_partitions: 1
                },
                "1"
            )
            .digest()
        );
        assert_ne!(
            base,
            key("module {}", CompileOptions::default(), "2").digest()
        );
        let mut other_platform = key("module {}", CompileOptions::default(), "1");
        other_platform.platform_name = "gpu";
        assert_ne!(base, other_platform.digest());
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
    }
}
