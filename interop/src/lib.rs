//! Interoperability with Linux siw, the reference software iWARP peer: a
//! driver for the qemu lab ([`lab`]), the rping protocol over our API
//! ([`rping`]) and our side of a small guest program ([`iwtest`]). The suite itself is `tests/siw.rs`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod iwtest;
pub mod lab;
pub mod rping;
