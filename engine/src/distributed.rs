//! Whether the process's engine makes a client that spans processes (GPU/TPU plugins: XLA's
//! collectives then cross them), and over which key-value store.
//!
//! Set before the default engine starts, by `configure_distributed` (the extension's
//! `torchtpu._C.configure_distributed`, whose store calls a `torch.distributed.Store`) with
//! the node id and count given or read from `TORCHTPU_DIST_NODE_ID` / `TORCHTPU_DIST_NUM_NODES`.
//! `Engine::new` reads it; the default engine's start closes it (a later call is an error: the
//! client exists). Those variables set without a store make `Engine::new` fail, naming the
//! call that gives one: Rust alone has no store every process shares.

use std::sync::{Arc, Mutex};

use torchtpu_runtime::KeyValueStore;

/// This process's node id among the processes of one client.
pub const NODE_ID_ENV: &str = "TORCHTPU_DIST_NODE_ID";
/// The number of processes of one client.
pub const NUM_NODES_ENV: &str = "TORCHTPU_DIST_NUM_NODES";

/// A client across `num_nodes` processes, this one `node_id`, sharing `store`.
#[derive(Clone)]
pub struct Distributed {
    pub node_id: i64,
    pub num_nodes: i64,
    pub store: Arc<dyn KeyValueStore>,
}

impl std::fmt::Debug for Distributed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distributed").field("node_id", &self.node_id).field("num_nodes", &self.num_nodes).finish()
    }
}

#[derive(Default)]
struct State {
    configured: Option<Distributed>,
    /// The default engine has started (or is starting): its client is made.
    started: bool,
}

static STATE: Mutex<State> = Mutex::new(State { configured: None, started: false });

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn env_int(name: &str) -> Result<Option<i64>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => v.trim().parse::<i64>().map(Some).map_err(|_| format!("{name}={v:?} is not an integer")),
    }
}

/// The node id and count the environment asks for, if it asks (both variables, or neither).
pub fn requested_by_env() -> Result<Option<(i64, i64)>, String> {
    match (env_int(NODE_ID_ENV)?, env_int(NUM_NODES_ENV)?) {
        (None, None) => Ok(None),
        (Some(id), Some(n)) => Ok(Some((id, n))),
        _ => Err(format!("set both {NODE_ID_ENV} and {NUM_NODES_ENV}, or neither")),
    }
}

/// Makes the default engine's client span `num_nodes` processes, this one `node_id` (each
/// `None` read from its variable), over `store`. Refused once the default engine started.
pub fn configure_distributed(
    node_id: Option<i64>,
    num_nodes: Option<i64>,
    store: Arc<dyn KeyValueStore>,
) -> Result<(i64, i64), String> {
    let env = requested_by_env()?;
    let node_id = node_id.or(env.map(|e| e.0)).ok_or_else(|| format!("no node_id given and {NODE_ID_ENV} is unset"))?;
    let num_nodes =
        num_nodes.or(env.map(|e| e.1)).ok_or_else(|| format!("no num_nodes given and {NUM_NODES_ENV} is unset"))?;
    if num_nodes < 1 || !(0..num_nodes).contains(&node_id) {
        return Err(format!("a client across processes needs 0 <= node_id < num_nodes, got {node_id} of {num_nodes}"));
    }
    let mut s = state();
    if s.started {
        return Err("the torchtpu engine has already started, with its client: configure_distributed must be \
                    called before the first use of the tpu device or torchtpu's compiler in this process"
            .into());
    }
    s.configured = Some(Distributed { node_id, num_nodes, store });
    Ok((node_id, num_nodes))
}

/// `(node_id, num_nodes)` as configured, if configured.
pub fn distributed_configuration() -> Option<(i64, i64)> {
    state().configured.as_ref().map(|d| (d.node_id, d.num_nodes))
}

/// Whether the default engine has started (so `configure_distributed` is refused).
pub fn engine_started() -> bool {
    state().started
}

/// Called once as the default engine starts.
pub(crate) fn mark_started() {
    state().started = true;
}

/// What `Engine::new` creates its client with: the configuration, or none; the environment
/// asking for one without a store is an error.
pub(crate) fn for_new_engine() -> Result<Option<Distributed>, String> {
    if let Some(d) = state().configured.clone() {
        return Ok(Some(d));
    }
    match requested_by_env()? {
        None => Ok(None),
        Some((id, n)) => Err(format!(
            "{NODE_ID_ENV}={id} and {NUM_NODES_ENV}={n} ask for a client across processes, but no key-value \
             store was configured: call torchtpu.distributed.multinode.configure(store) (or \
             torchtpu._C.configure_distributed) before the engine starts, or let dist.init_process_group() \
             with tpu_dist configure it before the tpu device is first used"
        )),
    }
}
