//! Input buffers kept between calls: a zero-copy PJRT buffer per input slot, reused while the
//! caller passes the same memory.

use torchtpu_runtime::Buffer;

/// A zero-copy buffer over the caller's memory at `addr` (`len` bytes).
pub(crate) struct Resident {
    addr: usize,
    len: usize,
    pub(crate) buffer: Buffer,
}

impl Resident {
    pub(crate) fn new(addr: usize, len: usize, buffer: Buffer) -> Resident {
        Resident { addr, len, buffer }
    }

    /// Whether this buffer reads exactly the memory `(addr, len)`.
    pub(crate) fn holds(&self, addr: usize, len: usize) -> bool {
        self.addr == addr && self.len == len && len != 0
    }
}
