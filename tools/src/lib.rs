//! Command-line tools over the stack. The binaries live in `src/bin`; this
//! library holds what they share: parsing of addresses and the glue that
//! opens an AF_XDP device and starts a host stack on it, and
//! `iwarp-serve`'s metrics endpoint ([`prom`], [`http`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod http;
pub mod prom;

use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 address with a prefix length, as `10.0.0.1/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The address.
    pub addr: Ipv4Addr,
    /// The prefix length (0..=32).
    pub prefix: u8,
}

/// Why a `Cidr` did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError(String);

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected ADDRESS/PREFIX such as 10.0.0.1/24, got {:?}",
            self.0
        )
    }
}

impl std::error::Error for CidrError {}

impl std::str::FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let err = || CidrError(s.to_owned());
        let (a, p) = s.split_once('/').ok_or_else(err)?;
        let addr: Ipv4Addr = a.parse().map_err(|_| err())?;
        let prefix: u8 = p.parse().map_err(|_| err())?;
        if prefix > 32 {
            return Err(err());
        }
        Ok(Cidr { addr, prefix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parses_and_rejects() {
        let c: Cidr = "10.1.2.3/24".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.addr, Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(c.prefix, 24);
        for bad in ["10.1.2.3", "10.1.2.3/33", "10.1.2/24", "x/1", "10.1.2.3/"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
