//! Analyses over the graph IR that passes and tools read but that change nothing.

pub mod memory;
