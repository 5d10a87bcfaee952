//! Host -> device -> host round trips and the checks on host data.

mod common;

use common::*;
use torchtpu_runtime::{Buffer, ElementType, RuntimeError};

fn round_trip(data: &[u8], ty: ElementType, dims: &[i64]) -> Buffer {
    let buf = client().buffer_from_host(data, ty, dims, &device()).unwrap();
    assert_eq!(buf.element_type(), ty);
    assert_eq!(buf.dims(), dims);
    assert_eq!(buf.to_host().unwrap(), data, "{ty:?} {dims:?}");
    buf
}

#[test]
fn f32_round_trip() {
    let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 3.0).collect();
    let buf = round_trip(&f32_bytes(&v), ElementType::F32, &[3, 4]);
    assert_eq!(f32s(&buf.to_host().unwrap()), v);
    assert_eq!(buf.element_count(), 12);
}

#[test]
fn i64_round_trip() {
    let v = [i64::MIN, -1, 0, 1, i64::MAX, 42];
    let buf = round_trip(&i64_bytes(&v), ElementType::S64, &[2, 3]);
    assert_eq!(i64s(&buf.to_host().unwrap()), v);
}

#[test]
fn pred_round_trip() {
    round_trip(&[1, 0, 0, 1, 1], ElementType::Pred, &[5]);
}

#[test]
fn f64_round_trip() {
    let v = [std::f64::consts::PI, -0.0, f64::MAX, f64::MIN_POSITIVE];
    round_trip(&f64_bytes(&v), ElementType::F64, &[2, 1, 2]);
}

#[test]
fn scalar_and_empty_arrays() {
    round_trip(&f32_bytes(&[7.25]), ElementType::F32, &[]);
    let empty = round_trip(&[], ElementType::F32, &[0, 3]);
    assert_eq!(empty.element_count(), 0);
}

#[test]
fn other_types_round_trip() {
    for ty in
        [ElementType::S8, ElementType::U16, ElementType::S32, ElementType::U64, ElementType::BF16, ElementType::C64]
    {
        let data: Vec<u8> = (0..ty.byte_size() * 6).map(|i| (i * 7 % 251) as u8).collect();
        round_trip(&data, ty, &[6]);
    }
}

#[test]
fn buffer_on_another_device() {
    let devices = client().addressable_devices();
    let last = devices.last().unwrap();
    let buf = client().buffer_from_host(&f32_bytes(&[1.0, 2.0]), ElementType::F32, &[2], last).unwrap();
    assert_eq!(f32s(&buf.to_host().unwrap()), [1.0, 2.0]);
}

#[test]
fn wrong_data_length_is_invalid_argument() {
    let err =
        client().buffer_from_host(&f32_bytes(&[1.0, 2.0, 3.0]), ElementType::F32, &[2, 2], &device()).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err:?}");
    assert!(err.to_string().contains("12 bytes"), "{err}");
    assert!(err.to_string().contains("16"), "{err}");
}

#[test]
fn negative_or_overflowing_dims_are_invalid_argument() {
    let c = client();
    let err = c.buffer_from_host(&[], ElementType::F32, &[-1], &device()).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err:?}");
    let err = c.buffer_from_host(&[0; 8], ElementType::F64, &[i64::MAX, 4], &device()).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err:?}");
}

#[test]
fn buffers_move_between_threads() {
    let buf = upload_f32(&[1.0, 2.0, 3.0], &[3]);
    let back = std::thread::spawn(move || buf.to_host().unwrap()).join().unwrap();
    assert_eq!(f32s(&back), [1.0, 2.0, 3.0]);
}
