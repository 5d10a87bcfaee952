//! An engine whose client spans processes, on the CPU plugin (which cannot): the error says so.

use std::sync::Arc;

use torchtpu_engine::{configure_distributed, distributed_configuration, engine_started, Distributed, Engine};
use torchtpu_runtime::{MemoryKeyValueStore, Plugin};

#[test]
fn configured_engines_on_the_cpu_plugin_fail_with_a_clear_error() {
    let plugin = Plugin::load_default().unwrap_or_else(|e| panic!("{e}"));
    let store = Arc::new(MemoryKeyValueStore::new());
    let d = Distributed { node_id: 0, num_nodes: 2, store: store.clone() };
    let e = Engine::with_distributed(Arc::clone(&plugin), Some(d)).err().expect("the CPU plugin refuses");
    let msg = e.to_string();
    assert!(msg.contains("cannot create a client across processes (node 0 of 2)"), "{msg}");
    assert!(msg.contains("Unexpected option name passed to PJRT_Client_Create"), "{msg}");
    assert!(msg.contains("TORCHTPU_DIST_NODE_ID"), "{msg}");

    // Bad configurations are refused; a good one is kept and read by Engine::new.
    assert!(configure_distributed(Some(2), Some(2), store.clone()).unwrap_err().contains("node_id < num_nodes"));
    assert_eq!(distributed_configuration(), None);
    assert!(!engine_started());
    assert_eq!(configure_distributed(Some(1), Some(2), store.clone()).unwrap(), (1, 2));
    assert_eq!(distributed_configuration(), Some((1, 2)));
    let e = Engine::new(Arc::clone(&plugin)).err().expect("configured: the CPU plugin refuses");
    assert!(e.to_string().contains("(node 1 of 2)"), "{e}");
    // Unconfigured engines are unchanged.
    assert!(Engine::with_distributed(plugin, None).is_ok());
}
