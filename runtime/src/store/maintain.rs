//! Whole-store operations over both levels: listing, finding by key prefix, totals,
//! verification, LRU eviction, pruning and clearing. Each starts from a fresh scan,
//! tolerates files that other processes add or remove meanwhile, and deletes only files the
//! store recognizes (lock files only when nobody holds them).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::error::{Result, StoreError};
use super::key::CacheDigest;

use super::entry;
use super::files::{read_if_exists, remove_if_exists};
use super::layout::{layout_dir, scan, Leftover, ScannedEntry};
use super::lock;
use super::meta::EntryMeta;
use super::{Level, Store};

/// Folder (under the root) of the plugin-hash memos (`DiskCache`), removed by `clear`.
pub const MEMO_DIR: &str = "plugin-sha256";

/// Temporary files older than this belong to a writer that died; they are swept.
const STALE_TEMP: Duration = Duration::from_secs(3600);
/// Sidecars without an entry (left by a hit update racing an eviction, or a crash) older
/// than this are swept.
const STALE_ORPHAN: Duration = Duration::from_secs(60);

/// One entry, as listed by [`Store::entries`].
#[derive(Clone, Debug, Serialize)]
pub struct EntryInfo {
    /// `"graph"` or `"executable"`.
    pub level: Level,
    /// The key digest, 64 hex characters.
    pub key: String,
    /// The partition folder (16 hex characters): the toolchain fingerprint (executable level)
    /// or the compiler build fingerprint (graph level).
    pub partition: String,
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

/// Totals of one level.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LevelSummary {
    pub level: Option<Level>,
    pub entries: usize,
    pub total_bytes: u64,
    /// Partition folders (toolchains, compiler builds) with at least one entry.
    pub partitions: usize,
    pub hits: u64,
    pub compile_seconds_saved: f64,
    pub compile_seconds_stored: f64,
}

/// Totals for `torchtpu-cache stats`: both levels together, then each.
#[derive(Clone, Debug, Serialize)]
pub struct CacheSummary {
    pub root: PathBuf,
    pub entries: usize,
    /// Entries, stale files of older layouts and their sidecars: what the size limit counts.
    pub total_bytes: u64,
    pub max_size: u64,
    /// Toolchain folders (executable level) with at least one entry.
    pub toolchains: usize,
    /// Hits recorded in the sidecars.
    pub hits: u64,
    /// Sum over entries of hits x recorded compile time.
    pub compile_seconds_saved: f64,
    /// Sum of the recorded compile times (what a cold start would cost).
    pub compile_seconds_stored: f64,
    /// Files of older layouts (never read; pruned first).
    pub stale_files: usize,
    pub stale_bytes: u64,
    /// Per level: graph, then executable.
    pub levels: Vec<LevelSummary>,
}

/// An entry that failed verification.
#[derive(Clone, Debug, Serialize)]
pub struct BadEntry {
    pub level: Level,
    pub key: String,
    pub path: PathBuf,
    pub reason: String,
}

/// An entry verification could not fully check.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedEntry {
    pub level: Level,
    pub key: String,
    pub path: PathBuf,
    pub reason: String,
}

/// What [`Store::verify`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    pub checked: usize,
    /// Checksum good and (at the executable level, when a client was given) loaded by the
    /// current plugin.
    pub ok: usize,
    pub bad: Vec<BadEntry>,
    /// Checksum good, but made by another toolchain, so not loaded.
    pub skipped: Vec<SkippedEntry>,
    /// Whether executable entries were loaded into the plugin (false: checksums only).
    pub loaded: bool,
    /// Entries checked per level: `[graph, executable]`.
    pub checked_per_level: [usize; 2],
}

/// What a verification callback says about one entry whose header and checksum are good.
pub enum Check {
    Ok,
    Bad(String),
    Skipped(String),
}

/// What eviction, pruning or clearing removed and left.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PruneReport {
    pub removed_entries: usize,
    pub removed_bytes: u64,
    /// Stale temporary files, orphaned sidecars and files of older layouts removed.
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

impl Store {
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
            level: e.level,
            key: e.key.clone(),
            partition: e.partition.clone(),
            path: e.paths.bin.clone(),
            entry_bytes: e.bin_bytes,
            sidecar_bytes: e.json_bytes,
            last_used_unix_ms: unix_ms(e.last_used),
            meta,
            sidecar_error,
        }
    }

    /// Whether the store folder exists at all.
    pub fn exists(&self) -> bool {
        self.root().is_dir()
    }

    /// Every entry (both levels, all partitions), most recently used first.
    pub fn entries(&self) -> Result<Vec<EntryInfo>> {
        let mut scanned = scan(self.root())?.entries;
        scanned.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.key.cmp(&b.key)));
        Ok(scanned.iter().map(Self::info).collect())
    }

    /// The one entry (either level) whose key starts with `prefix` (case-insensitive hex).
    /// No match, or several, is an `InvalidArgument` error saying so.
    pub fn find(&self, prefix: &str) -> Result<EntryInfo> {
        let p = prefix.trim().to_ascii_lowercase();
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::Key(format!("{prefix:?} is not a key prefix (expected hex digits)")));
        }
        let matches: Vec<ScannedEntry> =
            scan(self.root())?.entries.into_iter().filter(|e| e.key.starts_with(&p)).collect();
        match matches.as_slice() {
            [one] => Ok(Self::info(one)),
            [] => Err(StoreError::Key(format!("no cache entry has a key starting with {p}"))),
            many => Err(StoreError::Key(format!(
                "{} entries have keys starting with {p}; give more characters",
                many.len()
            ))),
        }
    }

    /// Totals over every entry, and per level.
    pub fn summary(&self) -> Result<CacheSummary> {
        let scanned = scan(self.root())?;
        let stale_bytes: u64 = scanned.stale.iter().map(|l| l.bytes).sum();
        let mut entries: Vec<EntryInfo> = scanned.entries.iter().map(Self::info).collect();
        entries.sort_by_key(|e| e.level);
        let total = |of: &[&EntryInfo], level: Option<Level>| {
            let mut parts: Vec<&str> = of.iter().map(|e| e.partition.as_str()).collect();
            parts.sort_unstable();
            parts.dedup();
            let metas = || of.iter().filter_map(|e| e.meta.as_ref());
            LevelSummary {
                level,
                entries: of.len(),
                total_bytes: of.iter().map(|e| e.entry_bytes + e.sidecar_bytes).sum(),
                partitions: parts.len(),
                hits: metas().map(|m| m.hit_count).sum(),
                compile_seconds_saved: metas().map(|m| m.hit_count as f64 * m.compile_seconds).sum(),
                compile_seconds_stored: metas().map(|m| m.compile_seconds).sum(),
            }
        };
        let all: Vec<&EntryInfo> = entries.iter().collect();
        let both = total(&all, None);
        let levels: Vec<LevelSummary> = Level::ALL
            .into_iter()
            .map(|l| total(&entries.iter().filter(|e| e.level == l).collect::<Vec<_>>(), Some(l)))
            .collect();
        Ok(CacheSummary {
            root: self.root().to_path_buf(),
            entries: both.entries,
            total_bytes: both.total_bytes + stale_bytes,
            max_size: self.max_size(),
            toolchains: levels[1].partitions,
            hits: both.hits,
            compile_seconds_saved: both.compile_seconds_saved,
            compile_seconds_stored: both.compile_seconds_stored,
            stale_files: scanned.stale.len(),
            stale_bytes,
            levels,
        })
    }

    /// Checks every entry's header (magic of its level, version, length, key) and checksum,
    /// then asks `check` about the payload of each good one (the executable level loads it
    /// into a plugin; see `DiskCache::verify`). An entry another user could have written (its
    /// file, or a folder from the root down to it) is bad and never passed to `check`.
    /// Reports; removes nothing.
    pub fn verify(&self, mut check: impl FnMut(&EntryInfo, &[u8]) -> Check) -> Result<VerifyReport> {
        let mut scanned = scan(self.root())?.entries;
        scanned.sort_by(|a, b| a.level.cmp(&b.level).then(a.key.cmp(&b.key)));
        let mut report = VerifyReport::default();
        for e in scanned {
            let bytes = match self.read_private(&e.paths.bin) {
                Ok(Some(bytes)) => Ok(bytes),
                Ok(None) => continue, // evicted meanwhile
                Err(refused @ StoreError::Insecure { .. }) => Err(refused.to_string()),
                Err(other) => return Err(other),
            };
            report.checked += 1;
            report.checked_per_level[e.level as usize] += 1;
            let bad =
                |reason: String| BadEntry { level: e.level, key: e.key.clone(), path: e.paths.bin.clone(), reason };
            // Another user could have written it: never handed to the plugin.
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(reason) => {
                    report.bad.push(bad(reason));
                    continue;
                }
            };
            let digest = parse_digest(&e.key);
            let payload = match entry::decode(e.level, &bytes, digest.as_ref()) {
                Ok(p) => p,
                Err(reason) => {
                    report.bad.push(bad(reason));
                    continue;
                }
            };
            match check(&Self::info(&e), payload) {
                Check::Ok => report.ok += 1,
                Check::Bad(reason) => report.bad.push(bad(reason)),
                Check::Skipped(reason) => report.skipped.push(SkippedEntry {
                    level: e.level,
                    key: e.key.clone(),
                    path: e.paths.bin.clone(),
                    reason,
                }),
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

    /// Removes the lock files nobody holds (left by a process that died while compiling; a
    /// held one belongs to a compile in progress and stays).
    fn sweep_locks(locks: &[Leftover], report: &mut PruneReport) {
        for l in locks {
            if lock::remove_if_unheld(&l.path) {
                report.removed_leftovers += 1;
            }
        }
    }

    fn sweep(leftovers: &[Leftover], age: Duration, report: &mut PruneReport) {
        for l in leftovers.iter().filter(|l| older_than(l.modified, age)) {
            if remove_if_exists(&l.path).unwrap_or(false) {
                report.removed_leftovers += 1;
            }
        }
    }

    /// Removes least-recently-used entries of either level (never `protect`) until
    /// everything fits in `max_bytes`; files of older layouts go first. Also sweeps stale
    /// temporary files and orphaned sidecars.
    pub fn evict_to(&self, max_bytes: u64, protect: Option<&Path>) -> Result<PruneReport> {
        self.prune_inner(Some(max_bytes), None, protect)
    }

    /// Removes entries (either level) and files of older layouts not used for longer than
    /// `older_than`, then evicts least-recently-used ones until everything fits in `max_size`.
    pub fn prune(&self, max_size: Option<u64>, older_than: Option<Duration>) -> Result<PruneReport> {
        self.forget_size();
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
        Self::sweep_locks(&scanned.locks, &mut report);
        // Old-layout files: by age like entries, and before any entry for the size limit.
        let mut stale_total = 0;
        let mut stale = Vec::new();
        for l in scanned.stale {
            if max_age.is_some_and(|age| older_than(l.modified, age)) {
                if remove_if_exists(&l.path).unwrap_or(false) {
                    report.removed_leftovers += 1;
                }
            } else {
                stale_total += l.bytes;
                stale.push(l);
            }
        }
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
            stale.sort_by_key(|l| l.modified);
            for l in &stale {
                if total + stale_total <= limit {
                    break;
                }
                if remove_if_exists(&l.path).unwrap_or(false) {
                    report.removed_leftovers += 1;
                }
                stale_total -= l.bytes;
            }
            for e in &kept {
                if total + stale_total <= limit {
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
        report.remaining_bytes = total + stale_total;
        Ok(report)
    }

    /// Removes every entry of both levels, leftover, file of an older layout and plugin-hash
    /// memo, and the emptied folders (the root itself stays). Files the store does not
    /// recognize are left alone.
    pub fn clear(&self) -> Result<PruneReport> {
        self.forget_size();
        let scanned = scan(self.root())?;
        let mut report = PruneReport::default();
        for e in &scanned.entries {
            Self::remove_entry(e, &mut report)?;
        }
        Self::sweep(&scanned.temps, Duration::ZERO, &mut report);
        Self::sweep(&scanned.orphans, Duration::ZERO, &mut report);
        Self::sweep_locks(&scanned.locks, &mut report);
        Self::sweep(&scanned.stale, Duration::ZERO, &mut report);
        let memo_dir = self.root().join(MEMO_DIR);
        if let Ok(memos) = std::fs::read_dir(&memo_dir) {
            for m in memos.flatten() {
                if m.file_name().to_string_lossy().ends_with(".json") {
                    let _ = std::fs::remove_file(m.path());
                }
            }
        }
        let layout = layout_dir(self.root());
        let mut folders: Vec<PathBuf> = scanned
            .entries
            .iter()
            .filter_map(|e| e.paths.bin.parent().map(Path::to_path_buf))
            .chain(
                scanned
                    .orphans
                    .iter()
                    .chain(&scanned.temps)
                    .chain(&scanned.locks)
                    .filter_map(|l| l.path.parent().map(Path::to_path_buf)),
            )
            .collect();
        folders.sort();
        folders.dedup();
        // Deepest first: partitions, then level folders, then the layout folder.
        folders.extend(Level::ALL.map(|l| layout.join(l.dir_name())));
        folders.push(layout);
        folders.extend(scanned.stale_dirs);
        folders.push(memo_dir);
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
