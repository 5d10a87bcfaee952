//! Remembers each plugin binary's SHA-256 under the cache root, keyed by the file's stamp,
//! so a process with a warm cache does not spend 0.2-0.4 s re-hashing a 200 MB plugin.
//!
//! A memo is used only when the stamp recorded with it equals the stamp taken when the
//! plugin was loaded (any rewrite or replacement of the file changes the stamp).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::plugin::Plugin;
use crate::plugin_file::FileStamp;
use crate::store::hex;

use crate::store::files::write_atomic;
use crate::store::Store;

/// Folder (under the cache root) holding the memos.
pub use crate::store::maintain::MEMO_DIR;

#[derive(Serialize, Deserialize)]
struct Memo {
    path: PathBuf,
    stamp: FileStamp,
    sha256: String,
}

fn memo_path(root: &Path, plugin: &Plugin) -> PathBuf {
    let id = hex(&Sha256::digest(plugin.path().as_os_str().as_encoded_bytes()));
    root.join(MEMO_DIR).join(format!("{}.json", &id[..16]))
}

/// The plugin binary's SHA-256, from the plugin, a valid memo, or by hashing the file; then
/// makes sure the memo records it (best effort). Reads the memo file, so callers do this
/// once per plugin. A memo that another user could have written (it, its folder or the root
/// owned by someone else or writable by group or others) is neither read nor rewritten: it
/// names the plugin that executable keys trust.
pub fn plugin_sha256(store: &Store, plugin: &Plugin) -> Result<String> {
    let path = memo_path(store.root(), plugin);
    let read = store.read_private(&path);
    let private = read.is_ok();
    let recorded = read.ok().flatten().and_then(|bytes| serde_json::from_slice::<Memo>(&bytes).ok()).filter(|memo| {
        memo.sha256.len() == 64
            && memo.sha256.bytes().all(|b| b.is_ascii_hexdigit())
            && memo.path == plugin.path()
            && memo.stamp == *plugin.file_stamp()
    });
    if let Some(memo) = &recorded {
        plugin.seed_binary_sha256(memo.sha256.clone());
    }
    let sha256 = plugin.binary_sha256()?.to_owned();
    if private && recorded.is_none_or(|memo| memo.sha256 != sha256) {
        let memo = Memo { path: plugin.path().to_path_buf(), stamp: *plugin.file_stamp(), sha256: sha256.clone() };
        if let Ok(json) = serde_json::to_vec_pretty(&memo) {
            let _ = write_atomic(&path, &json);
        }
    }
    Ok(sha256)
}
