//! torchtpu's runtime: runs StableHLO on a PJRT plugin through our own bindings to the PJRT
//! C API.
//!
//! [`Plugin`] loads the plugin, [`Client`] owns devices, [`Buffer`]s and compiled
//! [`Executable`]s; [`ExecutableCache`] avoids recompiling the same module, in memory and (with
//! a [`DiskCache`]) across processes. See `docs/runtime.md` and `docs/cache.md`.

use std::path::PathBuf;

mod buffer;
mod cache;
mod cache_key;
pub mod cli;
mod client;
pub mod disk_cache;
pub mod dlpack;
mod error;
mod executable;
mod ffi;
mod options;
mod plugin;
mod plugin_file;
mod serialize;
pub mod store;

pub use buffer::{dense_byte_size, Buffer, ElementType};
pub use cache::{CacheSource, CacheStats, ExecutableCache};
pub use cache_key::{CacheDigest, CacheKey, KeyComponents, TORCHTPU_VERSION};
pub use client::{Client, ClientOption, Device};
pub use disk_cache::{CacheWarning, DiskCache, EntryMeta, Lookup, PutMeta, PutOutcome};
pub use error::{error_code_name, Result, RuntimeError, INSTALL_COMMAND};
pub use executable::Executable;
pub use options::CompileOptions;
pub use plugin::{Plugin, SUPPORTED_API_MAJOR};
pub use store::{Level, Store};

/// Environment variable that overrides the PJRT plugin path.
pub const PLUGIN_ENV: &str = "TORCHTPU_PJRT_PLUGIN";

/// Where `scripts/setup.sh` installs the XLA CPU plugin, relative to the repository root.
pub const DEFAULT_PLUGIN_RELATIVE: &str = ".venv/pjrt/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so";

/// The plugin path: `$TORCHTPU_PJRT_PLUGIN`, else the setup location in this checkout.
pub fn plugin_path() -> PathBuf {
    match std::env::var_os(PLUGIN_ENV) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(DEFAULT_PLUGIN_RELATIVE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_plugin_path_points_into_the_venv() {
        if std::env::var_os(PLUGIN_ENV).is_none() {
            let p = plugin_path();
            assert!(p.ends_with("pjrt_c_api_cpu_plugin.so"), "{}", p.display());
            assert!(p.to_string_lossy().contains(".venv/pjrt"));
        }
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Plugin>();
        assert_send_sync::<Client>();
        assert_send_sync::<Device>();
        assert_send_sync::<Buffer>();
        assert_send_sync::<Executable>();
        assert_send_sync::<ExecutableCache>();
        assert_send_sync::<DiskCache>();
        assert_send_sync::<Store>();
    }
}
