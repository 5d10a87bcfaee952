//! The runtime's one error type: every failure, ours or the plugin's, becomes a `RuntimeError`.

use std::path::PathBuf;

/// What `make setup` runs to install the default CPU plugin.
pub const INSTALL_COMMAND: &str = "pip install --no-deps --target .venv/pjrt lammps-jax-pjrt-cpu==0.11.2";

/// Result alias used across the runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Everything that can go wrong between loading a PJRT plugin and reading a result back.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No file at the plugin path.
    #[error("PJRT plugin not found at {}: {hint}", path.display())]
    PluginNotFound { path: PathBuf, hint: String },

    /// The file exists but could not be loaded as a PJRT plugin (dlopen or `GetPjrtApi` failed).
    #[error("could not load PJRT plugin {}: {reason}", path.display())]
    PluginLoad { path: PathBuf, reason: String },

    /// The plugin speaks an incompatible major version of the PJRT C API.
    #[error("PJRT plugin {} reports C API version {major}.{minor}; this runtime needs major version {expected_major}", path.display())]
    ApiVersionMismatch { path: PathBuf, major: i32, minor: i32, expected_major: i32 },

    /// The plugin binary's SHA-256 could not be established (unreadable, or the file was
    /// replaced or rewritten after it was loaded).
    #[error("cannot hash PJRT plugin {}: {reason}", path.display())]
    PluginHash { path: PathBuf, reason: String },

    /// The plugin's function table (or version struct) is too short for an entry we need.
    #[error("PJRT plugin (C API {major}.{minor}) is too old for {function}: its PJRT_Api is {have} bytes, {function} needs {need}")]
    ApiTooOld { function: &'static str, have: usize, need: usize, major: i32, minor: i32 },

    /// The plugin's function table has the slot but left it null.
    #[error("PJRT plugin does not implement {function}")]
    Unimplemented { function: &'static str },

    /// A PJRT call returned an error; `message` is the plugin's own text.
    #[error("{call} failed ({}): {message}", error_code_name(*code))]
    Pjrt { call: &'static str, code: i32, message: String },

    /// The caller passed something the runtime rejects before calling the plugin.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Host memory for a copy could not be allocated (the allocation is fallible, so a huge
    /// buffer is an error rather than an abort).
    #[error("cannot allocate {bytes} bytes of host memory")]
    HostAlloc { bytes: usize },

    /// A file-system operation of the persistent cache failed (`StoreError::Io`).
    #[error("cannot {action} {}: {source}", path.display())]
    CacheIo {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A folder or entry of the persistent cache is owned by another user or writable by group
    /// or others, so it is not used (`StoreError::Insecure`; `docs/cache.md`).
    #[error(
        "refusing {}: {problem}. A cached executable is native code, so torchtpu uses no cache folder or entry \
         another user could have written; the cache is not used for it. Fix: {fix}",
        path.display()
    )]
    CacheRefused { path: PathBuf, problem: String, fix: String },

    /// Another process held a cache entry's lock for longer than the lock timeout
    /// (`StoreError::LockTimeout`): the caller compiles the entry itself.
    #[error(
        "waited {:.1} s for {} (another process compiling the same program) and gave up: compiling it here \
         instead (the wait is set by TORCHTPU_CACHE_LOCK_TIMEOUT)",
        waited.as_secs_f64(),
        path.display()
    )]
    CacheLockTimeout { path: PathBuf, waited: std::time::Duration },

    /// A persistent-cache entry is unusable (truncated, corrupt, wrong checksum or key, or the
    /// plugin could not load it). Callers treat it as a miss.
    #[error("bad cache entry {}: {reason}", path.display())]
    CacheEntry { path: PathBuf, reason: String },

    /// This process was forked from one that had started the PJRT plugin: its threads and
    /// locks did not survive the fork, so the plugin cannot be used here (`fork.rs`).
    #[error(
        "cannot use the PJRT plugin in a forked subprocess: the parent process had already started it. \
         To use the tpu device with multiprocessing, use the 'spawn' start method \
         (multiprocessing.set_start_method('spawn'), or DataLoader(multiprocessing_context='spawn'))"
    )]
    ForkedChild,

    /// The plugin returned a buffer whose element type this runtime does not model.
    #[error("PJRT buffer has element type {0} (PJRT_Buffer_Type), which this runtime does not support")]
    UnsupportedElementType(i32),
}

impl From<crate::store::StoreError> for RuntimeError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Io { action, path, source } => RuntimeError::CacheIo { action, path, source },
            crate::store::StoreError::Key(message) => RuntimeError::InvalidArgument(message),
            crate::store::StoreError::Insecure { path, problem, fix } => {
                RuntimeError::CacheRefused { path, problem, fix }
            }
            crate::store::StoreError::LockTimeout { path, waited } => RuntimeError::CacheLockTimeout { path, waited },
        }
    }
}

impl RuntimeError {
    /// The not-found error for `path`, naming both ways to fix it.
    pub fn plugin_not_found(path: PathBuf) -> Self {
        let hint = format!(
            "set {} to the path of a PJRT plugin .so, or run `make setup` (which runs `{}`)",
            crate::PLUGIN_ENV,
            INSTALL_COMMAND
        );
        RuntimeError::PluginNotFound { path, hint }
    }

    /// The not-found error after a search: names the first path and every other one tried.
    pub fn plugin_not_found_in(tried: Vec<PathBuf>) -> Self {
        let mut tried = tried.into_iter();
        let first = tried.next().unwrap_or_default();
        let mut e = RuntimeError::plugin_not_found(first);
        let others: Vec<String> = tried.map(|p| p.display().to_string()).collect();
        if let RuntimeError::PluginNotFound { hint, .. } = &mut e {
            if !others.is_empty() {
                *hint = format!("also tried {}; {hint}", others.join(", "));
            }
        }
        e
    }

    /// The PJRT error code, if this error came from the plugin.
    pub fn pjrt_code(&self) -> Option<i32> {
        match self {
            RuntimeError::Pjrt { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The absl status name for a `PJRT_Error_Code`.
pub fn error_code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "unknown code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_path_env_var_and_install_command() {
        let msg = RuntimeError::plugin_not_found(PathBuf::from("/nowhere/p.so")).to_string();
        assert!(msg.contains("/nowhere/p.so"), "{msg}");
        assert!(msg.contains("TORCHTPU_PJRT_PLUGIN"), "{msg}");
        assert!(msg.contains("make setup"), "{msg}");
        assert!(msg.contains(INSTALL_COMMAND), "{msg}");
    }

    #[test]
    fn pjrt_error_shows_code_name_and_message() {
        let e = RuntimeError::Pjrt { call: "PJRT_Client_Compile", code: 3, message: "bad".into() };
        assert_eq!(e.to_string(), "PJRT_Client_Compile failed (INVALID_ARGUMENT): bad");
        assert_eq!(e.pjrt_code(), Some(3));
    }
}
