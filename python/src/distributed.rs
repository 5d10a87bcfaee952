//! `torchtpu._C.configure_distributed`: makes the engine's client span processes over a
//! `torch.distributed.Store` (GPU/TPU plugins; see docs/distributed.md, "GPU/TPU plugins
//! across processes"). The plugin calls the store from its own threads; `PyStore` takes the
//! GIL for each call, so the engine must be started with the GIL released (`start_engine`).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use torchtpu_runtime::{KeyValueStore, KvError, KvErrorCode};

use crate::{engine_error, guarded};

/// A `torch.distributed.Store` (`set`, `get`, `wait(keys, timeout)`, `check(keys)`) as the
/// runtime's key-value store.
struct PyStore {
    store: Py<PyAny>,
}

fn kv_error(_py: Python<'_>, what: &str, key: &str, e: PyErr) -> KvError {
    KvError::new(KvErrorCode::Unavailable, format!("torch.distributed.Store.{what}({key:?}) failed: {e}"))
}

impl PyStore {
    fn check(&self, py: Python<'_>, key: &str) -> Result<bool, KvError> {
        self.store
            .call_method1(py, "check", (vec![key],))
            .and_then(|r| r.extract::<bool>(py))
            .map_err(|e| kv_error(py, "check", key, e))
    }

    fn value(&self, py: Python<'_>, key: &str) -> Result<Vec<u8>, KvError> {
        let v = self.store.call_method1(py, "get", (key,)).map_err(|e| kv_error(py, "get", key, e))?;
        let v = v.bind(py);
        match v.cast::<PyBytes>() {
            Ok(b) => Ok(b.as_bytes().to_vec()),
            Err(_) => v.extract::<Vec<u8>>().map_err(|e| kv_error(py, "get", key, e)),
        }
    }
}

impl KeyValueStore for PyStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        Python::attach(|py| {
            // XLA's timeouts fit an int of milliseconds; "without limit" becomes 30 days.
            let ms = timeout.as_millis().min(30 * 24 * 3600 * 1000) as u64;
            let kwargs = PyDict::new(py);
            kwargs.set_item("milliseconds", ms).map_err(|e| kv_error(py, "wait", key, e))?;
            let delta = py
                .import("datetime")
                .and_then(|m| m.getattr("timedelta"))
                .and_then(|t| t.call((), Some(&kwargs)))
                .map_err(|e| kv_error(py, "wait", key, e))?;
            if let Err(e) = self.store.call_method1(py, "wait", (vec![key], delta)) {
                if !self.check(py, key)? {
                    return Err(KvError::new(
                        KvErrorCode::DeadlineExceeded,
                        format!("key-value store: key {key:?} was not set within {ms} ms ({e})"),
                    ));
                }
            }
            self.value(py, key)
        })
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        Python::attach(|py| if self.check(py, key)? { self.value(py, key).map(Some) } else { Ok(None) })
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        Python::attach(|py| {
            self.store
                .call_method1(py, "set", (key, PyBytes::new(py, value)))
                .map(drop)
                .map_err(|e| kv_error(py, "set", key, e))
        })
    }
}

fn py_store(py: Python<'_>, store: Py<PyAny>) -> PyResult<Arc<dyn KeyValueStore>> {
    for method in ["set", "get", "wait", "check"] {
        if !store.bind(py).hasattr(method)? {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "configure_distributed: the store needs a {method}() method (a torch.distributed.Store)"
            )));
        }
    }
    Ok(Arc::new(PyStore { store }))
}

/// Makes the engine's PJRT client span `num_nodes` processes, this one `node_id` (each None:
/// from `TORCHTPU_DIST_NODE_ID` / `TORCHTPU_DIST_NUM_NODES`), exchanging through `store` (a
/// `torch.distributed.Store` every process shares; prefix it, the plugin's keys are its own).
/// Must come before the engine starts: afterwards it raises RuntimeError. Returns
/// `(node_id, num_nodes)`.
#[pyfunction]
#[pyo3(signature = (node_id, num_nodes, store))]
fn configure_distributed(
    py: Python<'_>,
    node_id: Option<i64>,
    num_nodes: Option<i64>,
    store: Py<PyAny>,
) -> PyResult<(i64, i64)> {
    let store = py_store(py, store)?;
    guarded(py, "compile", || {
        torchtpu_engine::configure_distributed(node_id, num_nodes, store)
            .map_err(|m| pyo3::exceptions::PyRuntimeError::new_err(format!("configure_distributed: {m}")))
    })
}

/// `(node_id, num_nodes)` if `configure_distributed` was called, else None.
#[pyfunction]
fn distributed_configuration() -> Option<(i64, i64)> {
    torchtpu_engine::distributed_configuration()
}

/// Whether the engine has started (its client made).
#[pyfunction]
fn engine_started() -> bool {
    torchtpu_engine::engine_started()
}

/// Starts the engine now, with the GIL released (the plugin's threads call the store, which
/// takes the GIL, while the client is created).
#[pyfunction]
fn start_engine(py: Python<'_>) -> PyResult<()> {
    guarded(py, "compile", || {
        py.detach(|| torchtpu_engine::default_engine().map(drop)).map_err(|e| engine_error(py, &e))
    })
}

/// What `_kv_store_probe` saw: get, try_get, try_get of the missing key, the missing get's error.
type Probe = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>, String);

/// Calls `store` through the runtime's key-value interface, as the plugin would: put, get,
/// try_get of `key`, then a get of `missing` with `timeout_ms`. For tests.
#[pyfunction]
fn _kv_store_probe(
    py: Python<'_>,
    store: Py<PyAny>,
    key: &str,
    value: Vec<u8>,
    missing: &str,
    timeout_ms: u64,
) -> PyResult<Probe> {
    let store = py_store(py, store)?;
    let r = py.detach(|| -> Result<_, KvError> {
        store.put(key, &value)?;
        let got = store.get(key, Duration::from_secs(10))?;
        let tried = store.try_get(key)?;
        let absent = store.try_get(missing)?;
        let timed_out = match store.get(missing, Duration::from_millis(timeout_ms)) {
            Ok(_) => "set".to_string(),
            Err(e) => format!("{:?}: {}", e.code, e.message),
        };
        Ok((got, tried, absent, timed_out))
    });
    r.map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_distributed, m)?)?;
    m.add_function(wrap_pyfunction!(distributed_configuration, m)?)?;
    m.add_function(wrap_pyfunction!(engine_started, m)?)?;
    m.add_function(wrap_pyfunction!(start_engine, m)?)?;
    m.add_function(wrap_pyfunction!(_kv_store_probe, m)?)?;
    Ok(())
}
