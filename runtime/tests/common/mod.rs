//! Shared helpers for the runtime's integration tests (each runs against the real plugin).

#![allow(dead_code)]

pub mod modules;

use std::sync::OnceLock;

use torchtpu_runtime::{Buffer, Client, Device, ElementType, Plugin};

/// One client per test binary, created on first use.
pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let plugin = Plugin::load_default().unwrap_or_else(|e| panic!("{e}"));
        Client::new(plugin).unwrap_or_else(|e| panic!("{e}"))
    })
}

pub fn device() -> Device {
    client().first_device().unwrap()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn upload_f32(v: &[f32], dims: &[i64]) -> Buffer {
    client().buffer_from_host(&f32_bytes(v), ElementType::F32, dims, &device()).unwrap()
}

pub fn upload_i64(v: &[i64], dims: &[i64]) -> Buffer {
    client().buffer_from_host(&i64_bytes(v), ElementType::S64, dims, &device()).unwrap()
}
