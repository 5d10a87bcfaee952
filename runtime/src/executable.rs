//! Compiling StableHLO text into a loaded executable, and running it on device buffers.

use std::sync::{Arc, OnceLock};

use crate::buffer::Buffer;
use crate::client::{Client, ClientInner, Device};
use crate::error::{Result, RuntimeError};
use crate::ffi::{self, Args};
use crate::options::CompileOptions;
use crate::plugin::pjrt_call;
use crate::trace;

/// A program compiled and loaded on a client. Keeps its client alive; freed on drop.
pub struct Executable {
    client: Arc<ClientInner>,
    raw: *mut ffi::PJRT_LoadedExecutable,
    num_outputs: usize,
    /// Loaded from serialized bytes rather than compiled (see [`Executable::serialize`]).
    deserialized: bool,
    /// What a profile calls this program ([`Executable::set_label`]).
    label: OnceLock<String>,
}

// SAFETY: PJRT loaded executables are thread-safe (concurrent Execute calls are allowed);
// the pointer is owned and freed once, in Drop.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

impl Drop for Executable {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
        args.executable = self.raw;
        let _ = pjrt_call!(self.client.plugin, PJRT_LoadedExecutable_Destroy, &mut args);
    }
}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable").field("num_outputs", &self.num_outputs).finish()
    }
}

impl Client {
    /// Compiles an MLIR module (StableHLO, text or bytecode) with `options`.
    pub fn compile(&self, mlir_module_text: &str, options: &CompileOptions) -> Result<Executable> {
        self.compile_bytes(mlir_module_text.as_bytes(), options)
    }

    /// Like [`Client::compile`] for a module given as bytes (MLIR text or bytecode).
    pub fn compile_bytes(&self, module: &[u8], options: &CompileOptions) -> Result<Executable> {
        options.validate()?;
        let serialized = options.serialize();
        debug_assert!(!serialized.is_empty(), "empty compile options abort XLA");
        let plugin = &self.inner.plugin;

        const FORMAT: &str = "mlir";
        let mut program = ffi::PJRT_Program::new();
        program.code = module.as_ptr().cast();
        program.code_size = module.len();
        program.format = FORMAT.as_ptr().cast();
        program.format_size = FORMAT.len();

        let mut args = ffi::PJRT_Client_Compile_Args::new();
        args.client = self.inner.raw;
        args.program = &program;
        args.compile_options = serialized.as_ptr().cast();
        args.compile_options_size = serialized.len();
        let started = trace::enabled().then(trace::now_ns);
        pjrt_call!(plugin, PJRT_Client_Compile, &mut args)?;
        if let Some(t) = started {
            trace::record(trace::ActivityKind::Compile, "XLA compile", -1, t, module.len() as u64);
        }
        if args.executable.is_null() {
            return Err(RuntimeError::Pjrt {
                call: "PJRT_Client_Compile",
                code: 13,
                message: "the plugin reported success but returned no executable".into(),
            });
        }
        Executable::adopt(&self.inner, args.executable, false)
    }
}

impl Executable {
    /// Takes ownership of a loaded executable the plugin just returned (destroyed on drop,
    /// including when this fails) and reads its output count.
    pub(crate) fn adopt(
        client: &Arc<ClientInner>,
        raw: *mut ffi::PJRT_LoadedExecutable,
        deserialized: bool,
    ) -> Result<Executable> {
        let mut exe =
            Executable { client: Arc::clone(client), raw, num_outputs: 0, deserialized, label: OnceLock::new() };
        exe.num_outputs = exe.query_num_outputs()?;
        Ok(exe)
    }

    /// Names the program in profiles (`trace`); the first label given stays (a cached
    /// executable is shared by every graph that compiles to it).
    pub fn set_label(&self, label: &str) {
        let _ = self.label.set(label.to_string());
    }

    /// The program's label, "program" if none was given.
    pub fn label(&self) -> &str {
        self.label.get().map_or("program", String::as_str)
    }

    /// The plugin this executable was loaded by.
    pub(crate) fn plugin(&self) -> &crate::plugin::Plugin {
        &self.client.plugin
    }

    /// Whether this executable was loaded with [`Client::deserialize_executable`] (such an
    /// executable cannot be serialized again).
    pub fn is_deserialized(&self) -> bool {
        self.deserialized
    }

    /// Runs `f` on the `PJRT_Executable` behind this loaded executable
    /// (`PJRT_LoadedExecutable_GetExecutable`), destroying that handle afterwards.
    pub(crate) fn with_unloaded<T>(&self, f: impl FnOnce(*mut ffi::PJRT_Executable) -> Result<T>) -> Result<T> {
        let plugin = &self.client.plugin;
        let mut get = ffi::PJRT_LoadedExecutable_GetExecutable_Args::new();
        get.loaded_executable = self.raw;
        pjrt_call!(plugin, PJRT_LoadedExecutable_GetExecutable, &mut get)?;
        if get.executable.is_null() {
            return Err(RuntimeError::Pjrt {
                call: "PJRT_LoadedExecutable_GetExecutable",
                code: 13,
                message: "the plugin reported success but returned no executable".into(),
            });
        }

        let result = f(get.executable);

        let mut destroy = ffi::PJRT_Executable_Destroy_Args::new();
        destroy.executable = get.executable;
        let destroyed = pjrt_call!(plugin, PJRT_Executable_Destroy, &mut destroy);
        let value = result?;
        destroyed.map(|()| value)
    }

    fn query_num_outputs(&self) -> Result<usize> {
        self.with_unloaded(|executable| {
            let mut n = ffi::PJRT_Executable_NumOutputs_Args::new();
            n.executable = executable;
            pjrt_call!(self.client.plugin, PJRT_Executable_NumOutputs, &mut n)?;
            Ok(n.num_outputs)
        })
    }

    /// Outputs per execution (the entry function's results, tuples flattened).
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// Runs on the executable's device with `args` (which must live on that device, from the
    /// same client) and waits for completion. Returns one buffer per output.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        self.execute_keeping(args, &[])
    }

    /// Like [`Executable::execute`], but the arguments at `keep` (indices) are not donated even
    /// where the program aliases them to an output: XLA writes that output elsewhere.
    pub fn execute_keeping(&self, args: &[&Buffer], keep: &[i64]) -> Result<Vec<Buffer>> {
        let mut outs = self.execute_partitioned(&[args.to_vec()], keep)?;
        Ok(outs.pop().unwrap_or_default())
    }

    /// Like [`Executable::execute`], but returns as soon as the plugin has enqueued the work:
    /// the outputs become ready later ([`Buffer::wait_ready`], or any read of them, waits and
    /// reports an execution error). PJRT keeps the arguments alive until the work is done, so
    /// the caller may drop them. Nothing is donated.
    pub fn execute_async(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        let keep: Vec<i64> = (0..args.len() as i64).collect();
        self.execute_async_keeping(args, &keep)
    }

    /// Like [`Executable::execute_async`], but only the arguments at `keep` are kept: the others
    /// may be donated where the program aliases them to an output (the caller must not use them
    /// afterwards).
    pub fn execute_async_keeping(&self, args: &[&Buffer], keep: &[i64]) -> Result<Vec<Buffer>> {
        let mut outs = self.launch(&[args.to_vec()], keep, false)?;
        Ok(outs.pop().unwrap_or_default())
    }

    /// Runs a portable executable ([`CompileOptions::portable`]) on `device` with `args` (each
    /// on that device: the plugin refuses others). With `wait` false it returns once the work is
    /// enqueued, as [`Executable::execute_async_keeping`]. Arguments at `keep` are not donated.
    pub fn execute_on(&self, args: &[&Buffer], keep: &[i64], device: &Device, wait: bool) -> Result<Vec<Buffer>> {
        if !Arc::ptr_eq(&device.client, &self.client) {
            return Err(RuntimeError::InvalidArgument(format!(
                "device {} belongs to a different client than the executable",
                device.id()
            )));
        }
        let mut outs = self.launch_on(&[args.to_vec()], keep, wait, Some(device))?;
        Ok(outs.pop().unwrap_or_default())
    }

    /// Runs an SPMD program: `args[d]` are partition `d`'s arguments (each buffer on the d-th
    /// device of the executable, holding that partition's shard), and the result's row `d` is
    /// partition `d`'s outputs. Waits for every partition. Arguments at `keep` are not donated.
    pub fn execute_partitioned(&self, args: &[Vec<&Buffer>], keep: &[i64]) -> Result<Vec<Vec<Buffer>>> {
        self.launch(args, keep, true)
    }

    /// Enqueues one execution; with `wait`, blocks until every partition has finished.
    fn launch(&self, args: &[Vec<&Buffer>], keep: &[i64], wait: bool) -> Result<Vec<Vec<Buffer>>> {
        self.launch_on(args, keep, wait, None)
    }

    /// `launch`, on `device` where given (a portable executable's one execution).
    fn launch_on(
        &self,
        args: &[Vec<&Buffer>],
        keep: &[i64],
        wait: bool,
        device: Option<&Device>,
    ) -> Result<Vec<Vec<Buffer>>> {
        let num_args = args.first().map_or(0, Vec::len);
        if args.is_empty() || args.iter().any(|row| row.len() != num_args) {
            return Err(RuntimeError::InvalidArgument(format!(
                "argument lists must be one per partition, of equal length; got {:?}",
                args.iter().map(Vec::len).collect::<Vec<_>>()
            )));
        }
        if let Some((d, i)) = args
            .iter()
            .enumerate()
            .find_map(|(d, row)| row.iter().position(|b| !Arc::ptr_eq(&b.client, &self.client)).map(|i| (d, i)))
        {
            return Err(RuntimeError::InvalidArgument(format!(
                "argument {i} of partition {d} is a buffer of a different client than the executable"
            )));
        }
        let plugin = &self.client.plugin;
        let arg_ptrs: Vec<Vec<*mut ffi::PJRT_Buffer>> =
            args.iter().map(|row| row.iter().map(|b| b.raw).collect()).collect();
        let arg_lists: Vec<*const *mut ffi::PJRT_Buffer> = arg_ptrs.iter().map(|row| row.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut ffi::PJRT_Buffer>> =
            (0..args.len()).map(|_| vec![std::ptr::null_mut(); self.num_outputs]).collect();
        let output_lists: Vec<*mut *mut ffi::PJRT_Buffer> = outputs.iter_mut().map(|row| row.as_mut_ptr()).collect();
        let mut complete: Vec<*mut ffi::PJRT_Event> = vec![std::ptr::null_mut(); args.len()];
        let mut options = ffi::PJRT_ExecuteOptions::new();
        options.non_donatable_input_indices = keep.as_ptr();
        options.num_non_donatable_input_indices = keep.len();

        let mut exec = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        exec.executable = self.raw;
        exec.options = &mut options;
        exec.argument_lists = arg_lists.as_ptr();
        exec.num_devices = args.len();
        exec.num_args = num_args;
        exec.output_lists = output_lists.as_ptr();
        // Without completion events PJRT tracks the work through the output buffers.
        exec.device_complete_events = if wait { complete.as_mut_ptr() } else { std::ptr::null_mut() };
        exec.execute_device = device.map_or(std::ptr::null_mut(), |d| d.raw);
        let launched = trace::enabled().then(trace::now_ns);
        pjrt_call!(plugin, PJRT_LoadedExecutable_Execute, &mut exec)?;
        // Partition `d` runs on the executable's d-th device: device `d` for the programs the
        // engine compiles (its meshes take the first devices).
        let launches: Vec<trace::Launch> = launched.map_or_else(Vec::new, |t| {
            let first = device.map_or(0, Device::id);
            trace::record(trace::ActivityKind::Launch, self.label(), first, t, 0);
            (0..args.len()).map(|d| trace::Launch::new(self.label(), device.map_or(d as i32, Device::id), t)).collect()
        });

        // Take ownership of every output before anything else can fail.
        let owned: Vec<Vec<Result<Buffer>>> =
            outputs.iter().map(|row| row.iter().map(|&raw| Buffer::from_raw(&self.client, raw)).collect()).collect();
        let mut waited = Ok(());
        for &event in &complete {
            let r = plugin.await_event("PJRT_LoadedExecutable_Execute", event);
            if waited.is_ok() {
                waited = r;
            }
        }
        waited?;
        let outs: Vec<Vec<Buffer>> = owned.into_iter().map(|row| row.into_iter().collect()).collect::<Result<_>>()?;
        for (launch, row) in launches.into_iter().zip(&outs) {
            match row.first().filter(|_| !wait).map(Buffer::ready_event) {
                Some(Ok(event)) => launch.finish_when_ready(&self.client.plugin, event),
                _ => launch.finish(),
            }
        }
        Ok(outs)
    }
}
