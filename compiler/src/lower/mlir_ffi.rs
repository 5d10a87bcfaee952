//! The two things the lowering needs from MLIR's C API that melior does not wrap: an
//! attribute of an unregistered dialect built as a value, and erasing an op nothing reads.
//! All of the lowering's `unsafe` is here.

use melior::ir::operation::OperationRef;
use melior::ir::Attribute;
use melior::{Context, StringRef};
use mlir_sys::{mlirNoneTypeGet, mlirOpaqueAttrGet};

/// `#dialect.data` as the attribute MLIR itself holds for it when `dialect` is not registered
/// (parsing that text yields the same, uniqued, attribute).
pub(super) fn opaque_attribute<'c>(ctx: &'c Context, dialect: &str, data: &str) -> Attribute<'c> {
    // SAFETY: the context is live for 'c; MLIR copies both strings into the uniqued attribute
    // storage before returning, so the borrowed bytes need not outlive the call.
    unsafe {
        let namespace = StringRef::new(dialect).to_raw();
        let raw = mlirOpaqueAttrGet(
            ctx.to_raw(),
            namespace,
            data.len() as isize,
            data.as_ptr().cast(),
            mlirNoneTypeGet(ctx.to_raw()),
        );
        Attribute::from_raw(raw)
    }
}

/// Erases `op` when nothing uses its first (only) result; says whether it did.
pub(super) fn erase_if_first_result_unused(op: OperationRef) -> bool {
    // SAFETY: `op` is a live operation with one result (the caller's transposes); the C
    // API only reads its use list, and erases it (its own operands' use lists drop it) when it
    // has none, after which the caller holds no reference to it.
    unsafe {
        let raw = op.to_raw();
        let unused =
            mlir_sys::mlirOpOperandIsNull(mlir_sys::mlirValueGetFirstUse(mlir_sys::mlirOperationGetResult(raw, 0)));
        if unused {
            mlir_sys::mlirOperationDestroy(raw);
        }
        unused
    }
}
