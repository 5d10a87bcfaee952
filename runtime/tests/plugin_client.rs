//! Loading the plugin, creating a client, and the errors for a missing or bogus plugin.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use torchtpu_runtime::{Client, Plugin, RuntimeError, INSTALL_COMMAND, PLUGIN_ENV};

#[test]
fn loads_the_cpu_plugin_and_creates_a_client() {
    let plugin = Plugin::load_default().unwrap_or_else(|e| panic!("{e}"));
    let (major, minor) = plugin.api_version();
    assert_eq!(major, 0);
    assert!(minor > 0, "minor version {minor}");
    assert!(plugin.path().is_absolute());

    let client = Client::new(plugin).unwrap();
    assert_eq!(client.platform_name(), "cpu");
    assert!(!client.platform_version().is_empty());
    let devices = client.addressable_devices();
    assert!(!devices.is_empty());
    let mut ids: Vec<i32> = devices.iter().map(|d| d.id()).collect();
    ids.dedup();
    assert_eq!(ids.len(), devices.len(), "device ids are distinct: {ids:?}");
    assert!(devices.iter().all(|d| !d.kind().is_empty()));
    assert_eq!(client.first_device().unwrap(), devices[0]);
}

#[test]
fn loading_twice_returns_the_same_plugin() {
    let a = Plugin::load_default().unwrap();
    let b = Plugin::load(a.path()).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

#[test]
fn two_clients_coexist() {
    let plugin = Plugin::load_default().unwrap();
    let c1 = Client::new(Arc::clone(&plugin)).unwrap();
    let c2 = Client::new(plugin).unwrap();
    assert_eq!(c1.platform_name(), c2.platform_name());
    drop(c1);
    assert!(!c2.addressable_devices().is_empty());
}

#[test]
fn missing_plugin_names_the_path_and_the_fix() {
    let path = PathBuf::from("/definitely/not/here/pjrt_plugin.so");
    let err = Plugin::load(&path).unwrap_err();
    assert!(matches!(&err, RuntimeError::PluginNotFound { path: p, .. } if *p == path), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/definitely/not/here/pjrt_plugin.so"), "{msg}");
    assert!(msg.contains(PLUGIN_ENV), "{msg}");
    assert!(msg.contains("make setup"), "{msg}");
    assert!(msg.contains(INSTALL_COMMAND), "{msg}");
    assert!(INSTALL_COMMAND.contains("pip install --no-deps --target .venv/pjrt lammps-jax-pjrt-cpu==0.11.2"));
}

#[test]
fn a_file_that_is_not_a_library_is_a_load_error() {
    let not_a_library = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let err = Plugin::load(&not_a_library).unwrap_err();
    assert!(matches!(err, RuntimeError::PluginLoad { .. }), "{err:?}");
    assert!(err.to_string().contains("Cargo.toml"), "{err}");
}
