//! Compile options, serialized as the `xla.CompileOptionsProto` that `PJRT_Client_Compile` takes.
//!
//! Only the fields we set are declared, with the tags of `xla/pjrt/proto/compile_options.proto`.
//! The serialization is never empty: an empty options string aborts the whole process inside XLA.

use prost::Message;

/// `xla.CompileOptionsProto` (only the fields we set).
#[derive(Clone, PartialEq, prost::Message)]
struct CompileOptionsProto {
    #[prost(message, optional, tag = "3")]
    executable_build_options: Option<ExecutableBuildOptionsProto>,
}

/// `xla.ExecutableBuildOptionsProto` (only the fields we set).
#[derive(Clone, PartialEq, prost::Message)]
struct ExecutableBuildOptionsProto {
    /// -1 means "not set": XLA picks the device.
    #[prost(int64, tag = "1")]
    device_ordinal: i64,
    #[prost(int64, tag = "4")]
    num_replicas: i64,
    #[prost(int64, tag = "5")]
    num_partitions: i64,
    #[prost(bool, tag = "6")]
    use_spmd_partitioning: bool,
}

/// How a program is compiled. `Default` is one replica, one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub num_replicas: i64,
    pub num_partitions: i64,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { num_replicas: 1, num_partitions: 1 }
    }
}

impl CompileOptions {
    /// The serialized `CompileOptionsProto`; SPMD partitioning is on when `num_partitions > 1`.
    pub fn serialize(&self) -> Vec<u8> {
        CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                device_ordinal: -1,
                num_replicas: self.num_replicas,
                num_partitions: self.num_partitions,
                use_spmd_partitioning: self.num_partitions > 1,
            }),
        }
        .encode_to_vec()
    }

    /// Rejects values XLA would crash on rather than report.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        if self.num_replicas < 1 || self.num_partitions < 1 {
            return Err(crate::RuntimeError::InvalidArgument(format!(
                "num_replicas and num_partitions must be >= 1, got {} and {}",
                self.num_replicas, self.num_partitions
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_serialization_has_the_expected_wire_bytes() {
        let bytes = CompileOptions::default().serialize();
        // field 3 (len-delimited) { field 1 = -1 (10-byte varint), field 4 = 1, field 5 = 1 }
        let mut inner = vec![0x08];
        inner.extend([0xff; 9]);
        inner.push(0x01);
        inner.extend([0x20, 0x01, 0x28, 0x01]);
        let mut expected = vec![0x1a, inner.len() as u8];
        expected.extend(inner);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn spmd_flag_follows_partitions() {
        let one = CompileOptions::default().serialize();
        let four = CompileOptions { num_replicas: 1, num_partitions: 4 }.serialize();
        assert_ne!(one, four);
        assert!(four.ends_with(&[0x28, 0x04, 0x30, 0x01]), "{four:x?}");
    }

    #[test]
    fn rejects_zero_replicas() {
        assert!(CompileOptions { num_replicas: 0, num_partitions: 1 }.validate().is_err());
        assert!(CompileOptions::default().validate().is_ok());
    }
}
