//! torchtpu's runtime: PJRT C API bindings, device buffers, executables and the caches.
//!
//! Not implemented yet (issue: "StableHLO emission through melior and the PJRT runtime").
//! What exists now is where setup installs the CPU plugin, so every later piece agrees on it.

use std::path::PathBuf;

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
    #[test]
    fn default_plugin_path_points_into_the_venv() {
        if std::env::var_os(super::PLUGIN_ENV).is_none() {
            let p = super::plugin_path();
            assert!(p.ends_with("pjrt_c_api_cpu_plugin.so"), "{}", p.display());
            assert!(p.to_string_lossy().contains(".venv/pjrt"));
        }
    }
}
