//! The key-value store a multi-process PJRT client shares with its peer processes.
//!
//! GPU plugins create a client that spans processes when given `node_id` / `num_nodes` create
//! options and get/put (and, since the try-get pair was added, try-get) callbacks over a store
//! every process can reach: the processes exchange their topology and collective
//! communicator ids through it, during client creation and later (the first collective of a
//! device group). [`KeyValueStore`] is that store as Rust sees it; [`Client::with_distributed`]
//! hands it to the plugin as the `extern "C"` trampolines below, which:
//!
//! - never unwind into the plugin: a store that panics is caught and reported as an
//!   `INTERNAL` `PJRT_Error`, made with the plugin's own `callback_error` as the header says;
//! - return values the way the header asks: `malloc`ed, with a deleter that `free`s them,
//!   which the plugin calls once it has copied the value;
//! - read the plugin's strings only within the sizes it gives.
//!
//! The store is kept alive by the client (`ClientInner`), after the client is destroyed.
//!
//! [`Client::with_distributed`]: crate::Client::with_distributed

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::ffi;

/// A store shared by the processes of one multi-process client. Called from the plugin's
/// threads (any of them, concurrently), so it must be thread-safe; `get` blocks.
pub trait KeyValueStore: Send + Sync {
    /// The value of `key`, waiting up to `timeout` for another process to set it. A key still
    /// unset then is an error, [`KvError::timeout`] (`DEADLINE_EXCEEDED`).
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError>;

    /// The value of `key` if it is set now, else `None`, without waiting.
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError>;

    /// Sets `key` to `value` (for every process).
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError>;
}

/// The status code a store failure reaches the plugin with (absl's codes, as PJRT's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvErrorCode {
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Internal,
}

impl KvErrorCode {
    /// The `PJRT_Error_Code` value.
    pub fn pjrt_code(self) -> i32 {
        match self {
            KvErrorCode::InvalidArgument => 3,
            KvErrorCode::DeadlineExceeded => 4,
            KvErrorCode::NotFound => 5,
            KvErrorCode::ResourceExhausted => 8,
            KvErrorCode::Unavailable => 14,
            KvErrorCode::Internal => 13,
        }
    }
}

/// Why a store call failed: what the plugin's `PJRT_Error` will carry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KvError {
    pub code: KvErrorCode,
    pub message: String,
}

impl KvError {
    pub fn new(code: KvErrorCode, message: impl Into<String>) -> KvError {
        KvError { code, message: message.into() }
    }

    /// `key` was not set within `timeout`.
    pub fn timeout(key: &str, timeout: Duration) -> KvError {
        KvError::new(
            KvErrorCode::DeadlineExceeded,
            format!("key-value store: key {key:?} was not set within {} ms", timeout.as_millis()),
        )
    }

    pub fn internal(message: impl Into<String>) -> KvError {
        KvError::new(KvErrorCode::Internal, message)
    }
}

/// A store in this process's memory: for one-process clients (`num_nodes = 1`) and tests.
#[derive(Default)]
pub struct MemoryKeyValueStore {
    values: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl MemoryKeyValueStore {
    pub fn new() -> MemoryKeyValueStore {
        MemoryKeyValueStore::default()
    }
}

impl KeyValueStore for MemoryKeyValueStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(v) = values.get(key) {
                return Ok(v.clone());
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Err(KvError::timeout(key, timeout));
            }
            values = self.changed.wait_timeout(values, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.values.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned())
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.values.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }
}

/// What a client's `kv_*_user_arg` point at: one heap address, owned by the client (and the
/// create args until then), so it outlives every callback the plugin makes.
pub(crate) struct KvCallbacks {
    store: Arc<dyn KeyValueStore>,
}

impl KvCallbacks {
    pub(crate) fn new(store: Arc<dyn KeyValueStore>) -> Box<KvCallbacks> {
        Box::new(KvCallbacks { store })
    }

    /// Points `args`' get/put/try-get callbacks at the trampolines, with `self` (which must
    /// stay where it is, in its box, for the client's life) as their user arg.
    pub(crate) fn install(&self, args: &mut ffi::PJRT_Client_Create_Args) {
        let me = self as *const KvCallbacks as *mut c_void;
        args.kv_get_callback = Some(kv_get);
        args.kv_get_user_arg = me;
        args.kv_put_callback = Some(kv_put);
        args.kv_put_user_arg = me;
        args.kv_try_get_callback = Some(kv_try_get);
        args.kv_try_get_user_arg = me;
    }
}

/// Runs a store call, turning a panic into an `INTERNAL` error (never unwinding further).
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, KvError>) -> Result<T, KvError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            // Even the payload's drop must not unwind into the plugin.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            Err(KvError::internal(format!("the key-value store panicked in {what}: {why}")))
        }
    }
}

/// The plugin's bytes at (`ptr`, `len`) as a key.
///
/// # Safety
/// `ptr` must be null or point at `len` readable bytes for the call.
unsafe fn key_str<'a>(ptr: *const c_char, len: usize) -> Result<&'a str, KvError> {
    if len == 0 {
        return Ok("");
    }
    if ptr.is_null() {
        return Err(KvError::new(KvErrorCode::InvalidArgument, "key-value callback: null key"));
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    std::str::from_utf8(bytes)
        .map_err(|_| KvError::new(KvErrorCode::InvalidArgument, "key-value callback: the key is not UTF-8"))
}

/// The store behind a callback's user arg.
///
/// # Safety
/// `user_arg` must be null or what `KvCallbacks::install` set, still alive.
unsafe fn store_of<'a>(user_arg: *mut c_void) -> Result<&'a dyn KeyValueStore, KvError> {
    // SAFETY: guaranteed by the caller.
    match unsafe { user_arg.cast::<KvCallbacks>().as_ref() } {
        Some(cb) => Ok(&*cb.store),
        None => Err(KvError::new(KvErrorCode::InvalidArgument, "key-value callback: null user_arg")),
    }
}

/// Makes the `PJRT_Error` for `err` with the plugin's error maker; null if the plugin gave
/// none (nothing else can make one of its errors).
///
/// # Safety
/// `callback_error` must be null or point at the plugin's (possibly null) error maker.
unsafe fn report(callback_error: *mut ffi::PJRT_CallbackError, err: &KvError) -> *mut ffi::PJRT_Error {
    // SAFETY: guaranteed by the caller.
    let Some(make) = unsafe { callback_error.as_ref() }.copied().flatten() else {
        return ptr::null_mut();
    };
    // SAFETY: the header's contract: the maker copies the message, valid for this call.
    let made = catch_unwind(AssertUnwindSafe(|| unsafe {
        make(err.code.pjrt_code(), err.message.as_ptr().cast(), err.message.len())
    }));
    made.unwrap_or(ptr::null_mut())
}

/// Frees a value a get/try-get callback returned (the header's value deleter).
unsafe extern "C" fn free_value(value: *mut c_char) {
    // SAFETY: every value we hand out comes from `malloc` (or is null).
    unsafe { ffi::free(value.cast()) };
}

/// A `malloc`ed copy of `value` for the plugin, freed by `free_value`.
fn plugin_value(value: &[u8]) -> Result<(*mut c_char, usize), KvError> {
    // SAFETY: malloc of a nonzero size; null (out of memory) is checked.
    let p = unsafe { ffi::malloc(value.len().max(1)) }.cast::<u8>();
    if p.is_null() {
        return Err(KvError::new(
            KvErrorCode::ResourceExhausted,
            format!("key-value callback: cannot allocate {} bytes for a value", value.len()),
        ));
    }
    // SAFETY: `p` has room for `value.len()` bytes and does not overlap `value`.
    unsafe { ptr::copy_nonoverlapping(value.as_ptr(), p, value.len()) };
    Ok((p.cast(), value.len()))
}

/// Whether a plugin's args struct of `struct_size` bytes holds the field ending at `end`.
fn holds(struct_size: usize, end: usize) -> bool {
    struct_size >= end
}

/// `PJRT_KeyValueGetCallback` over the client's store.
unsafe extern "C" fn kv_get(args: *mut ffi::PJRT_KeyValueGetCallback_Args) -> *mut ffi::PJRT_Error {
    type A = ffi::PJRT_KeyValueGetCallback_Args;
    // SAFETY: the plugin passes its live args struct (or null), `struct_size` bytes long.
    let Some(args) = (unsafe { args.as_mut() }) else { return ptr::null_mut() };
    if !holds(args.struct_size, size_of::<A>()) {
        if !holds(args.struct_size, offset_of!(A, callback_error) + size_of::<usize>()) {
            return ptr::null_mut();
        }
        let err = KvError::new(KvErrorCode::InvalidArgument, "PJRT_KeyValueGetCallback_Args is too small");
        // SAFETY: the struct holds `callback_error`, the plugin's.
        return unsafe { report(args.callback_error, &err) };
    }
    // An empty value until one is found: what the plugin sees if it gave no error maker.
    args.value = ptr::null_mut();
    args.value_size = 0;
    args.value_deleter_callback = Some(free_value);
    let (key, key_size, user_arg, timeout_ms) = (args.key, args.key_size, args.user_arg, args.timeout_in_ms);
    let got = guarded("get", || {
        // SAFETY: the plugin's key is `key_size` bytes; `user_arg` is ours (install).
        let key = unsafe { key_str(key, key_size) }?;
        let store = unsafe { store_of(user_arg) }?;
        // A negative timeout (an infinite one, truncated to int) waits as long as it can.
        let timeout = u64::try_from(timeout_ms).map_or(Duration::MAX, Duration::from_millis);
        plugin_value(&store.get(key, timeout)?)
    });
    match got {
        Ok((value, size)) => {
            args.value = value;
            args.value_size = size;
            ptr::null_mut()
        }
        // SAFETY: `callback_error` is the plugin's.
        Err(e) => unsafe { report(args.callback_error, &e) },
    }
}

/// `PJRT_KeyValueTryGetCallback` over the client's store: NOT_FOUND when the key is unset.
unsafe extern "C" fn kv_try_get(args: *mut ffi::PJRT_KeyValueTryGetCallback_Args) -> *mut ffi::PJRT_Error {
    type A = ffi::PJRT_KeyValueTryGetCallback_Args;
    // SAFETY: as in `kv_get`.
    let Some(args) = (unsafe { args.as_mut() }) else { return ptr::null_mut() };
    if !holds(args.struct_size, size_of::<A>()) {
        if !holds(args.struct_size, offset_of!(A, callback_error) + size_of::<usize>()) {
            return ptr::null_mut();
        }
        let err = KvError::new(KvErrorCode::InvalidArgument, "PJRT_KeyValueTryGetCallback_Args is too small");
        // SAFETY: the struct holds `callback_error`, the plugin's.
        return unsafe { report(args.callback_error, &err) };
    }
    args.value = ptr::null_mut();
    args.value_size = 0;
    args.value_deleter_callback = Some(free_value);
    let (key, key_size, user_arg) = (args.key, args.key_size, args.user_arg);
    let got = guarded("try_get", || {
        // SAFETY: as in `kv_get`.
        let key = unsafe { key_str(key, key_size) }?;
        let store = unsafe { store_of(user_arg) }?;
        match store.try_get(key)? {
            Some(v) => plugin_value(&v),
            None => Err(KvError::new(KvErrorCode::NotFound, format!("key-value store: key {key:?} is not set"))),
        }
    });
    match got {
        Ok((value, size)) => {
            args.value = value;
            args.value_size = size;
            ptr::null_mut()
        }
        // SAFETY: `callback_error` is the plugin's.
        Err(e) => unsafe { report(args.callback_error, &e) },
    }
}

/// `PJRT_KeyValuePutCallback` over the client's store.
unsafe extern "C" fn kv_put(args: *mut ffi::PJRT_KeyValuePutCallback_Args) -> *mut ffi::PJRT_Error {
    type A = ffi::PJRT_KeyValuePutCallback_Args;
    // SAFETY: as in `kv_get`.
    let Some(args) = (unsafe { args.as_mut() }) else { return ptr::null_mut() };
    if !holds(args.struct_size, size_of::<A>()) {
        // `callback_error` comes after the value, so a short struct may not hold it either.
        if !holds(args.struct_size, offset_of!(A, callback_error) + size_of::<usize>()) {
            return ptr::null_mut();
        }
        let err = KvError::new(KvErrorCode::InvalidArgument, "PJRT_KeyValuePutCallback_Args is too small");
        // SAFETY: the struct holds `callback_error`, the plugin's.
        return unsafe { report(args.callback_error, &err) };
    }
    let (key, key_size, value, value_size, user_arg) =
        (args.key, args.key_size, args.value, args.value_size, args.user_arg);
    let put = guarded("put", || {
        // SAFETY: as in `kv_get`; the value is `value_size` bytes, alive for the call.
        let key = unsafe { key_str(key, key_size) }?;
        let store = unsafe { store_of(user_arg) }?;
        let value: &[u8] = if value_size == 0 {
            &[]
        } else if value.is_null() {
            return Err(KvError::new(KvErrorCode::InvalidArgument, "key-value put: null value"));
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(value.cast::<u8>(), value_size) }
        };
        store.put(key, value)
    });
    match put {
        Ok(()) => ptr::null_mut(),
        // SAFETY: `callback_error` is the plugin's.
        Err(e) => unsafe { report(args.callback_error, &e) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_store_waits_for_a_put_and_times_out_without_one() {
        let store = Arc::new(MemoryKeyValueStore::new());
        assert_eq!(store.try_get("k").unwrap(), None);
        let err = store.get("k", Duration::from_millis(20)).unwrap_err();
        assert_eq!(err.code, KvErrorCode::DeadlineExceeded);
        assert!(err.message.contains("\"k\""), "{err}");
        let writer = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                store.put("k", b"v").unwrap();
            })
        };
        assert_eq!(store.get("k", Duration::from_secs(10)).unwrap(), b"v");
        writer.join().unwrap();
        assert_eq!(store.try_get("k").unwrap().as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn a_panic_becomes_an_internal_error() {
        let r: Result<(), KvError> = guarded("get", || panic!("boom"));
        let e = r.unwrap_err();
        assert_eq!(e.code, KvErrorCode::Internal);
        assert!(e.message.contains("boom") && e.message.contains("get"), "{e}");
    }
}
