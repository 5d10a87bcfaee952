//! Whole-cache operations: listing, finding by key prefix, totals, verification, LRU
//! eviction, pruning and clearing. Each starts from a fresh scan, tolerates files that
//! other processes add or remove meanwhile, and deletes only files the cache recognizes.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::cache_key::{CacheDigest, CacheKey, TORCHTPU_VERSION};
use crate::client::Client;
use crate::error::{Result, RuntimeError};

use super::entry;
use super::files::{read_if_exists, remove_if_exists};
use super::layout::{scan, toolchain_fingerprint, Leftover, ScannedEntry};
use super::meta::EntryMeta;
use super::plugin_memo::MEMO_DIR;
use super::DiskCache;

/// Temporary files older than this belong to a writer that died; they are swept.
const STALE_TEMP: Duration = Duration::from_secs(3600);
/// Sidecars without an entry (left by a hit update racing an eviction, or a crash) older
/// than this are swept.
const STALE_ORPHAN: Duration = Duration::from_secs(60);

/// One entry, as listed by [`DiskCache::entries`].
#[derive(Clone, Debug, Serialize)]
pub struct EntryInfo {
    /// The key digest, 64 hex characters.
    pub key: String,
    /// The toolchain folder (16 hex characters).
    pub toolchain: String,
    /// The `.bin` file.
    pub path: PathBuf,
    pub entry_bytes: u64,
    pub sidecar_bytes: u64,
    /// When the entry was last written or hit (file modification times).
    pub last_used_unix_ms: u64,
    /// The sidecar, if readable.
    pub meta: Option<EntryMeta>,
    /// Why the sidecar could not be read, if it could not.
    pub sidecar_error: Option<String>,
}

/// Totals for `torchtpu-cache stats`.
#[derive(Clone, Debug, Serialize)]
pub struct CacheSummary {
    pub root: PathBuf,
    pub entries: usize,
    pub total_bytes: u64,
    pub max_size: u64,
    /// Toolchain folders with at least one entry.
    pub toolchains: usize,
    /// Hits recorded in the sidecars.
    pub hits: u64,
    /// Sum over entries of hits x recorded compile time.
    pub compile_seconds_saved: f64,
    /// Sum of the recorded compile times (what a cold start would cost).
    pub compile_seconds_stored: f64,
}

/// An entry that failed verification.
#[derive(Clone, Debug, Serialize)]
pub struct BadEntry {
    pub key: String,
    pub path: PathBuf,
    pub reason: String,
}

/// An entry verification could not fully check.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedEntry {
    pub key: String,
    pub path: PathBuf,
    pub reason: String,
}

/// What [`DiskCache::verify`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    pub checked: usize,
    /// Checksum good and (when a client was given) loaded by the current plugin.
    pub ok: usize,
    pub bad: Vec<BadEntry>,
    /// Checksum good, but made by another toolchain, so not loaded.
    pub skipped: Vec<SkippedEntry>,
    /// Whether entries were loaded into the plugin (false: checksums only).
    pub loaded: bool,
}

/// What eviction, pruning or clearing removed and left.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PruneReport {
    pub removed_entries: usize,
    pub removed_bytes: u64,
    /// Stale temporary files and orphaned sidecars removed.
    pub removed_leftovers: usize,
    pub remaining_entries: usize,
    pub remaining_bytes: u64,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn parse_digest(key_hex: &str) -> Option<CacheDigest> {
    let mut out = [0u8; 32];
    if key_hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(key_hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(CacheDigest(out))
}

fn older_than(t: SystemTime, age: Duration) -> bool {
    SystemTime::now().duration_since(t).is_ok_and(|elapsed| elapsed > age)
}

impl DiskCache {
    fn info(e: &ScannedEntry) -> EntryInfo {
        let (meta, sidecar_error) = match read_if_exists(&e.paths.json) {
            Ok(Some(bytes)) => match EntryMeta::from_json(&bytes) {
                Ok(m) => (Some(m), None),
                Err(err) => (None, Some(err)),
            },
            Ok(None) => (None, Some("no sidecar".into())),
            Err(err) => (None, Some(err.to_string())),
        };
        EntryInfo {
            key: e.key.clone(),
            toolchain: e.toolchain.clone(),
            path: e.paths.bin.clone(),
            entry_bytes: e.bin_bytes,
            sidecar_bytes: e.json_bytes,
            last_used_unix_ms: unix_ms(e.last_used),
            meta,
            sidecar_error,
        }
    }

    /// Whether the cache folder exists at all.
    pub fn exists(&self) -> bool {
        self.root().is_dir()
    }

    /// Every entry (all toolchains), most recently used first.
    pub fn entries(&self) -> Result<Vec<EntryInfo>> {
        let mut scanned = scan(self.root())?.entries;
        scanned.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.key.cmp(&b.key)));
        Ok(scanned.iter().map(Self::info).collect())
    }

    /// The one entry whose key starts with `prefix` (case-insensitive hex). No match, or
    /// several, is an `InvalidArgument` error saying so.
    pub fn find(&self, prefix: &str) -> Result<EntryInfo> {
        let p = prefix.trim().to_ascii_lowercase();
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RuntimeError::InvalidArgument(format!("{prefix:?} is not a key prefix (expected hex digits)")));
        }
        let matches: Vec<ScannedEntry> =
            scan(self.root())?.entries.into_iter().filter(|e| e.key.starts_with(&p)).collect();
        match matches.as_slice() {
            [one] => Ok(Self::info(one)),
            [] => Err(RuntimeError::InvalidArgument(format!("no cache entry has a key starting with {p}"))),
            many => Err(RuntimeError::InvalidArgument(format!(
                "{} entries have keys starting with {p}; give more characters",
                many.len()
            ))),
        }
    }

    /// Totals over every entry.
    pub fn summary(&self) -> Result<CacheSummary> {
        let entries = self.entries()?;
        let mut toolchains: Vec<&str> = entries.iter().map(|e| e.toolchain.as_str()).collect();
        toolchains.sort_unstable();
        toolchains.dedup();
        let metas = || entries.iter().filter_map(|e| e.meta.as_ref());
        Ok(CacheSummary {
            root: self.root().to_path_buf(),
            entries: entries.len(),
            total_bytes: entries.iter().map(|e| e.entry_bytes + e.sidecar_bytes).sum(),
            max_size: self.max_size(),
            toolchains: toolchains.len(),
            hits: metas().map(|m| m.hit_count).sum(),
            compile_seconds_saved: metas().map(|m| m.hit_count as f64 * m.compile_seconds).sum(),
            compile_seconds_stored: metas().map(|m| m.compile_seconds).sum(),
        })
    }

    /// The toolchain folder name for entries `client` can load.
    pub fn toolchain_of(&self, client: &Client) -> Result<String> {
        let sha = self.plugin_sha256(client.plugin())?;
        Ok(toolchain_fingerprint(&CacheKey {
            stablehlo: b"",
            compile_options: Vec::new(),
            platform_name: client.platform_name(),
            platform_version: client.platform_version(),
            plugin_sha256: &sha,
            torchtpu_version: TORCHTPU_VERSION,
        }))
    }

    /// Checks every entry's header and checksum and, given a client, loads each entry of the
    /// client's toolchain into the plugin. Reports; removes nothing.
    pub fn verify(&self, client: Option<&Client>) -> Result<VerifyReport> {
        let current = client.map(|c| self.toolchain_of(c)).transpose()?;
        let mut scanned = scan(self.root())?.entries;
        scanned.sort_by(|a, b| a.key.cmp(&b.key));
        let mut report = VerifyReport { loaded: client.is_some(), ..VerifyReport::default() };
        for e in scanned {
            let Some(bytes) = read_if_exists(&e.paths.bin)? else {
                continue; // evicted meanwhile
            };
            report.checked += 1;
            let bad = |reason: String| BadEntry { key: e.key.clone(), path: e.paths.bin.clone(), reason };
            let digest = parse_digest(&e.key);
            let payload = match entry::decode(&bytes, digest.as_ref()) {
                Ok(p) => p,
                Err(reason) => {
                    report.bad.push(bad(reason));
                    continue;
                }
            };
            match (client, &current) {
                (Some(client), Some(tc)) if *tc == e.toolchain => match client.deserialize_executable(payload) {
                    Ok(_) => report.ok += 1,
                    Err(err) => report.bad.push(bad(format!("the plugin could not load it: {err}"))),
                },
                (Some(_), _) => report.skipped.push(SkippedEntry {
                    key: e.key.clone(),
                    path: e.paths.bin.clone(),
                    reason: format!(
                        "checksum ok; made by another toolchain (folder {}), not loadable by \
                         this plugin",
                        e.toolchain
                    ),
                }),
                (None, _) => report.ok += 1,
            }
        }
        Ok(report)
    }

    fn remove_entry(e: &ScannedEntry, report: &mut PruneReport) -> Result<()> {
        // The .bin first: once it is gone the entry no longer exists for readers.
        let removed = remove_if_exists(&e.paths.bin)?;
        remove_if_exists(&e.paths.json)?;
        if removed {
            report.removed_entries += 1;
            report.removed_bytes += e.total_bytes();
        }
        Ok(())
    }

    fn sweep(leftovers: &[Leftover], age: Duration, report: &mut PruneReport) {
        for l in leftovers.iter().filter(|l| older_than(l.modified, age)) {
            if remove_if_exists(&l.path).unwrap_or(false) {
                report.removed_leftovers += 1;
            }
        }
    }

    /// Removes least-recently-used entries (never `protect`) until everything fits in
    /// `max_bytes`; also sweeps stale temporary files and orphaned sidecars.
    pub fn evict_to(&self, max_bytes: u64, protect: Option<&Path>) -> Result<PruneReport> {
        self.prune_inner(Some(max_bytes), None, protect)
    }

    /// Removes entries not used for longer than `older_than`, then evicts least-recently-used
    /// entries until everything fits in `max_size`.
    pub fn prune(&self, max_size: Option<u64>, older_than: Option<Duration>) -> Result<PruneReport> {
        self.prune_inner(max_size, older_than, None)
    }

    fn prune_inner(
        &self,
        max_size: Option<u64>,
        max_age: Option<Duration>,
        protect: Option<&Path>,
    ) -> Result<PruneReport> {
        let scanned = scan(self.root())?;
        let mut report = PruneReport::default();
        Self::sweep(&scanned.temps, STALE_TEMP, &mut report);
        Self::sweep(&scanned.orphans, STALE_ORPHAN, &mut report);
        let mut entries = scanned.entries;
        entries.sort_by(|a, b| a.last_used.cmp(&b.last_used).then(a.key.cmp(&b.key)));
        let mut kept = Vec::with_capacity(entries.len());
        for e in entries {
            if max_age.is_some_and(|age| older_than(e.last_used, age)) {
                Self::remove_entry(&e, &mut report)?;
            } else {
                kept.push(e);
            }
        }
        let mut total: u64 = kept.iter().map(ScannedEntry::total_bytes).sum();
        let mut remaining = kept.len();
        if let Some(limit) = max_size {
            for e in &kept {
                if total <= limit {
                    break;
                }
                if protect == Some(e.paths.bin.as_path()) {
                    continue;
                }
                Self::remove_entry(e, &mut report)?;
                total -= e.total_bytes();
                remaining -= 1;
            }
        }
        report.remaining_entries = remaining;
        report.remaining_bytes = total;
        Ok(report)
    }

    /// Removes every entry, leftover and plugin-hash memo, and the emptied folders (the
    /// root itself stays). Files the cache does not recognize are left alone.
    pub fn clear(&self) -> Result<PruneReport> {
        let scanned = scan(self.root())?;
        let mut report = PruneReport::default();
        for e in &scanned.entries {
            Self::remove_entry(e, &mut report)?;
        }
        Self::sweep(&scanned.temps, Duration::ZERO, &mut report);
        Self::sweep(&scanned.orphans, Duration::ZERO, &mut report);
        let memo_dir = self.root().join(MEMO_DIR);
        if let Ok(memos) = std::fs::read_dir(&memo_dir) {
            for m in memos.flatten() {
                if m.file_name().to_string_lossy().ends_with(".json") {
                    let _ = std::fs::remove_file(m.path());
                }
            }
        }
        let mut folders: Vec<PathBuf> = scanned
            .entries
            .iter()
            .map(|e| self.root().join(&e.toolchain))
            .chain(scanned.orphans.iter().chain(&scanned.temps).filter_map(|l| l.path.parent().map(Path::to_path_buf)))
            .chain([memo_dir])
            .collect();
        folders.sort();
        folders.dedup();
        for dir in folders {
            let _ = std::fs::remove_dir(dir); // only succeeds when empty
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_from_hex() {
        let d = CacheDigest([0xab; 32]);
        assert_eq!(parse_digest(&d.hex()), Some(d));
        assert_eq!(parse_digest("ab"), None);
        assert_eq!(parse_digest(&"zz".repeat(32)), None);
    }
}
