//! A PJRT client and its devices: the handle everything else (buffers, executables) hangs off.

use std::sync::Arc;

use crate::error::{Result, RuntimeError};
use crate::ffi::{self, Args};
use crate::kv::{KeyValueStore, KvCallbacks};
use crate::plugin::{pjrt_call, plugin_string, Plugin};

/// The owned `PJRT_Client*`. Shared by every object created from the client, so the client
/// is destroyed only after its last buffer, executable and device handle.
pub(crate) struct ClientInner {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) raw: *mut ffi::PJRT_Client,
    /// The key-value store of a multi-process client: the plugin keeps calling it after
    /// creation, so it is dropped only after the client is destroyed (fields drop after
    /// `Drop::drop`).
    _kv: Option<Box<KvCallbacks>>,
}

// SAFETY: PJRT clients are thread-safe; the pointer is owned and freed once, in Drop.
unsafe impl Send for ClientInner {}
unsafe impl Sync for ClientInner {}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Client_Destroy_Args::new();
        args.client = self.raw;
        // Nothing useful to do with a failure while dropping.
        let _ = pjrt_call!(self.plugin, PJRT_Client_Destroy, &mut args);
    }
}

/// A client create option's value (`PJRT_NamedValue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientOption {
    Int(i64),
    Bool(bool),
}

/// A PJRT client: one plugin's view of its devices. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
    platform_name: String,
    platform_version: String,
    devices: Vec<Device>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("platform_name", &self.platform_name)
            .field("platform_version", &self.platform_version)
            .field("devices", &self.devices)
            .finish()
    }
}

impl Client {
    /// torchtpu's host kernels that programs compiled by this client may call: those the
    /// plugin registered (`Plugin::host_kernels`) whose probe program then compiles; or why
    /// there are none. Each call registers (once per process) and compiles the probes afresh:
    /// callers keep the answer.
    pub fn host_kernels(&self) -> std::result::Result<Vec<&'static str>, String> {
        let registered = self.plugin().host_kernels().map_err(str::to_string)?;
        let mut usable = Vec::new();
        for &name in registered {
            // A kernel without a probe shares its family's handler, proven by that probe.
            if let Some(probe) = crate::host_kernels::probe_program(name) {
                self.compile(probe, &crate::CompileOptions::default())
                    .map_err(|e| format!("{name} is registered but XLA refuses a program calling it: {e}"))?;
            }
            usable.push(name);
        }
        Ok(usable)
    }

    /// Creates a client with the plugin's default options.
    pub fn new(plugin: Arc<Plugin>) -> Result<Client> {
        Client::with_options(plugin, &[])
    }

    /// Creates a client with named create options, e.g. the CPU plugin's
    /// `("asynchronous", ClientOption::Bool(false))` or `("cpu_device_count", Int(4))`. A
    /// plugin that does not know an option may reject it (an error, nothing created).
    pub fn with_options(plugin: Arc<Plugin>, options: &[(&str, ClientOption)]) -> Result<Client> {
        Client::create(plugin, create_args(options, None))
    }

    /// Creates this process's client of a client that spans `num_nodes` processes, this one
    /// `node_id` (`0 <= node_id < num_nodes`): the create options `node_id` / `num_nodes`
    /// (int64, as GPU plugins read them) after `options`, and the key-value get/put/try-get
    /// callbacks over `store`, which every process's client must share. The client keeps the
    /// store alive. A plugin that cannot span processes refuses the options or ignores them
    /// (the XLA CPU plugin: see `docs/runtime.md`, "Clients across processes").
    pub fn with_distributed(
        plugin: Arc<Plugin>,
        options: &[(&str, ClientOption)],
        node_id: i64,
        num_nodes: i64,
        store: Arc<dyn KeyValueStore>,
    ) -> Result<Client> {
        let all = distributed_options(options, node_id, num_nodes)?;
        Client::create(plugin, create_args(&all, Some(store)))
    }

    fn create(plugin: Arc<Plugin>, mut create: CreateArgs) -> Result<Client> {
        pjrt_call!(plugin, PJRT_Client_Create, &mut create.args)?;
        // From here on the client is owned: an early return below destroys it (and then drops
        // the store).
        let inner = Arc::new(ClientInner { plugin, raw: create.args.client, _kv: create.kv.take() });
        let plugin = &inner.plugin;

        let mut name = ffi::PJRT_Client_PlatformName_Args::new();
        name.client = inner.raw;
        pjrt_call!(plugin, PJRT_Client_PlatformName, &mut name)?;
        // SAFETY: the plugin returned a (pointer, size) string owned by the live client.
        let platform_name = unsafe { plugin_string(name.platform_name, name.platform_name_size) };

        let mut version = ffi::PJRT_Client_PlatformVersion_Args::new();
        version.client = inner.raw;
        pjrt_call!(plugin, PJRT_Client_PlatformVersion, &mut version)?;
        // SAFETY: as above.
        let platform_version = unsafe { plugin_string(version.platform_version, version.platform_version_size) };

        let mut devs = ffi::PJRT_Client_AddressableDevices_Args::new();
        devs.client = inner.raw;
        pjrt_call!(plugin, PJRT_Client_AddressableDevices, &mut devs)?;
        let raw_devices: Vec<*mut ffi::PJRT_Device> = if devs.addressable_devices.is_null() {
            Vec::new()
        } else {
            // SAFETY: the plugin returned an array of `num_addressable_devices` device
            // pointers owned by the client.
            unsafe { std::slice::from_raw_parts(devs.addressable_devices, devs.num_addressable_devices) }.to_vec()
        };
        let devices = raw_devices.into_iter().map(|raw| Device::describe(&inner, raw)).collect::<Result<Vec<_>>>()?;

        Ok(Client { inner, platform_name, platform_version, devices })
    }

    /// The plugin this client runs on.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.inner.plugin
    }

    /// E.g. "cpu", "cuda", "tpu".
    pub fn platform_name(&self) -> &str {
        &self.platform_name
    }

    /// Platform-specific version text (identifies the compiler build for cache keys).
    pub fn platform_version(&self) -> &str {
        &self.platform_version
    }

    /// The devices this client can run on, in the plugin's order.
    pub fn addressable_devices(&self) -> Vec<Device> {
        self.devices.clone()
    }

    /// The first addressable device, where single-device programs run.
    pub fn first_device(&self) -> Result<Device> {
        self.devices.first().cloned().ok_or_else(|| {
            crate::RuntimeError::InvalidArgument(format!(
                "the {} client has no addressable devices",
                self.platform_name
            ))
        })
    }

    /// Identifies this client (shared by its clones) while it is alive.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    pub(crate) fn same_client(&self, other: &Arc<ClientInner>) -> bool {
        Arc::ptr_eq(&self.inner, other)
    }
}

/// `options` plus `node_id` / `num_nodes`, checked.
pub(crate) fn distributed_options<'a>(
    options: &[(&'a str, ClientOption)],
    node_id: i64,
    num_nodes: i64,
) -> Result<Vec<(&'a str, ClientOption)>> {
    if num_nodes < 1 || node_id < 0 || node_id >= num_nodes {
        return Err(RuntimeError::InvalidArgument(format!(
            "a distributed client needs 0 <= node_id < num_nodes, got node_id {node_id}, num_nodes {num_nodes}"
        )));
    }
    if let Some((name, _)) = options.iter().find(|(n, _)| *n == "node_id" || *n == "num_nodes") {
        return Err(RuntimeError::InvalidArgument(format!(
            "the create option {name} is set by with_distributed, not in its options"
        )));
    }
    let mut all = options.to_vec();
    all.push(("node_id", ClientOption::Int(node_id)));
    all.push(("num_nodes", ClientOption::Int(num_nodes)));
    Ok(all)
}

/// Everything `PJRT_Client_Create` reads, kept together: the args and what their pointers
/// point into (option names and values on the heap, the key-value callbacks' user arg in
/// its box). Moving it moves no pointee.
pub(crate) struct CreateArgs {
    pub(crate) args: ffi::PJRT_Client_Create_Args,
    _names: Vec<Box<str>>,
    _options: Vec<ffi::PJRT_NamedValue>,
    /// Taken by the client once created (it must outlive the client).
    pub(crate) kv: Option<Box<KvCallbacks>>,
}

/// The create args for `options` and, for a multi-process client, the key-value callbacks
/// over `store`.
pub(crate) fn create_args(options: &[(&str, ClientOption)], store: Option<Arc<dyn KeyValueStore>>) -> CreateArgs {
    let names: Vec<Box<str>> = options.iter().map(|(name, _)| Box::from(*name)).collect();
    let named: Vec<ffi::PJRT_NamedValue> = options
        .iter()
        .zip(&names)
        .map(|((_, value), name)| {
            let mut v = ffi::PJRT_NamedValue::new();
            v.name = name.as_ptr().cast();
            v.name_size = name.len();
            v.value_size = 1;
            (v.value_type, v.value) = match *value {
                ClientOption::Int(i) => (ffi::NAMED_VALUE_INT64, i as u64),
                ClientOption::Bool(b) => (ffi::NAMED_VALUE_BOOL, b as u64),
            };
            v
        })
        .collect();
    let mut args = ffi::PJRT_Client_Create_Args::new();
    args.create_options = if named.is_empty() { std::ptr::null() } else { named.as_ptr() };
    args.num_options = named.len();
    let kv = store.map(KvCallbacks::new);
    if let Some(kv) = &kv {
        kv.install(&mut args);
    }
    CreateArgs { args, _names: names, _options: named, kv }
}

/// One addressable device of a client. Keeps its client alive.
#[derive(Clone)]
pub struct Device {
    pub(crate) client: Arc<ClientInner>,
    pub(crate) raw: *mut ffi::PJRT_Device,
    id: i32,
    kind: String,
}

// SAFETY: a device pointer is owned by the (thread-safe) client, which this handle keeps alive.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("id", &self.id).field("kind", &self.kind).finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl Eq for Device {}

impl Device {
    fn describe(client: &Arc<ClientInner>, raw: *mut ffi::PJRT_Device) -> Result<Device> {
        let plugin = &client.plugin;
        let mut desc = ffi::PJRT_Device_GetDescription_Args::new();
        desc.device = raw;
        pjrt_call!(plugin, PJRT_Device_GetDescription, &mut desc)?;

        let mut id = ffi::PJRT_DeviceDescription_Id_Args::new();
        id.device_description = desc.device_description;
        pjrt_call!(plugin, PJRT_DeviceDescription_Id, &mut id)?;

        let mut kind = ffi::PJRT_DeviceDescription_Kind_Args::new();
        kind.device_description = desc.device_description;
        pjrt_call!(plugin, PJRT_DeviceDescription_Kind, &mut kind)?;
        // SAFETY: the kind string is owned by the device, which the client keeps alive.
        let kind = unsafe { plugin_string(kind.device_kind, kind.device_kind_size) };

        crate::trace::register_device(raw, id.id);
        Ok(Device { client: Arc::clone(client), raw, id: id.id, kind })
    }

    /// The plugin's device id (unique among this platform's devices).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Vendor-specific kind, e.g. "cpu" or a GPU model name.
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

#[cfg(test)]
mod tests {
    //! The create args of a multi-process client, checked without a plugin: the options as
    //! the plugin reads them, and the key-value callbacks called through the stored function
    //! pointers the way a plugin calls them.

    use super::*;
    use crate::kv::{KvError, MemoryKeyValueStore};
    use std::ffi::{c_char, c_void};
    use std::time::Duration;

    /// What the stand-in for the plugin's error maker makes: a boxed (code, message).
    #[derive(Debug)]
    struct FakeError {
        code: i32,
        message: String,
    }

    unsafe extern "C" fn make_error(code: i32, message: *const c_char, size: usize) -> *mut ffi::PJRT_Error {
        // SAFETY: the callback passes its message's (pointer, size), alive for this call.
        let bytes = unsafe { std::slice::from_raw_parts(message.cast::<u8>(), size) };
        let e = FakeError { code, message: String::from_utf8_lossy(bytes).into_owned() };
        Box::into_raw(Box::new(e)).cast()
    }

    fn take_error(e: *mut ffi::PJRT_Error) -> std::result::Result<(), FakeError> {
        if e.is_null() {
            return Ok(());
        }
        // SAFETY: every non-null error here was made by `make_error`.
        Err(*unsafe { Box::from_raw(e.cast::<FakeError>()) })
    }

    /// The options as the plugin reads them: (name, type, raw value, value_size).
    fn read_options(args: &ffi::PJRT_Client_Create_Args) -> Vec<(String, i32, u64, usize)> {
        if args.num_options == 0 {
            return Vec::new();
        }
        // SAFETY: `create_args` points `create_options` at `num_options` live values.
        let values = unsafe { std::slice::from_raw_parts(args.create_options, args.num_options) };
        values
            .iter()
            .map(|v| {
                assert_eq!(v.struct_size, std::mem::size_of::<ffi::PJRT_NamedValue>());
                // SAFETY: each name is `name_size` bytes owned by the create args.
                let name = unsafe { plugin_string(v.name, v.name_size) };
                (name, v.value_type, v.value, v.value_size)
            })
            .collect()
    }

    fn call_get(
        args: &ffi::PJRT_Client_Create_Args,
        key: &str,
        timeout_ms: i32,
    ) -> std::result::Result<Vec<u8>, FakeError> {
        let mut maker: ffi::PJRT_CallbackError = Some(make_error);
        let mut a = ffi::PJRT_KeyValueGetCallback_Args::new();
        a.key = key.as_ptr().cast();
        a.key_size = key.len();
        a.timeout_in_ms = timeout_ms;
        a.callback_error = &mut maker;
        a.user_arg = args.kv_get_user_arg;
        let f = args.kv_get_callback.expect("a get callback");
        // SAFETY: a plugin's call: live args, our user arg.
        take_error(unsafe { f(&mut a) })?;
        // SAFETY: on success the callback returned `value_size` bytes at `value`.
        let value = unsafe { std::slice::from_raw_parts(a.value.cast::<u8>(), a.value_size) }.to_vec();
        // SAFETY: the plugin frees the value once, with the callback's deleter.
        unsafe { a.value_deleter_callback.expect("a deleter")(a.value) };
        Ok(value)
    }

    fn call_try_get(args: &ffi::PJRT_Client_Create_Args, key: &str) -> std::result::Result<Vec<u8>, FakeError> {
        let mut maker: ffi::PJRT_CallbackError = Some(make_error);
        let mut a = ffi::PJRT_KeyValueTryGetCallback_Args::new();
        a.key = key.as_ptr().cast();
        a.key_size = key.len();
        a.callback_error = &mut maker;
        a.user_arg = args.kv_try_get_user_arg;
        let f = args.kv_try_get_callback.expect("a try-get callback");
        // SAFETY: as in `call_get`.
        take_error(unsafe { f(&mut a) })?;
        // SAFETY: as in `call_get`.
        let value = unsafe { std::slice::from_raw_parts(a.value.cast::<u8>(), a.value_size) }.to_vec();
        // SAFETY: as in `call_get`.
        unsafe { a.value_deleter_callback.expect("a deleter")(a.value) };
        Ok(value)
    }

    fn call_put(args: &ffi::PJRT_Client_Create_Args, key: &str, value: &[u8]) -> std::result::Result<(), FakeError> {
        let mut maker: ffi::PJRT_CallbackError = Some(make_error);
        let mut a = ffi::PJRT_KeyValuePutCallback_Args::new();
        a.key = key.as_ptr().cast();
        a.key_size = key.len();
        a.value = value.as_ptr().cast();
        a.value_size = value.len();
        a.callback_error = &mut maker;
        a.user_arg = args.kv_put_user_arg;
        let f = args.kv_put_callback.expect("a put callback");
        // SAFETY: as in `call_get`.
        take_error(unsafe { f(&mut a) })
    }

    fn distributed_args(node_id: i64, num_nodes: i64, store: Arc<dyn KeyValueStore>) -> CreateArgs {
        let options = [("asynchronous", ClientOption::Bool(false))];
        create_args(&distributed_options(&options, node_id, num_nodes).unwrap(), Some(store))
    }

    #[test]
    fn the_create_args_carry_node_id_and_num_nodes_as_int64() {
        let store = Arc::new(MemoryKeyValueStore::new());
        let create = distributed_args(1, 2, store.clone());
        assert_eq!(create.args.struct_size, 88);
        assert_eq!(
            read_options(&create.args),
            vec![
                ("asynchronous".to_string(), ffi::NAMED_VALUE_BOOL, 0, 1),
                ("node_id".to_string(), ffi::NAMED_VALUE_INT64, 1, 1),
                ("num_nodes".to_string(), ffi::NAMED_VALUE_INT64, 2, 1),
            ]
        );
        // All three callbacks share one user arg: the box the client will own.
        let kv = create.kv.as_ref().expect("callbacks");
        let me = &**kv as *const KvCallbacks as *mut c_void;
        assert_eq!(create.args.kv_get_user_arg, me);
        assert_eq!(create.args.kv_put_user_arg, me);
        assert_eq!(create.args.kv_try_get_user_arg, me);
        assert!(create.args.client.is_null());
        // The args keep the store alive until the client takes it; then nothing else does.
        assert_eq!(Arc::strong_count(&store), 2);
        drop(create);
        assert_eq!(Arc::strong_count(&store), 1);

        // A one-process client gets neither the options nor callbacks.
        let plain = create_args(&[("asynchronous", ClientOption::Bool(false))], None);
        assert_eq!(read_options(&plain.args).len(), 1);
        assert!(plain.args.kv_get_callback.is_none() && plain.args.kv_put_callback.is_none());
        assert!(plain.args.kv_try_get_callback.is_none() && plain.args.kv_get_user_arg.is_null());
    }

    #[test]
    fn bad_node_ids_and_duplicate_options_are_refused() {
        for (node, nodes) in [(2, 2), (-1, 2), (0, 0)] {
            let e = distributed_options(&[], node, nodes).unwrap_err();
            assert!(e.to_string().contains("node_id"), "{e}");
        }
        let e = distributed_options(&[("num_nodes", ClientOption::Int(2))], 0, 2).unwrap_err();
        assert!(e.to_string().contains("num_nodes"), "{e}");
    }

    #[test]
    fn the_callbacks_round_trip_values_through_the_store() {
        let store = Arc::new(MemoryKeyValueStore::new());
        // Moving the args (as `Client::create` does) moves no pointee.
        let create = Box::new(distributed_args(0, 2, store.clone()));
        let args = &create.args;

        call_put(args, "gpu:topology/0", b"\x00binary\xffvalue").unwrap();
        assert_eq!(store.try_get("gpu:topology/0").unwrap().unwrap(), b"\x00binary\xffvalue");
        assert_eq!(call_get(args, "gpu:topology/0", 1000).unwrap(), b"\x00binary\xffvalue");
        assert_eq!(call_try_get(args, "gpu:topology/0").unwrap(), b"\x00binary\xffvalue");

        // An empty value is a value (a valid, freeable pointer of size 0).
        call_put(args, "empty", b"").unwrap();
        assert_eq!(call_get(args, "empty", 1000).unwrap(), b"");

        // A put from another "process" while get waits.
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                store.put("later", b"v").unwrap();
            })
        };
        assert_eq!(call_get(args, "later", 10_000).unwrap(), b"v");
        writer.join().unwrap();
    }

    #[test]
    fn a_missing_key_times_out_with_an_error() {
        let store = Arc::new(MemoryKeyValueStore::new());
        let create = distributed_args(0, 2, store);
        let start = std::time::Instant::now();
        let e = call_get(&create.args, "never/set", 50).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(e.code, 4, "DEADLINE_EXCEEDED: {e:?}");
        assert!(e.message.contains("never/set") && e.message.contains("50 ms"), "{e:?}");

        let e = call_try_get(&create.args, "never/set").unwrap_err();
        assert_eq!(e.code, 5, "NOT_FOUND: {e:?}");
        assert!(e.message.contains("never/set"), "{e:?}");
    }

    /// A store whose every call panics.
    struct Panicking;

    impl KeyValueStore for Panicking {
        fn get(&self, _: &str, _: Duration) -> std::result::Result<Vec<u8>, KvError> {
            panic!("get exploded")
        }
        fn try_get(&self, _: &str) -> std::result::Result<Option<Vec<u8>>, KvError> {
            panic!("try_get exploded")
        }
        fn put(&self, _: &str, _: &[u8]) -> std::result::Result<(), KvError> {
            panic!("put exploded")
        }
    }

    #[test]
    fn a_panicking_store_reports_an_error_instead_of_aborting() {
        let create = distributed_args(0, 2, Arc::new(Panicking));
        let args = &create.args;
        let e = call_get(args, "k", 10).unwrap_err();
        assert_eq!(e.code, 13, "INTERNAL: {e:?}");
        assert!(e.message.contains("get exploded"), "{e:?}");
        let e = call_try_get(args, "k").unwrap_err();
        assert_eq!(e.code, 13, "{e:?}");
        assert!(e.message.contains("try_get exploded"), "{e:?}");
        let e = call_put(args, "k", b"v").unwrap_err();
        assert_eq!(e.code, 13, "{e:?}");
        assert!(e.message.contains("put exploded"), "{e:?}");
    }

    #[test]
    fn bad_keys_and_short_structs_are_errors() {
        let create = distributed_args(0, 2, Arc::new(MemoryKeyValueStore::new()));
        let args = &create.args;
        let e = call_put(args, "\u{0}ok", b"v");
        assert!(e.is_ok(), "any UTF-8 key is a key: {e:?}");
        // A key that is not UTF-8.
        let mut maker: ffi::PJRT_CallbackError = Some(make_error);
        let mut a = ffi::PJRT_KeyValueTryGetCallback_Args::new();
        let bad = [0xffu8, 0xfe];
        a.key = bad.as_ptr().cast();
        a.key_size = bad.len();
        a.callback_error = &mut maker;
        a.user_arg = args.kv_try_get_user_arg;
        // SAFETY: as in `call_get`.
        let e = take_error(unsafe { args.kv_try_get_callback.unwrap()(&mut a) }).unwrap_err();
        assert_eq!(e.code, 3, "{e:?}");
        // A plugin whose args struct is shorter than ours (it would be a different ABI).
        let mut a = ffi::PJRT_KeyValueGetCallback_Args::new();
        a.struct_size = 64;
        a.callback_error = &mut maker;
        a.user_arg = args.kv_get_user_arg;
        // SAFETY: as in `call_get`.
        let e = take_error(unsafe { args.kv_get_callback.unwrap()(&mut a) }).unwrap_err();
        assert_eq!(e.code, 3, "{e:?}");
        assert!(e.message.contains("too small"), "{e:?}");
    }
}
