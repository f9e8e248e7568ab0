//! File capabilities without the effective bit, made effective at start.
//!
//! A binary that carries file capabilities with the effective bit
//! (`setcap …+ep`) is refused by the kernel ("operation not permitted")
//! where the capabilities it names are not all available to it, such as a
//! container not given them: not even `--help` runs. With the permitted
//! bit alone (`setcap …+p`) it starts anywhere, with what it could get
//! permitted but not yet effective; [`raise_permitted`] then makes them
//! effective. The container image's binaries carry theirs so
//! (`deploy/Dockerfile`), and the tools call it first thing.

use rustix::thread::{capabilities, set_capabilities};

/// Make this thread's permitted capabilities effective; a thread started
/// afterwards inherits them, so call it first thing in `main`. Nothing to
/// do (no capabilities, or all effective already, as for root) is `Ok`.
pub fn raise_permitted() -> std::io::Result<()> {
    let mut sets = capabilities(None)?;
    if sets.effective == sets.permitted {
        return Ok(());
    }
    sets.effective = sets.permitted;
    set_capabilities(None, sets)?;
    Ok(())
}

/// Whether CAP_NET_ADMIN is in this thread's effective set (false if the
/// sets cannot be read). Rtnetlink requests that change state, such as
/// `RTM_NEWNEIGH`, need it.
pub fn effective_net_admin() -> bool {
    capabilities(None).is_ok_and(|s| {
        s.effective
            .contains(rustix::thread::CapabilitySet::NET_ADMIN)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread whose permitted capabilities are not effective (as after
    /// the exec of a `+p` binary: here cleared by hand, in this test's own
    /// thread) gets them all effective. Run unprivileged, nothing is
    /// permitted and nothing changes.
    #[test]
    fn permitted_capabilities_end_up_effective() {
        let mut sets = capabilities(None).expect("capget");
        if !sets.permitted.is_empty() {
            sets.effective = rustix::thread::CapabilitySet::empty();
            set_capabilities(None, sets).expect("capset");
            assert!(capabilities(None).expect("capget").effective.is_empty());
        }
        raise_permitted().expect("capset");
        let after = capabilities(None).expect("capget");
        assert_eq!(after.effective, sets.permitted);
        assert_eq!(after.permitted, sets.permitted);
    }
}
