//! Where the default PJRT plugin is looked for. The runtime knows no build or source folder:
//! it looks where `scripts/setup.sh` installs the XLA CPU plugin (`<env>/pjrt/...` of a Python
//! environment) in the environments the process can name, and says every path it tried when
//! none has it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable that overrides the PJRT plugin path.
pub const PLUGIN_ENV: &str = "TORCHTPU_PJRT_PLUGIN";

/// Where `scripts/setup.sh` installs the XLA CPU plugin, relative to a Python environment.
pub const PLUGIN_IN_ENVIRONMENT: &str = "pjrt/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so";

/// The Python environment of the interpreter that loaded us (the extension registers
/// `sys.prefix` at import): searched first.
static PYTHON_ENVIRONMENT: OnceLock<PathBuf> = OnceLock::new();

/// Registers the Python environment the process runs in (`sys.prefix`); the first call wins.
pub fn set_python_environment(prefix: &Path) {
    let _ = PYTHON_ENVIRONMENT.set(prefix.to_path_buf());
}

/// The plugin paths tried, in order: `$TORCHTPU_PJRT_PLUGIN` alone when it is set; else the
/// setup location in the registered Python environment, in `$VIRTUAL_ENV`, and in a `.venv`
/// folder of the current directory, the executable's folder or any of their parents.
pub fn plugin_candidates() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os(PLUGIN_ENV) {
        return vec![PathBuf::from(p)];
    }
    let mut envs: Vec<PathBuf> = Vec::new();
    envs.extend(PYTHON_ENVIRONMENT.get().cloned());
    envs.extend(std::env::var_os("VIRTUAL_ENV").map(PathBuf::from));
    let starts =
        [std::env::current_dir().ok(), std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf))];
    for start in starts.into_iter().flatten() {
        envs.extend(start.ancestors().map(|dir| dir.join(".venv")));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for env in envs {
        let candidate = env.join(PLUGIN_IN_ENVIRONMENT);
        if !out.contains(&candidate) {
            out.push(candidate);
        }
    }
    out
}

/// The first candidate that exists, else `None`.
pub fn find_plugin() -> Option<PathBuf> {
    plugin_candidates().into_iter().find(|p| p.is_file())
}

/// The plugin path the default engine loads: the first candidate that exists, else the first
/// candidate (which then fails to load with every tried path in the error).
pub fn plugin_path() -> PathBuf {
    find_plugin()
        .or_else(|| plugin_candidates().into_iter().next())
        .unwrap_or_else(|| PathBuf::from(PLUGIN_IN_ENVIRONMENT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_search_venvs_upwards_from_the_current_directory() {
        if std::env::var_os(PLUGIN_ENV).is_some() {
            return;
        }
        let cwd = std::env::current_dir().unwrap();
        let candidates = plugin_candidates();
        // `cargo test` runs in the crate folder: the repository's `.venv` is one level up.
        let repo_venv = cwd.parent().unwrap().join(".venv").join(PLUGIN_IN_ENVIRONMENT);
        assert!(candidates.contains(&repo_venv), "{candidates:?}");
        assert!(candidates.iter().all(|c| c.ends_with(PLUGIN_IN_ENVIRONMENT)));
    }

    #[test]
    fn a_registered_python_environment_comes_first() {
        if std::env::var_os(PLUGIN_ENV).is_some() {
            return;
        }
        set_python_environment(Path::new("/opt/some-env"));
        let first = plugin_candidates().into_iter().next().unwrap();
        // Another test of this process may have registered first; either way it leads.
        assert_eq!(first, PYTHON_ENVIRONMENT.get().unwrap().join(PLUGIN_IN_ENVIRONMENT));
    }
}
