//! The record of device work a profiler reads (`trace`): executions with device time, their
//! launches, compiles and copies, each with the correlation id current on the launching thread.
//! One test: the record is process-wide.

mod common;

use common::*;
use torchtpu_runtime::trace::{self, ActivityKind};
use torchtpu_runtime::CompileOptions;

const ADD: &str = r#"func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"#;

#[test]
fn a_profiled_run_records_its_compile_copies_launch_and_device_time() {
    let a = upload_f32(&[1.0; 6], &[2, 3]); // before the record: not in it
    assert!(!trace::enabled());
    trace::start();
    trace::push_correlation(7);
    let exe = client().compile(ADD, &CompileOptions::default()).unwrap();
    exe.set_label("add_graph");
    let b = upload_f32(&[2.0; 6], &[2, 3]);
    let before = trace::now_ns();
    let out = exe.execute_async(&[&a, &b]).unwrap();
    trace::pop_correlation();
    assert_eq!(f32s(&out[0].to_host().unwrap()), vec![3.0; 6]); // outside any correlation
    trace::stop();
    exe.execute(&[&a, &b]).unwrap(); // after stop: not recorded
    let got = trace::take();

    // The execution is recorded when its output is ready (a plugin thread): find, not index.
    let mut kinds: Vec<u32> = got.iter().map(|a| a.kind as u32).collect();
    kinds.sort();
    assert_eq!(kinds, [0, 1, 2, 3, 5], "execute, compile, HtoD, DtoH, launch: {got:#?}");
    let of = |kind| got.iter().find(|a| a.kind == kind).unwrap();
    let run = of(ActivityKind::Execute);
    assert_eq!((run.name.as_str(), run.device, run.correlation), ("add_graph", 0, 7));
    assert!(run.start_ns >= before && run.end_ns >= run.start_ns, "{run:?}");
    assert_eq!(of(ActivityKind::Launch).name, "add_graph");
    assert_eq!(of(ActivityKind::Compile).correlation, 7);
    let (up, down) = (of(ActivityKind::HostToDevice), of(ActivityKind::DeviceToHost));
    assert_eq!((up.bytes, up.correlation, up.device), (24, 7, 0));
    assert_eq!((down.bytes, down.correlation, down.device), (24, 0, 0));
    assert!(got.iter().all(|a| a.end_ns >= a.start_ns));
    assert!(trace::take().is_empty(), "take forgets what it returned");
}
