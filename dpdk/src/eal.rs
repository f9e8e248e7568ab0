//! The EAL: initialised once per process, cleaned up when the last handle
//! (an [`Eal`] or a [`crate::Port`], which holds one) is dropped.

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::sys;
use crate::Error;

/// Set by the first `Eal::init`, never cleared: DPDK cannot initialise its
/// EAL twice in a process, not even after `rte_eal_cleanup`.
static STARTED: AtomicBool = AtomicBool::new(false);
/// Set before `rte_eal_cleanup` runs: a thread that exits afterwards no
/// longer hands its lcore id back (see `port::thread_lcore`).
static CLEANED: AtomicBool = AtomicBool::new(false);

/// Whether the EAL has been (or is being) cleaned up.
pub(crate) fn cleaned_up() -> bool {
    CLEANED.load(Ordering::Acquire)
}

/// A handle on the initialised EAL. Clones share it; `rte_eal_cleanup` runs
/// when the last clone (ports hold one) is dropped.
#[derive(Debug, Clone)]
pub struct Eal {
    inner: Arc<EalInner>,
}

#[derive(Debug)]
struct EalInner {
    /// Arguments rte_eal_init consumed.
    parsed: usize,
}

impl Eal {
    /// `rte_eal_init` with `args` (without the program name; this adds one).
    ///
    /// Once per process: a second call returns [`Error::AlreadyInitialised`]
    /// without touching DPDK. See [`Eal::vdev_args`] for arguments that need
    /// neither hugepages nor PCI devices.
    ///
    /// The calling thread becomes DPDK's main lcore, and EAL pins it to the
    /// first core of the core list (`-l`); threads it spawns afterwards
    /// inherit that affinity. Pass `--lcores 0@(CPUS)` to keep it floating
    /// ([`crate::floating_vdev_args`]).
    pub fn init<I, S>(args: I) -> Result<Eal, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut owned = vec![CString::new("iwarp-dpdk").map_err(|_| nul())?];
        for a in args {
            owned.push(CString::new(a.as_ref()).map_err(|_| nul())?);
        }
        let argc = i32::try_from(owned.len()).map_err(|_| Error::InvalidArgument {
            reason: "too many EAL arguments",
        })?;
        if STARTED.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyInitialised);
        }
        // rte_eal_init permutes argv and may keep pointers into the strings
        // (it stores some option values as given), so both live for the rest
        // of the process: leaked once, as the EAL is initialised once.
        let strings: &'static [CString] = Vec::leak(owned);
        let argv: &'static mut [*mut c_char] = Vec::leak(
            strings
                .iter()
                .map(|s| s.as_ptr().cast_mut())
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect(),
        );
        // SAFETY: argv holds argc pointers to NUL-terminated strings followed
        // by NULL, all leaked above so valid for the rest of the process (EAL
        // may reorder the pointer array and keep the strings). STARTED makes
        // this the only rte_eal_init call in the process.
        let rc = unsafe { sys::shim_eal_init(argc, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(Error::EalInit { errno: -rc });
        }
        Ok(Eal {
            inner: Arc::new(EalInner {
                parsed: rc as usize,
            }),
        })
    }

    /// EAL arguments for virtual devices only, as the tests use them: one
    /// lcore (`-l 0`), no hugepages (`--no-huge -m 256`, anonymous memory),
    /// no PCI scan, no shared runtime files (`--no-shconf`, so that several
    /// DPDK processes can run side by side) and no telemetry socket; then one
    /// `--vdev` per entry of `vdevs` (e.g. `net_af_packet0,iface=veth0`).
    pub fn vdev_args(vdevs: &[&str]) -> Vec<String> {
        crate::vdev_args(vdevs)
    }

    /// How many arguments `rte_eal_init` consumed (the program name included).
    pub fn parsed_args(&self) -> usize {
        self.inner.parsed
    }
}

fn nul() -> Error {
    Error::InvalidArgument {
        reason: "an EAL argument contains a NUL byte",
    }
}

impl Drop for EalInner {
    fn drop(&mut self) {
        // The last handle is going away and every Port holds one, so no
        // port, queue or pool of ours is in use any more; DPDK releases its
        // devices and memory. The EAL is not used again (STARTED stays set).
        CLEANED.store(true, Ordering::Release);
        // SAFETY: as above.
        let _ = unsafe { sys::shim_eal_cleanup() };
    }
}
