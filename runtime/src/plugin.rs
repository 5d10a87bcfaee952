//! Loads a PJRT plugin (`GetPjrtApi`), checks its API version, and guards every call into it.
//!
//! A plugin is loaded and initialized once per process per canonical path and is never
//! unloaded: XLA plugins keep threads and globals that do not survive `dlclose`. Every other
//! runtime object still holds an `Arc<Plugin>`, so nothing can outlive the function table.

use std::collections::HashMap;
use std::ffi::c_char;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use libloading::Library;

use crate::error::{Result, RuntimeError};
use crate::ffi::{self, Args};
use crate::plugin_file::FileStamp;

/// The PJRT C API major version these bindings are written against.
pub const SUPPORTED_API_MAJOR: i32 = 0;

/// Reads a function pointer from the plugin's `PJRT_Api` table after checking that the
/// plugin's table is long enough to contain it. Evaluates to `Result<unsafe extern "C" fn ..>`.
macro_rules! pjrt_fn {
    ($plugin:expr, $name:ident) => {
        $plugin
            .slot(
                stringify!($name),
                ::std::mem::offset_of!($crate::ffi::PJRT_Api, $name),
                // SAFETY: only computes the field's address (no read); `slot` reads it after
                // checking the plugin's `struct_size` covers it.
                |api| unsafe { ::std::ptr::addr_of!((*api).$name) },
            )
            .and_then(|f| f.ok_or($crate::RuntimeError::Unimplemented { function: stringify!($name) }))
    };
}

/// Calls PJRT function `$name` with `$args` (a `&mut` args struct) and turns a returned
/// `PJRT_Error` into `RuntimeError::Pjrt`. The caller guarantees every pointer in `$args`
/// is valid for the call (this is the one unsafe step, documented at each use).
macro_rules! pjrt_call {
    ($plugin:expr, $name:ident, $args:expr) => {
        match $crate::fork::check_not_forked().and_then(|()| $crate::plugin::pjrt_fn!($plugin, $name)) {
            Ok(f) => {
                // SAFETY: `f` comes from the plugin's table for exactly this args type; the
                // caller filled `$args` with live pointers and set `struct_size`.
                let err = unsafe { f($args) };
                $plugin.check(stringify!($name), err)
            }
            Err(e) => Err(e),
        }
    };
}

pub(crate) use {pjrt_call, pjrt_fn};

type ErrorDestroyFn = unsafe extern "C" fn(*mut ffi::PJRT_Error_Destroy_Args);
type ErrorMessageFn = unsafe extern "C" fn(*mut ffi::PJRT_Error_Message_Args);
type ErrorGetCodeFn = unsafe extern "C" fn(*mut ffi::PJRT_Error_GetCode_Args) -> *mut ffi::PJRT_Error;

// Stand-ins for the error functions while they are being looked up (never called: no PJRT
// call happens before the real ones are in place).
unsafe extern "C" fn never_destroy(_: *mut ffi::PJRT_Error_Destroy_Args) {}
unsafe extern "C" fn never_message(_: *mut ffi::PJRT_Error_Message_Args) {}
unsafe extern "C" fn never_code(_: *mut ffi::PJRT_Error_GetCode_Args) -> *mut ffi::PJRT_Error {
    std::ptr::null_mut()
}

/// A loaded, initialized PJRT plugin: the shared library and its `PJRT_Api` table.
pub struct Plugin {
    path: PathBuf,
    api: *const ffi::PJRT_Api,
    /// The plugin's own `PJRT_Api::struct_size`: how much of the table exists.
    api_size: usize,
    version: (i32, i32),
    error_destroy: ErrorDestroyFn,
    error_message: ErrorMessageFn,
    error_get_code: ErrorGetCodeFn,
    /// The .so file's stamp when it was loaded.
    stamp: FileStamp,
    /// Hex SHA-256 of the .so (or why it is unknown), computed on first request.
    sha256: OnceLock<std::result::Result<String, String>>,
    /// The host kernels registered through the FFI extension (or why none), on first request.
    host_kernels: OnceLock<std::result::Result<Vec<&'static str>, String>>,
    _library: Library,
}

// SAFETY: the PJRT C API is thread-safe; `api` points at an immutable table inside the
// library, which this struct keeps loaded.
unsafe impl Send for Plugin {}
unsafe impl Sync for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("path", &self.path).field("api_version", &self.version).finish()
    }
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<Plugin>>> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Plugin>>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Plugin {
    /// Loads the plugin at `path` (once per process; later calls return the same `Arc`),
    /// checks its API version and calls `PJRT_Plugin_Initialize`.
    pub fn load(path: &Path) -> Result<Arc<Plugin>> {
        if !path.is_file() {
            return Err(RuntimeError::plugin_not_found(path.to_path_buf()));
        }
        let canonical = path
            .canonicalize()
            .map_err(|e| RuntimeError::PluginLoad { path: path.to_path_buf(), reason: e.to_string() })?;
        let mut loaded = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = loaded.get(&canonical) {
            return Ok(Arc::clone(p));
        }
        let plugin = Arc::new(Self::open(&canonical)?);
        crate::fork::note_plugin_loaded();
        loaded.insert(canonical, Arc::clone(&plugin));
        Ok(plugin)
    }

    /// Loads the plugin named by `$TORCHTPU_PJRT_PLUGIN`, else the one `make setup` installs,
    /// looked for where `plugin_candidates` says; the error names every path tried.
    pub fn load_default() -> Result<Arc<Plugin>> {
        match crate::find_plugin() {
            Some(path) => Self::load(&path),
            None => Err(RuntimeError::plugin_not_found_in(crate::plugin_candidates())),
        }
    }

    /// The plugin's reported PJRT C API version, `(major, minor)`.
    pub fn api_version(&self) -> (i32, i32) {
        self.version
    }

    /// The canonical path the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hex SHA-256 of the plugin's .so file: what tells two builds of a plugin apart (their
    /// platform versions may be equal). Computed once per process, on the first call (hashing
    /// the ~200 MB CPU plugin takes 0.2-0.4 s, so loading does not pay for it), and only if the
    /// file is still the one that was loaded: a plugin replaced on disk after loading gives
    /// `PluginHash`, never the new file's hash.
    pub fn binary_sha256(&self) -> Result<&str> {
        self.sha256
            .get_or_init(|| crate::plugin_file::sha256_if_unchanged(&self.path, &self.stamp))
            .as_deref()
            .map_err(|reason| RuntimeError::PluginHash { path: self.path.clone(), reason: reason.clone() })
    }

    /// Whether [`Plugin::binary_sha256`] is already known (no hashing needed).
    pub fn binary_sha256_is_known(&self) -> bool {
        matches!(self.sha256.get(), Some(Ok(_)))
    }

    /// The .so file's stamp taken when it was loaded.
    pub(crate) fn file_stamp(&self) -> &FileStamp {
        &self.stamp
    }

    /// Supplies the hash from a trusted memo (one recorded for this exact file stamp), so
    /// [`Plugin::binary_sha256`] need not read the file. Ignored if already known.
    pub(crate) fn seed_binary_sha256(&self, sha256: String) {
        let _ = self.sha256.set(Ok(sha256));
    }

    fn open(path: &Path) -> Result<Plugin> {
        let load_err = |reason: String| RuntimeError::PluginLoad { path: path.to_path_buf(), reason };
        // Taken before dlopen: if the file changes after this, `binary_sha256` refuses.
        let stamp = FileStamp::of(path).map_err(|e| load_err(e.to_string()))?;
        // SAFETY: loading a shared library runs its initializers; a PJRT plugin is meant to
        // be dlopen'ed this way.
        let library = unsafe { Library::new(path) }.map_err(|e| load_err(e.to_string()))?;
        // SAFETY: `GetPjrtApi` is the plugin's documented entry point with this signature.
        let api = unsafe {
            let get: libloading::Symbol<unsafe extern "C" fn() -> *const ffi::PJRT_Api> =
                library.get(b"GetPjrtApi\0").map_err(|e| load_err(e.to_string()))?;
            get()
        };
        if api.is_null() {
            return Err(load_err("GetPjrtApi returned null".into()));
        }
        // SAFETY: `struct_size` is the first field of every version of the table.
        let api_size = unsafe { std::ptr::addr_of!((*api).struct_size).read() };
        let version_end = offset_of!(ffi::PJRT_Api, pjrt_api_version) + size_of::<ffi::PJRT_Api_Version>();
        if api_size < version_end {
            return Err(RuntimeError::ApiTooOld {
                function: "PJRT_Api.pjrt_api_version",
                have: api_size,
                need: version_end,
                major: -1,
                minor: -1,
            });
        }
        // SAFETY: the size check above proves the version struct is inside the table.
        let (major, minor) = unsafe {
            let v = std::ptr::addr_of!((*api).pjrt_api_version);
            (std::ptr::addr_of!((*v).major_version).read(), std::ptr::addr_of!((*v).minor_version).read())
        };
        if major != SUPPORTED_API_MAJOR {
            return Err(RuntimeError::ApiVersionMismatch {
                path: path.to_path_buf(),
                major,
                minor,
                expected_major: SUPPORTED_API_MAJOR,
            });
        }

        // Placeholders until the checked slot reader below fetches the real error functions.
        let mut plugin = Plugin {
            path: path.to_path_buf(),
            api,
            api_size,
            version: (major, minor),
            error_destroy: never_destroy,
            error_message: never_message,
            error_get_code: never_code,
            stamp,
            sha256: OnceLock::new(),
            host_kernels: OnceLock::new(),
            _library: library,
        };
        plugin.error_destroy = pjrt_fn!(plugin, PJRT_Error_Destroy)?;
        plugin.error_message = pjrt_fn!(plugin, PJRT_Error_Message)?;
        plugin.error_get_code = pjrt_fn!(plugin, PJRT_Error_GetCode)?;

        let mut args = ffi::PJRT_Plugin_Initialize_Args::new();
        pjrt_call!(plugin, PJRT_Plugin_Initialize, &mut args)?;
        Ok(plugin)
    }

    /// The custom-call targets of torchtpu's host kernels (`host_kernels::INT8_MATMUL`)
    /// that XLA programs compiled by this plugin may call, registered through the plugin's PJRT
    /// FFI extension on the first request; or why there are none (no FFI extension, or one
    /// that refuses the registration). Registration is process-wide inside the plugin.
    pub fn host_kernels(&self) -> std::result::Result<&[&'static str], &str> {
        self.host_kernels.get_or_init(|| self.register_host_kernels()).as_deref().map_err(String::as_str)
    }

    fn register_host_kernels(&self) -> std::result::Result<Vec<&'static str>, String> {
        use crate::host_kernels::{ExtensionBase, PjrtFfiExtension, RegisterHandlerArgs, PJRT_EXTENSION_FFI};
        // SAFETY: `extension_start` is the second field of every version of the table; the
        // chain is the plugin's, immutable, and each link is read only after its null check.
        let mut ext = unsafe { std::ptr::addr_of!((*self.api).extension_start).read() } as *const ExtensionBase;
        while let Some(base) = unsafe { ext.as_ref() } {
            if base.kind == PJRT_EXTENSION_FFI {
                break;
            }
            ext = base.next;
        }
        // SAFETY: as above.
        let Some(base) = (unsafe { ext.as_ref() }) else {
            return Err("the PJRT plugin has no FFI extension".into());
        };
        if base.struct_size < offset_of!(PjrtFfiExtension, register_handler) + size_of::<usize>() {
            return Err("the PJRT plugin's FFI extension predates handler registration".into());
        }
        // SAFETY: the tag and size say this is an FFI extension with `register_handler`.
        let register = unsafe { (*(ext as *const PjrtFfiExtension)).register_handler }
            .ok_or("the PJRT plugin's FFI extension has no register_handler")?;
        let mut registered = Vec::new();
        for (name, handler) in crate::host_kernels::kernels() {
            let platform = crate::host_kernels::PLATFORM;
            let mut args = RegisterHandlerArgs {
                struct_size: RegisterHandlerArgs::STRUCT_SIZE,
                target_name: name.as_ptr().cast(),
                target_name_size: name.len(),
                handler,
                platform_name: platform.as_ptr().cast(),
                platform_name_size: platform.len(),
                traits: 0,
            };
            // SAFETY: the args struct is complete for its declared size; the names outlive
            // the call (XLA copies them) and the handler is a process-lifetime function.
            let err = unsafe { register(&mut args) } as *mut ffi::PJRT_Error;
            self.check("PJRT_FFI_Register_Handler", err).map_err(|e| format!("registering {name}: {e}"))?;
            registered.push(name);
        }
        Ok(registered)
    }

    /// Reads one slot of the function table, or fails if the plugin's table is too short.
    /// `field` must compute (not read) the address of the slot at `offset`.
    pub(crate) fn slot<T: Copy>(
        &self,
        function: &'static str,
        offset: usize,
        field: impl FnOnce(*const ffi::PJRT_Api) -> *const T,
    ) -> Result<T> {
        let need = offset + size_of::<T>();
        if need > self.api_size {
            return Err(RuntimeError::ApiTooOld {
                function,
                have: self.api_size,
                need,
                major: self.version.0,
                minor: self.version.1,
            });
        }
        // SAFETY: the plugin's table is `api_size` bytes long and the slot ends within it.
        Ok(unsafe { field(self.api).read() })
    }

    /// Turns a `PJRT_Error*` returned by `call` into a result, destroying the error.
    pub(crate) fn check(&self, call: &'static str, err: *mut ffi::PJRT_Error) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let mut msg = ffi::PJRT_Error_Message_Args::new();
        msg.error = err;
        // SAFETY: `err` is a live error owned by us until destroyed below.
        unsafe { (self.error_message)(&mut msg) };
        // SAFETY: the plugin returns `message_size` bytes that live as long as `err`.
        let message = unsafe { plugin_string(msg.message, msg.message_size) };
        let mut code_args = ffi::PJRT_Error_GetCode_Args::new();
        code_args.error = err;
        // SAFETY: as above; GetCode may itself return an error, which we destroy.
        let code_err = unsafe { (self.error_get_code)(&mut code_args) };
        let code = if code_err.is_null() {
            code_args.code
        } else {
            self.destroy_error(code_err);
            2 // UNKNOWN
        };
        self.destroy_error(err);
        Err(RuntimeError::Pjrt { call, code, message })
    }

    pub(crate) fn destroy_error(&self, err: *mut ffi::PJRT_Error) {
        let mut args = ffi::PJRT_Error_Destroy_Args::new();
        args.error = err;
        // SAFETY: `err` is a live error that nobody else owns.
        unsafe { (self.error_destroy)(&mut args) };
    }

    /// Blocks until `event` is ready, destroys it, and reports its error (if any) as `call`'s.
    /// A null event means the work was synchronous.
    pub(crate) fn await_event(&self, call: &'static str, event: *mut ffi::PJRT_Event) -> Result<()> {
        if event.is_null() {
            return Ok(());
        }
        let mut args = ffi::PJRT_Event_Await_Args::new();
        args.event = event;
        let waited = pjrt_call!(self, PJRT_Event_Await, &mut args).map_err(|e| match e {
            RuntimeError::Pjrt { code, message, .. } => RuntimeError::Pjrt { call, code, message },
            other => other,
        });
        let destroyed = self.destroy_event(event);
        waited.and(destroyed)
    }

    /// Frees an event without waiting for it.
    pub(crate) fn destroy_event(&self, event: *mut ffi::PJRT_Event) -> Result<()> {
        if event.is_null() {
            return Ok(());
        }
        let mut args = ffi::PJRT_Event_Destroy_Args::new();
        args.event = event;
        pjrt_call!(self, PJRT_Event_Destroy, &mut args)
    }
}

/// Copies a (pointer, length) string owned by the plugin into a `String`.
///
/// # Safety
/// `ptr` must be null or point at `len` readable bytes.
pub(crate) unsafe fn plugin_string(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin over a fake, short function table: the guard must refuse slots past its end
    /// and report null slots, without ever calling into the table.
    #[test]
    #[cfg(unix)]
    fn slot_reads_are_bounded_by_the_plugins_table_size() {
        // SAFETY: an all-zero table is valid (null function pointers, zero sizes).
        let mut table: Box<ffi::PJRT_Api> = Box::new(unsafe { std::mem::zeroed() });
        let short = offset_of!(ffi::PJRT_Api, PJRT_Client_Create);
        table.struct_size = short;
        let plugin = Plugin {
            path: PathBuf::from("fake"),
            api: &*table,
            api_size: short,
            version: (0, 1),
            error_destroy: never_destroy,
            error_message: never_message,
            error_get_code: never_code,
            stamp: FileStamp { dev: 0, ino: 0, size: 0, mtime_ns: 0, ctime_ns: 0 },
            sha256: OnceLock::new(),
            host_kernels: OnceLock::new(),
            _library: libloading::os::unix::Library::this().into(),
        };
        match pjrt_fn!(plugin, PJRT_Client_Create) {
            Err(RuntimeError::ApiTooOld { function, have, need, .. }) => {
                assert_eq!(function, "PJRT_Client_Create");
                assert_eq!(have, short);
                assert_eq!(need, short + size_of::<usize>());
            }
            other => panic!("expected ApiTooOld, got {:?}", other.map(|_| ())),
        }
        match pjrt_fn!(plugin, PJRT_Event_Destroy) {
            Err(RuntimeError::Unimplemented { function }) => {
                assert_eq!(function, "PJRT_Event_Destroy")
            }
            other => panic!("expected Unimplemented, got {:?}", other.map(|_| ())),
        }
        assert!(plugin.check("PJRT_Anything", std::ptr::null_mut()).is_ok());
        assert!(plugin.await_event("PJRT_Anything", std::ptr::null_mut()).is_ok());
        // No extension chain: no host kernels, and the reason says so.
        assert_eq!(plugin.host_kernels(), Err("the PJRT plugin has no FFI extension"));
    }
}
