//! Errors, with messages that say what to do about them.

use std::fmt;
use std::path::PathBuf;

use crate::AttachMode;

/// What failed. `errno` fields hold the kernel's error number; `Display`
/// adds its text and, where there is one, the usual fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// `if_nametoindex` found no such interface in the calling thread's
    /// network namespace.
    NoInterface {
        /// The name asked for.
        name: String,
    },
    /// The configuration cannot work.
    InvalidConfig {
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The kernel refused for lack of privileges (EPERM/EACCES).
    Permission {
        /// The operation refused.
        op: &'static str,
        /// EPERM or EACCES.
        errno: i32,
    },
    /// Registering the UMEM failed for lack of lockable memory: its pages
    /// count against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
    Memlock {
        /// Size of the UMEM.
        bytes: usize,
        /// ENOBUFS (over RLIMIT_MEMLOCK without CAP_IPC_LOCK), ENOMEM,
        /// EPERM or EAGAIN.
        errno: i32,
    },
    /// Zero-copy was asked for and the driver or queue cannot do it.
    ZeroCopyUnsupported {
        /// Interface.
        iface: String,
        /// Queue.
        queue: u32,
        /// What bind returned.
        errno: i32,
    },
    /// The interface's MTU needs multi-buffer frames (`XDP_USE_SG`,
    /// Linux 6.6) and the kernel refused them.
    MultiBufferUnsupported {
        /// Interface.
        iface: String,
        /// What bind returned.
        errno: i32,
    },
    /// Binding the socket failed for another reason.
    Bind {
        /// Interface.
        iface: String,
        /// Queue.
        queue: u32,
        /// What bind returned.
        errno: i32,
    },
    /// The verifier (or the kernel) refused the program.
    ProgramLoad {
        /// What BPF_PROG_LOAD returned.
        errno: i32,
        /// The verifier's log (may be empty).
        log: String,
    },
    /// Another XDP program is already attached to the interface
    /// (EBUSY/EEXIST).
    AttachBusy {
        /// Interface.
        iface: String,
        /// Mode tried.
        mode: AttachMode,
        /// EBUSY or EEXIST.
        errno: i32,
    },
    /// Attaching failed for another reason.
    Attach {
        /// Interface.
        iface: String,
        /// Mode tried (in `Auto`, the last one).
        mode: AttachMode,
        /// What BPF_LINK_CREATE returned.
        errno: i32,
    },
    /// Entering a network namespace failed.
    Netns {
        /// The namespace file.
        path: PathBuf,
        /// What open or setns returned.
        errno: i32,
    },
    /// Another system call failed.
    Sys {
        /// Which.
        op: &'static str,
        /// Its errno.
        errno: i32,
    },
}

impl Error {
    /// `Permission` for EPERM/EACCES, `Sys` otherwise.
    pub(crate) fn sys(op: &'static str, errno: i32) -> Error {
        if errno == libc::EPERM || errno == libc::EACCES {
            Error::Permission { op, errno }
        } else {
            Error::Sys { op, errno }
        }
    }

    /// The kernel's error number, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::NoInterface { .. } | Error::InvalidConfig { .. } => None,
            Error::Permission { errno, .. }
            | Error::Memlock { errno, .. }
            | Error::ZeroCopyUnsupported { errno, .. }
            | Error::MultiBufferUnsupported { errno, .. }
            | Error::Bind { errno, .. }
            | Error::ProgramLoad { errno, .. }
            | Error::AttachBusy { errno, .. }
            | Error::Attach { errno, .. }
            | Error::Netns { errno, .. }
            | Error::Sys { errno, .. } => Some(*errno),
        }
    }
}

struct Errno(i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoInterface { name } => write!(
                f,
                "no interface named {name:?} (in this network namespace); \
                 check `ip link`, or enter the interface's namespace first"
            ),
            Error::InvalidConfig { reason } => write!(f, "invalid AF_XDP configuration: {reason}"),
            Error::Permission { op, errno } => write!(
                f,
                "{op}: {}: AF_XDP needs root or CAP_NET_ADMIN+CAP_BPF+CAP_NET_RAW, and \
                 CAP_IPC_LOCK or a memlock limit (`ulimit -l`) above the UMEM's size \
                 (e.g. `sudo setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep <binary>`)",
                Errno(*errno)
            ),
            Error::Memlock { bytes, errno } => write!(
                f,
                "registering the UMEM (XDP_UMEM_REG): {}: could not lock its {bytes} octets \
                 in memory; they count against the memlock limit (RLIMIT_MEMLOCK) unless the \
                 process has CAP_IPC_LOCK: raise `ulimit -l` (or LimitMEMLOCK= of a systemd \
                 unit), or grant cap_ipc_lock (`sudo setcap \
                 cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep <binary>`), or use \
                 fewer/smaller frames",
                Errno(*errno)
            ),
            Error::ZeroCopyUnsupported {
                iface,
                queue,
                errno,
            } => write!(
                f,
                "zero-copy AF_XDP is not supported on {iface} queue {queue}: {}: \
                 use mode Copy or Auto",
                Errno(*errno)
            ),
            Error::MultiBufferUnsupported { iface, errno } => write!(
                f,
                "{iface}'s MTU needs frames longer than a UMEM chunk, and binding with \
                 multi-buffer support (XDP_USE_SG, Linux 6.6) failed: {}: lower the MTU \
                 so that MTU + 14 fits a chunk less 256 octets (3826 with 4096-octet \
                 chunks), or use a newer kernel",
                Errno(*errno)
            ),
            Error::Bind {
                iface,
                queue,
                errno,
            } => {
                write!(
                    f,
                    "binding AF_XDP socket to {iface} queue {queue}: {}",
                    Errno(*errno)
                )?;
                if *errno == libc::EINVAL {
                    write!(
                        f,
                        " (does the interface have that many queues? `ethtool -l {iface}`)"
                    )?;
                }
                Ok(())
            }
            Error::ProgramLoad { errno, log } => {
                write!(f, "the kernel refused the XDP program: {}", Errno(*errno))?;
                if log.trim().is_empty() {
                    Ok(())
                } else {
                    write!(f, "; verifier log:\n{}", log.trim_end())
                }
            }
            Error::AttachBusy { iface, mode, errno } => write!(
                f,
                "another XDP program is already attached to {iface} ({mode:?} mode): {}: \
                 see `ip link show dev {iface}` and detach it (`ip link set dev {iface} xdp off`) \
                 if it is stale",
                Errno(*errno)
            ),
            Error::Attach { iface, mode, errno } => write!(
                f,
                "attaching the XDP program to {iface} ({mode:?} mode): {}",
                Errno(*errno)
            ),
            Error::Netns { path, errno } => write!(
                f,
                "entering network namespace {}: {}",
                path.display(),
                Errno(*errno)
            ),
            Error::Sys { op, errno } => write!(f, "{op}: {}", Errno(*errno)),
        }
    }
}

impl std::error::Error for Error {}

/// A non-fatal problem met while opening a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A busy-poll socket option was refused (old kernel, or no privileges
    /// for `SO_BUSY_POLL` above `net.core.busy_read`).
    BusyPoll {
        /// The option's name.
        option: &'static str,
        /// The errno.
        errno: i32,
    },
    /// A shared address ([`Config::share`](crate::Config::share)) opened
    /// without CAP_NET_ADMIN in effect: the kernel refuses the neighbour
    /// requests (`RTM_NEWNEIGH`) the device makes for the stack, so the
    /// stack reaches only neighbours already in the kernel's table (a peer
    /// that connected first, whose ARP request the kernel answered);
    /// connections to others time out.
    ShareWithoutNetAdmin,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::BusyPoll { option, errno } => {
                write!(
                    f,
                    "setting {option} failed: {}; busy polling is off",
                    Errno(*errno)
                )
            }
            Warning::ShareWithoutNetAdmin => f.write_str(
                "sharing the address without CAP_NET_ADMIN: the kernel refuses the \
                 neighbour requests (RTM_NEWNEIGH) made for the stack, so it reaches only \
                 neighbours the kernel already knows and connections to others time out; \
                 give the process CAP_NET_ADMIN (docker --cap-add NET_ADMIN)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Following the hint exactly must be enough: it names CAP_IPC_LOCK
    /// beside the three capabilities AF_XDP needs.
    #[test]
    fn permission_hint_names_every_capability() {
        let msg = Error::Permission {
            op: "creating the AF_XDP socket",
            errno: libc::EPERM,
        }
        .to_string();
        assert!(msg.contains("CAP_NET_ADMIN+CAP_BPF+CAP_NET_RAW"), "{msg}");
        assert!(
            msg.contains("setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep"),
            "{msg}"
        );
        assert!(msg.contains("ulimit -l"), "{msg}");
    }

    /// ENOBUFS from XDP_UMEM_REG (over RLIMIT_MEMLOCK without CAP_IPC_LOCK)
    /// names the cause and both fixes.
    #[test]
    fn memlock_names_cause_and_fix() {
        let msg = Error::Memlock {
            bytes: 16 << 20,
            errno: libc::ENOBUFS,
        }
        .to_string();
        for want in [
            "XDP_UMEM_REG",
            "16777216 octets",
            "RLIMIT_MEMLOCK",
            "CAP_IPC_LOCK",
            "ulimit -l",
            "cap_ipc_lock",
            "os error 105",
        ] {
            assert!(msg.contains(want), "{want:?} missing: {msg}");
        }
    }
}
