//! A multi-process client's create arguments on the CPU plugin (single-process): what it does
//! with `node_id` / `num_nodes` and the key-value callbacks, measured.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use torchtpu_runtime::{Client, ClientOption, KeyValueStore, KvError, MemoryKeyValueStore, Plugin, RuntimeError};

/// A store that counts the plugin's calls.
#[derive(Default)]
struct Counting {
    inner: MemoryKeyValueStore,
    calls: AtomicUsize,
}

impl KeyValueStore for Counting {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.get(key, timeout)
    }
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.try_get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.put(key, value)
    }
}

/// Measured on the pinned CPU plugin (API 0.115): it validates option names and refuses
/// `node_id` (and `num_nodes`) with INVALID_ARGUMENT, "Unexpected option name passed to
/// PJRT_Client_Create: node_id", before it calls the store; even `num_nodes = 1`. A plugin
/// that accepted them would have to give a working client.
#[test]
fn the_cpu_plugin_refuses_node_options_with_a_clear_error() {
    let plugin = Plugin::load_default().unwrap_or_else(|e| panic!("{e}"));
    for (node_id, num_nodes) in [(0, 1), (0, 2), (1, 2)] {
        let store = Arc::new(Counting::default());
        let got = Client::with_distributed(
            Arc::clone(&plugin),
            &[("asynchronous", ClientOption::Bool(false))],
            node_id,
            num_nodes,
            store.clone(),
        );
        match got {
            Err(RuntimeError::Pjrt { call, code, message }) => {
                assert_eq!(call, "PJRT_Client_Create");
                assert_eq!(code, 3, "INVALID_ARGUMENT: {message}");
                assert!(message.contains("Unexpected option name"), "{message}");
                assert!(message.contains("node_id") || message.contains("num_nodes"), "{message}");
                assert_eq!(store.calls.load(Ordering::SeqCst), 0, "refused before any store call");
            }
            Ok(client) => {
                // Not the pinned plugin's behaviour; still, an accepted client must work.
                assert!(!client.addressable_devices().is_empty());
            }
            Err(e) => panic!("neither a client nor the plugin's refusal: {e:?}"),
        }
        // A refused create (or a dropped client) let go of the store.
        assert_eq!(Arc::strong_count(&store), 1);
    }
    // The same plugin still makes ordinary clients afterwards.
    assert!(!Client::new(plugin).unwrap().addressable_devices().is_empty());
}

#[test]
fn bad_node_ids_are_refused_before_the_plugin() {
    let plugin = Plugin::load_default().unwrap();
    let e = Client::with_distributed(plugin, &[], 3, 2, Arc::new(MemoryKeyValueStore::new())).unwrap_err();
    assert!(matches!(e, RuntimeError::InvalidArgument(_)), "{e:?}");
}
