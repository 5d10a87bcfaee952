//! Input buffers kept between calls: a zero-copy PJRT buffer per input slot, reused while the
//! caller passes the same memory.

use torchtpu_runtime::{Buffer, Client, Device, ElementType, RuntimeError};

/// A zero-copy buffer over the caller's memory at `addr` (`len` bytes).
pub(crate) struct Resident {
    addr: usize,
    len: usize,
    pub(crate) buffer: Buffer,
}

impl Resident {
    /// Whether this buffer reads exactly the memory `(addr, len)`.
    pub(crate) fn holds(&self, addr: usize, len: usize) -> bool {
        self.addr == addr && self.len == len && len != 0
    }
}

/// Makes `slot` hold a buffer reading `data` in place, reusing the one it holds when that
/// reads this very memory. Returns None when the buffer is in `slot`, or the buffer the
/// plugin made by copying instead (`slot` is then emptied): use it for this call only.
///
/// # Safety
/// The kept buffer reads `data`'s memory at every execution it is used in: the caller uses it
/// only in calls that pass this same memory again (what `holds` checks on every call), and
/// never donates it (PJRT would write into the caller's memory).
pub(crate) unsafe fn in_place(
    slot: &mut Option<Resident>,
    client: &Client,
    data: &[u8],
    ty: ElementType,
    dims: &[i64],
    device: &Device,
) -> Result<Option<Buffer>, RuntimeError> {
    let (addr, len) = (data.as_ptr() as usize, data.len());
    if slot.as_ref().is_some_and(|r| r.holds(addr, len)) {
        return Ok(None);
    }
    // SAFETY: the caller's contract above.
    let (buffer, aliased) = unsafe { client.buffer_aliasing_host(data, ty, dims, device)? };
    if aliased {
        *slot = Some(Resident { addr, len, buffer });
        Ok(None)
    } else {
        *slot = None;
        Ok(Some(buffer))
    }
}

/// The buffer of each input: this call's copy, else the one its slot keeps.
pub(crate) fn arguments<'b>(copies: &'b [Option<Buffer>], slots: &'b [Option<Resident>]) -> Vec<&'b Buffer> {
    copies
        .iter()
        .zip(slots)
        .map(|(copy, slot)| copy.as_ref().or(slot.as_ref().map(|r| &r.buffer)).expect("every input has a buffer"))
        .collect()
}
