//! torchtpu's runtime: runs StableHLO on a PJRT plugin through our own bindings to the PJRT
//! C API.
//!
//! [`Plugin`] loads the plugin, [`Client`] owns devices, [`Buffer`]s and compiled
//! [`Executable`]s; [`ExecutableCache`] avoids recompiling the same module, in memory and (with
//! a [`DiskCache`]) across processes. See `docs/runtime.md` and `docs/cache.md`.

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
mod fork;
pub mod host_kernels;
mod kv;
mod optimized;
mod options;
mod plugin;
mod plugin_file;
mod plugin_search;
mod serialize;
pub mod store;
pub mod trace;

pub use buffer::{dense_byte_size, Buffer, ElementType};
pub use cache::{CacheSource, CacheStats, ExecutableCache};
pub use cache_key::{CacheDigest, CacheKey, KeyComponents, TORCHTPU_VERSION};
pub use client::{Client, ClientOption, Device};
pub use disk_cache::{CacheWarning, DiskCache, EntryMeta, Lookup, PutMeta, PutOutcome};
pub use error::{error_code_name, Result, RuntimeError, INSTALL_COMMAND};
pub use executable::Executable;
pub use ffi::keep_freed_host_memory;
pub use fork::in_forked_child;
pub use kv::{KeyValueStore, KvError, KvErrorCode, MemoryKeyValueStore};
pub use optimized::{collectives_in, Collective};
pub use options::{CompileOptions, XlaOption};
pub use plugin::{Plugin, SUPPORTED_API_MAJOR};
pub use store::{Level, Store};

pub use plugin_search::{
    find_plugin, plugin_candidates, plugin_path, set_python_environment, PLUGIN_ENV, PLUGIN_IN_ENVIRONMENT,
};

#[cfg(test)]
mod tests {
    use super::*;

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
