//! The in-memory executable cache against the real plugin.

mod common;

use std::sync::Arc;

use common::*;
use torchtpu_runtime::{CacheKey, CompileOptions, ExecutableCache};

const NEG: &str = r#"func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.negate %a : tensor<3xf32>
  return %0 : tensor<3xf32>
}"#;

#[test]
fn second_request_is_a_hit_with_the_same_executable() {
    let cache = ExecutableCache::new();
    let opts = CompileOptions::default();
    let first = cache.get_or_compile(client(), NEG, &opts).unwrap();
    assert_eq!((cache.misses(), cache.hits()), (1, 0));
    let second = cache.get_or_compile(client(), NEG, &opts).unwrap();
    assert_eq!((cache.misses(), cache.hits()), (1, 1));
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(cache.len(), 1);

    let out = second.execute(&[&upload_f32(&[1.0, -2.0, 0.5], &[3])]).unwrap();
    assert_eq!(f32s(&out[0].to_host().unwrap()), [-1.0, 2.0, -0.5]);
}

#[test]
fn different_options_give_different_keys_and_entries() {
    let one = CompileOptions::default();
    let two = CompileOptions::new(2, 1);
    let k1 = CacheKey::new(client(), NEG, &one).unwrap();
    let k2 = CacheKey::new(client(), NEG, &two).unwrap();
    assert_eq!(k1.platform_name, "cpu");
    assert_eq!(k1.plugin_sha256, client().plugin().binary_sha256().unwrap());
    assert_eq!(k1.plugin_sha256.len(), 64);
    assert_eq!(k1.torchtpu_version, env!("CARGO_PKG_VERSION"));
    assert_ne!(k1.compile_options, k2.compile_options);
    assert_ne!(k1.digest(), k2.digest());
    assert_eq!(k1.digest(), CacheKey::new(client(), NEG, &one).unwrap().digest());
    // The in-process key leaves the plugin hash out (the client fixes the plugin).
    let local = CacheKey::in_process(client(), NEG, &one);
    assert_eq!(local.plugin_sha256, "");
    assert_ne!(local.digest(), k1.digest());

    let cache = ExecutableCache::new();
    let a = cache.get_or_compile(client(), NEG, &one).unwrap();
    let b = cache.get_or_compile(client(), NEG, &two).unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!((cache.misses(), cache.hits(), cache.len()), (2, 0, 2));
}

#[test]
fn different_text_misses_and_compile_errors_are_not_cached() {
    let cache = ExecutableCache::new();
    let opts = CompileOptions::default();
    assert!(cache.get_or_compile(client(), "not mlir", &opts).is_err());
    assert!(cache.get_or_compile(client(), "not mlir", &opts).is_err());
    assert_eq!((cache.misses(), cache.len()), (2, 0));
    cache.get_or_compile(client(), NEG, &opts).unwrap();
    let spaced = NEG.replace("negate", "negate ");
    cache.get_or_compile(client(), &spaced, &opts).unwrap();
    assert_eq!((cache.misses(), cache.len()), (4, 2));
    cache.clear();
    assert!(cache.is_empty());
}

#[test]
fn the_cache_is_shared_across_threads() {
    let cache = Arc::new(ExecutableCache::new());
    let first = cache.get_or_compile(client(), NEG, &CompileOptions::default()).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || cache.get_or_compile(client(), NEG, &CompileOptions::default()).unwrap())
        })
        .collect();
    for h in handles {
        assert!(Arc::ptr_eq(&h.join().unwrap(), &first));
    }
    assert_eq!((cache.misses(), cache.hits()), (1, 4));
}
