//! `TORCHTPU_INJECT_FAULT=lower|compile|execute` fails that stage with an internal error, even
//! where a cache would have skipped it. One test (the variable is process-wide): each stage in
//! turn, on a graph already compiled so both caches hold it.

use torchtpu_compiler::ir::parse_graph;
use torchtpu_engine::{DriverError, EngineError, ErrorKind, HostTensor, Options, FAULT_ENV};

const IR: &str = "graph @faults(%x: f32[5]) -> (f32[5]) {\n  %0 = aten.sin.default(%x) : f32[5]\n  return %0\n}\n";

#[test]
fn each_injected_stage_fails_with_an_internal_error_even_when_cached() {
    let dir = std::env::temp_dir().join(format!("torchtpu-engine-faults-{}", std::process::id()));
    std::env::set_var("TORCHTPU_CACHE_DIR", &dir);
    std::env::remove_var(FAULT_ENV);
    let engine = torchtpu_engine::default_engine().unwrap();
    let g = parse_graph(IR).unwrap();
    let options = Options::default();
    let compiled = engine.compile(&g, &options).unwrap();
    let x = HostTensor::from_f32(&[5], &[0.0; 5]);
    compiled.run(std::slice::from_ref(&x)).unwrap();

    std::env::set_var(FAULT_ENV, "lower");
    let e = engine.compile(&g, &options).err().expect("lower fault");
    assert!(matches!(e, EngineError::Compiler(DriverError::Injected { stage: "lower" })), "{e}");
    assert_eq!(e.kind(), ErrorKind::Internal { stage: "lower" });
    assert_eq!(e.to_string(), "fault injected at stage 'lower' (TORCHTPU_INJECT_FAULT)");
    // The driver checks too, so `torchtpu-opt --emit=stablehlo` replays it.
    let e = torchtpu_engine::lower(&g, &options, torchtpu_compiler::lower::Format::Text).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal { stage: "lower" });

    std::env::set_var(FAULT_ENV, "compile");
    let e = engine.compile(&g, &options).err().expect("compile fault");
    assert!(matches!(e, EngineError::Injected { stage: "compile" }), "{e}");
    assert_eq!(e.kind(), ErrorKind::Internal { stage: "compile" });

    std::env::set_var(FAULT_ENV, "execute");
    let e = compiled.run(std::slice::from_ref(&x)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal { stage: "execute" });
    let bytes = [0u8; 20];
    let e = compiled.execute_host(&[&bytes]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal { stage: "execute" });
    // Other stages are untouched by an execute fault; several stages may be named at once.
    assert!(engine.compile(&g, &options).is_ok());
    std::env::set_var(FAULT_ENV, "compile, execute");
    assert!(matches!(engine.compile(&g, &options), Err(EngineError::Injected { stage: "compile" })));

    std::env::remove_var(FAULT_ENV);
    assert!(engine.compile(&g, &options).unwrap().run(&[x]).is_ok());
}
