//! The eager `tpu` device's per-op runtime, the part that needs no Python (docs/eager.md, "How
//! an op runs").
//!
//! The extension (`python/src/eager/`) turns the dispatcher shim's argument records and the
//! Python path's objects into what this crate decides on, and launches what it decides:
//! - `key`: an op call's program key, written from its arguments' descriptions;
//! - `cache`: per key, a recipe (generic: the extension's holds Python objects), or the word
//!   that the key bakes its floats or is the Python path's; bounded, with its counters;
//! - `calls`: per thread, the calls that missed and run in Python now, and how a recipe the
//!   Python path gives back is bound to one of them (or the key becomes Python's);
//! - `donation`: which inputs of an in-place or out= op's program are donated (both paths' rule);
//! - `mode`: the eager mode, per thread (its one copy: the shim and Python read it here), and
//!   whether index checks are on;
//! - `region`: DeferAndFuse's region key (its recorded programs, live values and dead
//!   externals) and its name in explain records;
//! - `layout`: PyTorch's contiguity rule, which decides whether a copy is a buffer's reuse;
//! - `schema`: an op's kind (view, functional, in-place, out=, mutating) from its schema, the
//!   one classification the shim and the Python path both read.

pub mod cache;
pub mod calls;
pub mod donation;
pub mod key;
pub mod layout;
pub mod mode;
pub mod region;
pub mod schema;
