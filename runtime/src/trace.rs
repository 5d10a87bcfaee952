//! The device work PJRT did while a profiler listened: program executions with their device
//! time, compiles and host<->device copies, each stamped with the profiler's correlation id
//! of the host op that launched it. Off (one relaxed load per launch) unless [`start`]ed; a
//! profiler backend (the extension's Kineto bridge) starts it, sets correlation ids and
//! [`take`]s what was recorded.
//!
//! Device time: an execution's end is when its outputs became ready (`PJRT_Event_OnReady`);
//! its start is its launch, or the end of the previous program on the same device if that
//! was later (a device runs its programs in order, so the queueing is not its time).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ffi::{self, Args};
use crate::plugin::{pjrt_call, Plugin};

/// What one recorded activity was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ActivityKind {
    /// A program ran on a device (its time is device time).
    Execute = 0,
    /// A program was compiled (or loaded from serialized bytes): host time.
    Compile = 1,
    /// A host buffer was copied to a device.
    HostToDevice = 2,
    /// A device buffer was copied to the host.
    DeviceToHost = 3,
    /// A buffer was copied from one device to another.
    DeviceToDevice = 4,
    /// The host's side of an execution: the launching thread's time in PJRT's `Execute`.
    Launch = 5,
}

/// One recorded activity. Times are nanoseconds since the Unix epoch (the clock PyTorch's
/// profiler writes its host events with).
#[derive(Clone, Debug)]
pub struct Activity {
    pub kind: ActivityKind,
    /// The program's label ([`crate::Executable::set_label`]) or what was copied.
    pub name: String,
    /// The PJRT device id, -1 where the activity is on the host only (a compile).
    pub device: i32,
    pub start_ns: i64,
    pub end_ns: i64,
    /// The profiler's correlation id current on the launching thread, 0 if none.
    pub correlation: u64,
    /// Bytes copied, or the executable's serialized module size for a compile.
    pub bytes: u64,
}

static ENABLED: AtomicBool = AtomicBool::new(false);

#[derive(Default)]
struct Recorded {
    activities: Vec<Activity>,
    /// The end of the last program seen finishing on each device.
    device_end: HashMap<i32, i64>,
    /// Executions whose outputs are not yet ready: their callbacks still hold them.
    in_flight: usize,
    /// Ready events whose callbacks ran, destroyed at the next launch or `take` (not inside
    /// their own callback).
    fired: Vec<(Arc<Plugin>, usize)>,
}

impl Recorded {
    fn destroy_fired(&mut self) {
        for (plugin, event) in self.fired.drain(..) {
            let _ = plugin.destroy_event(event as *mut ffi::PJRT_Event);
        }
    }
}

static RECORDED: Mutex<Option<Recorded>> = Mutex::new(None);

/// PJRT device handles -> their ids, for activities that start from a buffer.
static DEVICE_IDS: Mutex<Vec<(usize, i32)>> = Mutex::new(Vec::new());

/// Remembers `raw`'s id (each [`crate::Device`] as it is described).
pub(crate) fn register_device(raw: *mut ffi::PJRT_Device, id: i32) {
    let mut ids = DEVICE_IDS.lock().unwrap_or_else(|p| p.into_inner());
    if !ids.iter().any(|&(r, _)| r == raw as usize) {
        ids.push((raw as usize, id));
    }
}

/// The id of a device seen by [`register_device`], -1 if none was.
pub(crate) fn device_id(raw: *mut ffi::PJRT_Device) -> i32 {
    let ids = DEVICE_IDS.lock().unwrap_or_else(|p| p.into_inner());
    ids.iter().find(|&&(r, _)| r == raw as usize).map_or(-1, |&(_, id)| id)
}

thread_local! {
    static CORRELATION: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn recorded() -> MutexGuard<'static, Option<Recorded>> {
    RECORDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts recording (dropping anything recorded before).
pub fn start() {
    let mut guard = recorded();
    if let Some(old) = guard.as_mut() {
        old.destroy_fired();
    }
    let in_flight = guard.as_ref().map_or(0, |r| r.in_flight);
    *guard = Some(Recorded { in_flight, ..Recorded::default() });
    drop(guard);
    ENABLED.store(true, Ordering::Release);
}

/// Stops recording; what was recorded stays until [`take`].
pub fn stop() {
    ENABLED.store(false, Ordering::Release);
}

/// Whether activities are being recorded.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Takes what was recorded, first waiting (bounded) for executions still in flight so that
/// their device time is known.
pub fn take() -> Vec<Activity> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut guard = recorded();
        let waiting = guard.as_ref().map_or(0, |r| r.in_flight);
        if waiting == 0 || std::time::Instant::now() > deadline {
            let Some(r) = guard.as_mut() else { return Vec::new() };
            r.destroy_fired();
            return std::mem::take(&mut r.activities);
        }
        drop(guard);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Makes `id` the correlation id of activities this thread launches, until [`pop_correlation`].
pub fn push_correlation(id: u64) {
    CORRELATION.with(|c| c.borrow_mut().push(id));
}

/// Ends the innermost [`push_correlation`] of this thread.
pub fn pop_correlation() {
    CORRELATION.with(|c| {
        c.borrow_mut().pop();
    });
}

fn current_correlation() -> u64 {
    CORRELATION.with(|c| c.borrow().last().copied().unwrap_or(0))
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// Records a host-timed activity that began at `start_ns` and ends now.
pub(crate) fn record(kind: ActivityKind, name: &str, device: i32, start_ns: i64, bytes: u64) {
    let activity = Activity {
        kind,
        name: name.to_string(),
        device,
        start_ns,
        end_ns: now_ns(),
        correlation: current_correlation(),
        bytes,
    };
    if let Some(r) = recorded().as_mut() {
        r.activities.push(activity);
    }
}

/// Device work (an execution, a device-to-device copy) launched at `launched_ns` on `device`,
/// whose device time ends when it is [`finish`](Launch::finish)ed.
pub(crate) struct Launch {
    kind: ActivityKind,
    name: String,
    device: i32,
    launched_ns: i64,
    correlation: u64,
    bytes: u64,
}

impl Launch {
    pub(crate) fn new(name: &str, device: i32, launched_ns: i64) -> Launch {
        Launch::of(ActivityKind::Execute, name, device, launched_ns, 0)
    }

    pub(crate) fn of(kind: ActivityKind, name: &str, device: i32, launched_ns: i64, bytes: u64) -> Launch {
        Launch { kind, name: name.to_string(), device, launched_ns, correlation: current_correlation(), bytes }
    }

    /// Records the execution as ending now.
    pub(crate) fn finish(self) {
        let end = now_ns();
        if let Some(r) = recorded().as_mut() {
            let after = r.device_end.get(&self.device).copied().unwrap_or(i64::MIN);
            let start = self.launched_ns.max(after).min(end);
            r.device_end.insert(self.device, end);
            r.activities.push(Activity {
                kind: self.kind,
                name: self.name,
                device: self.device,
                start_ns: start,
                end_ns: end,
                correlation: self.correlation,
                bytes: self.bytes,
            });
        }
    }

    /// Records the execution when `event` (an output's ready event, which this takes) fires.
    /// Falls back to ending now where the plugin cannot call back.
    pub(crate) fn finish_when_ready(self, plugin: &Arc<Plugin>, event: *mut ffi::PJRT_Event) {
        if let Some(r) = recorded().as_mut() {
            r.destroy_fired();
            r.in_flight += 1;
        }
        let pending = Box::new(Pending { launch: self, plugin: Arc::clone(plugin), event });
        let mut args = ffi::PJRT_Event_OnReady_Args::new();
        args.event = event;
        args.callback = Some(on_ready);
        args.user_arg = Box::into_raw(pending).cast();
        if pjrt_call!(plugin, PJRT_Event_OnReady, &mut args).is_err() {
            // SAFETY: the plugin refused the callback, so `user_arg` is still ours alone.
            let pending = unsafe { Box::from_raw(args.user_arg.cast::<Pending>()) };
            pending.done();
        }
    }
}

/// What an `OnReady` callback owns: the launch to finish, and its event to destroy.
struct Pending {
    launch: Launch,
    plugin: Arc<Plugin>,
    event: *mut ffi::PJRT_Event,
}

impl Pending {
    fn done(self) {
        let Pending { launch, plugin, event } = self;
        launch.finish();
        match recorded().as_mut() {
            Some(r) => {
                r.in_flight = r.in_flight.saturating_sub(1);
                r.fired.push((plugin, event as usize));
            }
            None => drop(plugin.destroy_event(event)),
        }
    }
}

extern "C" fn on_ready(error: *mut ffi::PJRT_Error, user_arg: *mut c_void) {
    // SAFETY: `user_arg` is the `Pending` boxed in `finish_when_ready`, handed to exactly one
    // callback.
    let pending = unsafe { Box::from_raw(user_arg.cast::<Pending>()) };
    if !error.is_null() {
        // The callback owns the error; the execution's failure reaches its caller when the
        // outputs are read.
        pending.plugin.destroy_error(error);
    }
    pending.done();
}
