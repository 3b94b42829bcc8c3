//! The designs each kernel patch replaced (see the crate docs), kept so the experiments can run old
//! against new through the same traits and workloads.
//!
//! These are deliberately the old algorithms (linear scans, memmove-based
//! maps). They keep the same contracts as their replacements and pass the
//! same tests; they are only slower, in the ways the seeds measured.

pub mod area_map;
pub mod linear_vmap;
