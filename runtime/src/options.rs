//! Compile options, serialized as the `xla.CompileOptionsProto` that `PJRT_Client_Compile` takes.
//!
//! Only the fields we set are declared, with the tags of `xla/pjrt/proto/compile_options.proto`.
//! The serialization is never empty: an empty options string aborts the whole process inside XLA.

use std::collections::BTreeMap;

use prost::Message;

/// `xla.CompileOptionsProto` (only the fields we set).
#[derive(Clone, PartialEq, prost::Message)]
struct CompileOptionsProto {
    #[prost(message, optional, tag = "3")]
    executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// Compiled for no device in particular: each execution names its device
    /// (`execute_device`), so one executable serves every device of the client.
    #[prost(bool, tag = "4")]
    compile_portable_executable: bool,
    /// XLA `DebugOptions` fields by name (`xla_cpu_...`), applied to this compile only: what
    /// `XLA_FLAGS` would set for the whole process. A BTreeMap, so the bytes (part of the
    /// cache key) do not depend on insertion order.
    #[prost(btree_map = "string, message", tag = "7")]
    env_option_overrides: BTreeMap<String, OptionOverrideProto>,
}

/// `xla.OptionOverrideProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct OptionOverrideProto {
    #[prost(oneof = "OptionOverrideValue", tags = "1, 2, 3")]
    value: Option<OptionOverrideValue>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum OptionOverrideValue {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
}

/// The value of one XLA option override. Repeated and enum fields (e.g.
/// `xla_cpu_experimental_ynn_fusion_type`) take XLA's flag syntax as a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum XlaOption {
    Str(String),
    Bool(bool),
    Int(i64),
}

impl From<&XlaOption> for OptionOverrideProto {
    fn from(v: &XlaOption) -> Self {
        let value = match v {
            XlaOption::Str(s) => OptionOverrideValue::String(s.clone()),
            XlaOption::Bool(b) => OptionOverrideValue::Bool(*b),
            XlaOption::Int(i) => OptionOverrideValue::Int(*i),
        };
        OptionOverrideProto { value: Some(value) }
    }
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
    #[prost(message, optional, tag = "9")]
    device_assignment: Option<DeviceAssignmentProto>,
    /// Shardy (`sdy.*` attributes) instead of GSPMD (`mhlo.sharding`).
    #[prost(bool, tag = "19")]
    use_shardy_partitioner: bool,
}

/// `xla.DeviceAssignmentProto`: which device runs each (replica, partition).
#[derive(Clone, PartialEq, prost::Message)]
struct DeviceAssignmentProto {
    #[prost(int32, tag = "1")]
    replica_count: i32,
    #[prost(int32, tag = "2")]
    computation_count: i32,
    #[prost(message, repeated, tag = "3")]
    computation_devices: Vec<ComputationDevice>,
}

/// One partition's devices, one per replica.
#[derive(Clone, PartialEq, prost::Message)]
struct ComputationDevice {
    #[prost(int64, repeated, tag = "1")]
    replica_device_ids: Vec<i64>,
}

/// How a program is compiled. `Default` is one replica, one partition, XLA's own options.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub num_replicas: i64,
    pub num_partitions: i64,
    /// XLA `DebugOptions` overrides for this compile (`env_option_overrides`), by field name.
    pub xla_options: BTreeMap<String, XlaOption>,
    /// A portable executable (one replica, one partition): it runs on whichever device each
    /// execution names ([`Executable::execute_on`](crate::Executable::execute_on)) and only
    /// there; the plugin refuses it an execution without a device.
    pub portable: bool,
    /// The device id of each replica of a replicated program ([`CompileOptions::replicated`]):
    /// its device assignment. Empty: XLA's default (replica r on device r).
    pub replica_devices: Vec<i64>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            num_replicas: 1,
            num_partitions: 1,
            xla_options: BTreeMap::new(),
            portable: false,
            replica_devices: Vec::new(),
        }
    }
}

impl CompileOptions {
    /// `num_replicas` replicas of `num_partitions` partitions, XLA's own options.
    pub fn new(num_replicas: i64, num_partitions: i64) -> CompileOptions {
        CompileOptions { num_replicas, num_partitions, ..CompileOptions::default() }
    }

    /// One replica, one partition, compiled portable: one executable for every device, each
    /// execution naming its device (how the eager device runs an op on `tpu:N`).
    pub fn portable() -> CompileOptions {
        CompileOptions { portable: true, ..CompileOptions::default() }
    }

    /// One replica per device of `device_ids` (one partition each): a program whose
    /// cross-replica collectives (`stablehlo.all_reduce` ...) run among them, replica r on
    /// device id `device_ids[r]`. An execution gives one argument list per replica, in order.
    pub fn replicated(device_ids: &[i64]) -> CompileOptions {
        CompileOptions {
            num_replicas: device_ids.len() as i64,
            replica_devices: device_ids.to_vec(),
            ..CompileOptions::default()
        }
    }

    /// One replica partitioned over `n` devices by Shardy (the module's `sdy.*` shardings).
    pub fn spmd(n: i64) -> CompileOptions {
        CompileOptions::new(1, n)
    }

    /// These options with XLA option overrides `xla_options` (replacing any of the same name).
    pub fn with_xla_options(mut self, xla_options: impl IntoIterator<Item = (String, XlaOption)>) -> CompileOptions {
        self.xla_options.extend(xla_options);
        self
    }

    /// The serialized `CompileOptionsProto`. With `num_partitions > 1`, SPMD partitioning by
    /// Shardy is on and partition `d` runs on device id `d` (the device assignment XLA needs;
    /// without `use_shardy_partitioner` it drops `sdy` shardings without a word).
    pub fn serialize(&self) -> Vec<u8> {
        let spmd = self.num_partitions > 1;
        let replicated = (!self.replica_devices.is_empty()).then(|| DeviceAssignmentProto {
            replica_count: self.replica_devices.len() as i32,
            computation_count: 1,
            computation_devices: vec![ComputationDevice { replica_device_ids: self.replica_devices.clone() }],
        });
        let device_assignment = replicated.or_else(|| {
            spmd.then(|| DeviceAssignmentProto {
                replica_count: self.num_replicas as i32,
                computation_count: self.num_partitions as i32,
                computation_devices: (0..self.num_partitions)
                    .map(|p| ComputationDevice {
                        replica_device_ids: (0..self.num_replicas).map(|r| p * self.num_replicas + r).collect(),
                    })
                    .collect(),
            })
        });
        CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                device_ordinal: -1,
                num_replicas: self.num_replicas,
                num_partitions: self.num_partitions,
                use_spmd_partitioning: spmd,
                device_assignment,
                use_shardy_partitioner: spmd,
            }),
            env_option_overrides: self.xla_options.iter().map(|(k, v)| (k.clone(), v.into())).collect(),
            compile_portable_executable: self.portable,
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
        if self.portable && (self.num_replicas != 1 || self.num_partitions != 1) {
            return Err(crate::RuntimeError::InvalidArgument(format!(
                "a portable executable has one replica and one partition, got {} and {}",
                self.num_replicas, self.num_partitions
            )));
        }
        if !self.replica_devices.is_empty()
            && (self.replica_devices.len() as i64 != self.num_replicas || self.num_partitions != 1 || self.portable)
        {
            return Err(crate::RuntimeError::InvalidArgument(format!(
                "a replicated program names one device per replica and has one partition: {} devices for {} \
                 replicas, {} partitions{}",
                self.replica_devices.len(),
                self.num_replicas,
                self.num_partitions,
                if self.portable { ", portable" } else { "" }
            )));
        }
        if let Some(name) = self.xla_options.keys().find(|k| !k.starts_with("xla_")) {
            return Err(crate::RuntimeError::InvalidArgument(format!(
                "XLA option {name:?} is not an XLA DebugOptions field (their names start with \"xla_\")"
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
        let four = CompileOptions::spmd(4).serialize();
        assert_ne!(one, four);
        // field 5 = 4, field 6 = true, then the device assignment (field 9), then field 19 = true.
        let at = four.windows(4).position(|w| w == [0x28, 0x04, 0x30, 0x01]).expect("partitions, spmd");
        assert_eq!(four[at + 4], 0x4a, "device assignment follows: {four:x?}");
        assert!(four.ends_with(&[0x98, 0x01, 0x01]), "use_shardy_partitioner last: {four:x?}");
        let decoded = CompileOptionsProto::decode(four.as_slice()).unwrap().executable_build_options.unwrap();
        let assignment = decoded.device_assignment.unwrap();
        assert_eq!((assignment.replica_count, assignment.computation_count), (1, 4));
        let ids: Vec<Vec<i64>> = assignment.computation_devices.into_iter().map(|c| c.replica_device_ids).collect();
        assert_eq!(ids, vec![vec![0], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn xla_options_are_serialized_in_name_order_whatever_the_insertion_order() {
        let a = CompileOptions::default().with_xla_options([
            ("xla_cpu_b".to_string(), XlaOption::Bool(false)),
            ("xla_cpu_a".to_string(), XlaOption::Str(String::new())),
        ]);
        let b = CompileOptions::default().with_xla_options([
            ("xla_cpu_a".to_string(), XlaOption::Str(String::new())),
            ("xla_cpu_b".to_string(), XlaOption::Bool(false)),
        ]);
        assert_eq!(a.serialize(), b.serialize());
        assert_ne!(a.serialize(), CompileOptions::default().serialize());
        let decoded = CompileOptionsProto::decode(a.serialize().as_slice()).unwrap();
        let names: Vec<&str> = decoded.env_option_overrides.keys().map(String::as_str).collect();
        assert_eq!(names, ["xla_cpu_a", "xla_cpu_b"]);
        assert_eq!(decoded.env_option_overrides["xla_cpu_b"].value, Some(OptionOverrideValue::Bool(false)));
        assert!(CompileOptions::default().with_xla_options([("cpu_a".into(), XlaOption::Int(1))]).validate().is_err());
    }

    #[test]
    fn portable_sets_field_4_and_keeps_one_device() {
        let bytes = CompileOptions::portable().serialize();
        let decoded = CompileOptionsProto::decode(bytes.as_slice()).unwrap();
        assert!(decoded.compile_portable_executable);
        // field 4 (varint) = 1, after the build options (field 3).
        assert!(bytes.ends_with(&[0x20, 0x01]), "{bytes:x?}");
        assert_ne!(bytes, CompileOptions::default().serialize());
        assert!(
            !CompileOptionsProto::decode(CompileOptions::default().serialize().as_slice())
                .unwrap()
                .compile_portable_executable
        );
        assert!(CompileOptions { num_partitions: 2, ..CompileOptions::portable() }.validate().is_err());
    }

    #[test]
    fn replicated_programs_assign_one_device_per_replica() {
        let opts = CompileOptions::replicated(&[2, 3]);
        assert!(opts.validate().is_ok());
        let decoded =
            CompileOptionsProto::decode(opts.serialize().as_slice()).unwrap().executable_build_options.unwrap();
        assert_eq!((decoded.num_replicas, decoded.num_partitions, decoded.use_spmd_partitioning), (2, 1, false));
        let assignment = decoded.device_assignment.unwrap();
        assert_eq!((assignment.replica_count, assignment.computation_count), (2, 1));
        assert_eq!(assignment.computation_devices[0].replica_device_ids, vec![2, 3]);
        let bad = CompileOptions { num_replicas: 3, ..CompileOptions::replicated(&[0, 1]) };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn rejects_zero_replicas() {
        assert!(CompileOptions::new(0, 1).validate().is_err());
        assert!(CompileOptions::default().validate().is_ok());
    }
}
