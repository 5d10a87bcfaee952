//! What the compiler offers, as the backend asks it: passes, lowered ops, and one lowering
//! choice the exporter needs to know about.

/// `(name, description)` of every registered pass.
pub fn list_passes() -> Vec<(&'static str, &'static str)> {
    torchtpu_compiler::passes::REGISTRY.iter().map(|p| (p.name, p.description)).collect()
}

/// Whether the lowering runs a convolution with these input and kernel spatial dims as
/// patches times a matmul, which reads its weight as given (no weight relayout pays).
pub fn convolution_runs_as_matmul(input_spatial: &[i64], kernel_spatial: &[i64], groups: i64) -> bool {
    torchtpu_compiler::lower::convolution_runs_as_matmul(input_spatial, kernel_spatial, groups)
}

/// The ATen ops the lowering covers (`aten.add`, ...), without overloads.
pub fn supported_ops() -> Vec<&'static str> {
    torchtpu_compiler::lower::table::lowered_ops()
}
