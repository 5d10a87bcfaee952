//! A PJRT client and its devices: the handle everything else (buffers, executables) hangs off.

use std::sync::Arc;

use crate::error::Result;
use crate::ffi::{self, Args};
use crate::plugin::{pjrt_call, plugin_string, Plugin};

/// The owned `PJRT_Client*`. Shared by every object created from the client, so the client
/// is destroyed only after its last buffer, executable and device handle.
pub(crate) struct ClientInner {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) raw: *mut ffi::PJRT_Client,
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
    /// Creates a client with the plugin's default options.
    pub fn new(plugin: Arc<Plugin>) -> Result<Client> {
        Client::with_options(plugin, &[])
    }

    /// Creates a client with named create options, e.g. the CPU plugin's
    /// `("asynchronous", ClientOption::Bool(false))` or `("cpu_device_count", Int(4))`. A
    /// plugin that does not know an option may reject it (an error, nothing created).
    pub fn with_options(plugin: Arc<Plugin>, options: &[(&str, ClientOption)]) -> Result<Client> {
        let named: Vec<ffi::PJRT_NamedValue> = options
            .iter()
            .map(|(name, value)| {
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
        args.create_options = named.as_ptr();
        args.num_options = named.len();
        pjrt_call!(plugin, PJRT_Client_Create, &mut args)?;
        // From here on the client is owned: an early return below destroys it.
        let inner = Arc::new(ClientInner { plugin, raw: args.client });
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
