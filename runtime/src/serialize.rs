//! Executables to bytes and back: `PJRT_Executable_Serialize` and
//! `PJRT_Executable_DeserializeAndLoad`.
//!
//! The bytes are the plugin's own format, only loadable by the same plugin build (see
//! `docs/cache.md`): a blob from another build may load and then fail when run. Likewise
//! (measured on the XLA CPU plugin, API 0.115) re-serializing a *deserialized* executable
//! gives a smaller blob that loads and then fails at run time ("Function wrapped_multiply
//! not found"), so `serialize` refuses deserialized executables.

use crate::client::Client;
use crate::error::{Result, RuntimeError};
use crate::executable::Executable;
use crate::ffi::{self, Args};
use crate::plugin::pjrt_call;

/// Frees the plugin's serialized-bytes holder exactly once, however `serialize` returns.
struct SerializedGuard {
    holder: *mut ffi::PJRT_SerializedExecutable,
    deleter: ffi::PJRT_SerializedExecutable_Deleter,
}

impl Drop for SerializedGuard {
    fn drop(&mut self) {
        if let (false, Some(delete)) = (self.holder.is_null(), self.deleter) {
            // SAFETY: `holder` and `deleter` came together from one successful
            // `PJRT_Executable_Serialize` call and the holder is freed only here.
            unsafe { delete(self.holder) };
        }
    }
}

impl Executable {
    /// The plugin's serialization of this executable (copied out of the plugin's memory).
    /// Load it with [`Client::deserialize_executable`] on a client of the same plugin build.
    /// Only compiled executables serialize: one that was itself deserialized gives
    /// `InvalidArgument` (keep the bytes it was loaded from instead).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        if self.is_deserialized() {
            return Err(RuntimeError::InvalidArgument(
                "this executable was loaded from serialized bytes; serializing it again gives \
                 a blob the plugin cannot run, so use the original bytes"
                    .into(),
            ));
        }
        let plugin = self.plugin();
        self.with_unloaded(|executable| {
            let mut args = ffi::PJRT_Executable_Serialize_Args::new();
            args.executable = executable;
            pjrt_call!(plugin, PJRT_Executable_Serialize, &mut args)?;
            let _guard =
                SerializedGuard { holder: args.serialized_executable, deleter: args.serialized_executable_deleter };
            if args.serialized_bytes.is_null() || args.serialized_bytes_size == 0 {
                return Err(RuntimeError::Pjrt {
                    call: "PJRT_Executable_Serialize",
                    code: 13,
                    message: "the plugin reported success but returned no bytes".into(),
                });
            }
            // SAFETY: the plugin returned `serialized_bytes_size` readable bytes that live
            // until the guard calls the deleter, after this copy.
            let bytes =
                unsafe { std::slice::from_raw_parts(args.serialized_bytes.cast::<u8>(), args.serialized_bytes_size) };
            Ok(bytes.to_vec())
        })
    }
}

impl Client {
    /// Loads an executable from [`Executable::serialize`]'s bytes onto this client's devices.
    /// Bytes the plugin cannot parse give a `Pjrt` error; empty bytes are rejected first.
    pub fn deserialize_executable(&self, bytes: &[u8]) -> Result<Executable> {
        if bytes.is_empty() {
            return Err(RuntimeError::InvalidArgument("cannot deserialize an executable from zero bytes".into()));
        }
        let mut args = ffi::PJRT_Executable_DeserializeAndLoad_Args::new();
        args.client = self.inner.raw;
        args.serialized_executable = bytes.as_ptr().cast();
        args.serialized_executable_size = bytes.len();
        let started = crate::trace::enabled().then(crate::trace::now_ns);
        pjrt_call!(self.inner.plugin, PJRT_Executable_DeserializeAndLoad, &mut args)?;
        if let Some(t) = started {
            crate::trace::record(crate::trace::ActivityKind::Compile, "XLA load", -1, t, bytes.len() as u64);
        }
        if args.loaded_executable.is_null() {
            return Err(RuntimeError::Pjrt {
                call: "PJRT_Executable_DeserializeAndLoad",
                code: 13,
                message: "the plugin reported success but returned no executable".into(),
            });
        }
        Executable::adopt(&self.inner, args.loaded_executable, true)
    }
}
