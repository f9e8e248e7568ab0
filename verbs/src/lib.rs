//! A libibverbs-compatible C ABI over the iWARP stack (issue 25), linked
//! into `libibverbs.so.1` with rdma-core's symbol versions by
//! `scripts/verbs-build.sh`, so that unmodified programs load it through
//! `LD_LIBRARY_PATH` (`scripts/verbs-run.sh PROGRAM ARGS…`).
//!
//! **What it has.** One device, `iwarp0` (node type RNIC, transport
//! `IBV_TRANSPORT_IWARP`), for the interface named by `IWARP_IFACE`:
//! discovery and queries (`ibv_devices`, `ibv_devinfo`), protection
//! domains, memory regions (the virtual address is the tagged offset;
//! `lkey` = `rkey` = the STag), completion channels (epoll descriptors)
//! and CQs, RC queue pairs with Send (and Send with Invalidate), RDMA
//! Write and RDMA Read, inline or from registered memory, RDMA Write with
//! immediate and the Fetch-and-Add and Compare-and-Swap atomics (RFC 7306;
//! `atomic_cap` `IBV_ATOMIC_HCA`, `IBV_ACCESS_REMOTE_ATOMIC`), shared
//! receive queues (`ibv_create_srq`, `ibv_query_srq`, `ibv_modify_srq`
//! without resizing, `ibv_destroy_srq`, QPs created with
//! `qp_init_attr.srq`, `rdma_create_srq`) and their limit event
//! (`IBV_EVENT_SRQ_LIMIT_REACHED` through `ibv_get_async_event`, the only
//! asynchronous event), through the
//! context's operation table that the header's inline `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` call; and
//! librdmacm's connection calls (`cm`), whose functions this library
//! exports under librdmacm's version names. By default the program's own
//! thread runs the stack when it polls a CQ or posts (run to completion).
//! Send with immediate (RFC 7306 has no such message), memory
//! windows, address handles and the extended (`_ex`) verbs fail with the errno
//! rdma-core's providers give for what a device lacks (`stubs`).
//!
//! Configuration: the environment (see `engine`): `IWARP_IFACE`,
//! `IWARP_IP`, `IWARP_BACKEND`, `IWARP_MTU`, `IWARP_POLL`, `IWARP_CORE`,
//! `IWARP_SHARE_ADDRESS` (the kernel owns the address too, as qperf's
//! control connection needs) and the rest `engine` lists; a missing or
//! wrong one is named on standard error.
//!
//! Backend crate: `unsafe` is confined to the C boundary, each block with
//! its `SAFETY:` reasoning.

pub mod abi;
mod cm;
mod engine;
mod objects;
mod stubs;

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use abi::{IbvContext, IbvDevice, IbvDeviceAttr, IbvGid, IbvPortAttr};

/// The deepest send or receive queue a QP may ask for.
pub(crate) const MAX_QP_WR: usize = 4096;

/// The deepest shared receive queue (`max_srq_wr`).
pub(crate) const MAX_SRQ_WR: usize = 1 << 14;

/// Our device: the C `ibv_device` first (programs hold pointers to it),
/// then what we know of the interface.
#[repr(C)]
#[derive(Debug)]
struct Device {
    c: IbvDevice,
    link: Port,
    mac: [u8; 6],
}

/// What the device's port reports its MTU and state from.
#[derive(Debug)]
enum Port {
    /// A kernel interface (AF_XDP): its sysfs directory.
    Iface(String),
    /// A DPDK port: the MTU it is opened with; up (a memif link comes up
    /// when its peer connects, and the stack's retransmissions cover the
    /// wait).
    Dpdk { mtu: usize },
}

// SAFETY: a `Device` is made once and never written after: its raw
// pointers are two null slots no one follows, so sharing it between
// threads (as C programs do) reads immutable data.
unsafe impl Sync for Device {}
// SAFETY: as above; nothing in it is tied to the thread that made it.
unsafe impl Send for Device {}

/// Our context: an extended one, as rdma-core's providers make (the C
/// `ibv_context` after the rest of a `struct verbs_context`).
#[repr(C)]
#[derive(Debug)]
struct Context {
    /// `struct verbs_context` before its `context` member (`c`, right
    /// after it): the context is an extended one.
    ext: abi::VerbsContextHead,
    c: IbvContext,
    dev: &'static Device,
    /// Its asynchronous events (`c.async_fd` is their descriptor).
    events: Arc<AsyncEvents>,
}

/// One asynchronous event: `enum ibv_event_type` and its element (the
/// object's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AsyncEvent {
    pub event_type: c_int,
    pub element: usize,
}

/// A context's asynchronous events, oldest first, and the descriptor
/// programs wait on (`async_fd`): an eventfd in semaphore mode that
/// counts them, so it is readable while one is queued, as rdma-core's is.
/// Only the SRQ limit (`IBV_EVENT_SRQ_LIMIT_REACHED`) is reported: the
/// stack reports QP and port trouble through completions and CM events.
#[derive(Debug)]
pub(crate) struct AsyncEvents {
    fd: Option<OwnedFd>,
    queue: Mutex<VecDeque<AsyncEvent>>,
}

impl AsyncEvents {
    fn new() -> AsyncEvents {
        // SAFETY: plain syscall; a descriptor it returns is ours alone.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        AsyncEvents {
            // SAFETY: a new descriptor nothing else owns (when not -1).
            fd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    fn raw_fd(&self) -> c_int {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<AsyncEvent>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `e` and count it on the descriptor. Called from the thread
    /// that runs the stack: takes a lock held only briefly and writes an
    /// eventfd (which never blocks below its maximum count).
    pub(crate) fn push(&self, e: AsyncEvent) {
        self.queue().push_back(e);
        let one: u64 = 1;
        // SAFETY: an 8-octet write from a u64 to our eventfd.
        unsafe { libc::write(self.raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Drop the queued events of `element` (an object being destroyed):
    /// their counts on the descriptor are read past by
    /// `ibv_get_async_event`.
    pub(crate) fn forget(&self, element: usize) {
        self.queue().retain(|e| e.element != element);
    }
}

impl Context {
    /// The allocation whose `c` member `ctx` points to.
    fn of(ctx: *mut IbvContext) -> *mut Context {
        ctx.wrapping_byte_sub(std::mem::offset_of!(Context, c))
            .cast()
    }
}

/// The device list, made once per process from the environment (rdma-core
/// also keeps its devices for the life of the process).
fn devices() -> &'static [&'static Device] {
    static DEVICES: OnceLock<Vec<&'static Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        match engine::Link::from_vars(&|k| std::env::var(k).ok()).and_then(|l| Device::new(&l)) {
            Ok(d) => vec![Box::leak(Box::new(d))],
            Err(e) => {
                eprintln!("iwarp verbs: no device: {e}");
                Vec::new()
            }
        }
    })
}

/// Copy `s` into a C string field (truncated to fit, NUL-terminated).
fn put(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

impl Device {
    fn new(link: &engine::Link) -> Result<Device, String> {
        let (port, mac, path) = match link {
            engine::Link::Xdp { iface } => {
                let sys = format!("/sys/class/net/{iface}");
                let mac = read_sys(&sys, "address")
                    .ok_or_else(|| format!("IWARP_IFACE={iface}: no such interface ({sys})"))
                    .and_then(|a| {
                        engine::parse_mac(&a)
                            .ok_or_else(|| format!("{sys}/address: not a MAC: {a}"))
                    })?;
                (Port::Iface(iface.clone()), mac, sys)
            }
            // No sysfs directory at all: a path that does not exist, so
            // that ibv_read_sysfs_file fails as for a missing attribute.
            engine::Link::Dpdk { mac, mtu, .. } => (
                Port::Dpdk { mtu: *mtu },
                *mac,
                "/sys/class/infiniband/iwarp0-dpdk".to_owned(),
            ),
            engine::Link::Memif { mac, mtu, .. } => (
                Port::Dpdk { mtu: *mtu },
                *mac,
                "/sys/class/infiniband/iwarp0-memif".to_owned(),
            ),
        };
        let mut c = IbvDevice {
            ops: abi::DeviceOps {
                dummy1: std::ptr::null_mut(),
                dummy2: std::ptr::null_mut(),
            },
            node_type: abi::NODE_RNIC,
            transport_type: abi::TRANSPORT_IWARP,
            name: [0; abi::SYSFS_NAME_MAX],
            dev_name: [0; abi::SYSFS_NAME_MAX],
            dev_path: [0; abi::SYSFS_PATH_MAX],
            ibdev_path: [0; abi::SYSFS_PATH_MAX],
        };
        put(&mut c.name, "iwarp0");
        put(&mut c.dev_name, "uverbs-iwarp0");
        // No sysfs device of ours: the interface's directory stands for it
        // (ibv_read_sysfs_file on a file it lacks fails, as for a device
        // without that attribute).
        put(&mut c.dev_path, &path);
        put(&mut c.ibdev_path, &path);
        Ok(Device { c, link: port, mac })
    }

    /// The node GUID: the MAC as a modified EUI-64 (ff:fe in the middle,
    /// the universal/local bit flipped), as Linux siw derives its GUID.
    fn guid(&self) -> [u8; 8] {
        let m = self.mac;
        [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
    }

    fn mtu(&self) -> usize {
        match &self.link {
            Port::Iface(iface) => read_sys(&format!("/sys/class/net/{iface}"), "mtu")
                .and_then(|m| m.trim().parse().ok())
                .unwrap_or(1500),
            Port::Dpdk { mtu } => *mtu,
        }
    }

    fn up(&self) -> bool {
        match &self.link {
            Port::Iface(iface) => read_sys(&format!("/sys/class/net/{iface}"), "operstate")
                .is_some_and(|s| matches!(s.trim(), "up" | "unknown")),
            Port::Dpdk { .. } => true,
        }
    }
}

fn read_sys(dir: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("{dir}/{file}")).ok()
}

/// Set the calling thread's `errno`.
fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// The device behind a pointer from our list; `None` for any other.
fn ours(device: *mut IbvDevice) -> Option<&'static Device> {
    devices()
        .iter()
        .copied()
        .find(|d| std::ptr::eq(&d.c, device.cast_const()))
}

/// The context behind a pointer from `ibv_open_device`.
///
/// # Safety
/// `ctx` is null or a pointer `ibv_open_device` returned and
/// `ibv_close_device` has not freed.
unsafe fn context<'a>(ctx: *mut IbvContext) -> Option<&'a Context> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: by the caller's contract `ctx` points to the `c` member of
    // a live `Context` (`repr(C)`), which `Context::of` steps back from.
    unsafe { Context::of(ctx).as_ref() }
}

/// `ibv_get_device_list`: a NULL-terminated array the caller frees with
/// `ibv_free_device_list`.
///
/// # Safety
/// `num_devices` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice {
    let list: Vec<*mut IbvDevice> = devices()
        .iter()
        .map(|d| std::ptr::addr_of!(d.c).cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect();
    let n = list.len() - 1;
    if !num_devices.is_null() {
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *num_devices = n as c_int };
    }
    Box::into_raw(list.into_boxed_slice()).cast()
}

/// Free a NULL-terminated pointer list made as a boxed slice
/// (`ibv_get_device_list`, `rdma_get_devices`).
///
/// # Safety
/// `list` is null or such a list, not freed before.
pub(crate) unsafe fn free_null_terminated<T>(list: *mut *mut T) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the list is NULL-terminated (we made it so) and not freed;
    // reading up to the terminator stays inside it.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the allocation its maker made: a boxed slice of n + 1
    // pointers.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

/// `ibv_free_device_list`.
///
/// # Safety
/// `list` is null or came from `ibv_get_device_list` and was not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut IbvDevice) {
    // SAFETY: by the caller's contract, the list `ibv_get_device_list` made.
    unsafe { free_null_terminated(list) }
}

/// `ibv_get_device_name`.
///
/// # Safety
/// `device` is null or a device from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut IbvDevice) -> *const c_char {
    match ours(device) {
        Some(d) => d.c.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            std::ptr::null()
        }
    }
}

/// `ibv_get_device_guid`: the node GUID, in network order (`__be64`).
///
/// # Safety
/// `device` is null or a device from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut IbvDevice) -> u64 {
    ours(device).map_or(0, |d| u64::from_ne_bytes(d.guid()))
}

/// `ibv_open_device`: a context for our device (the stack itself starts
/// with the first object that needs it: a PD, a CQ, a CM id's address).
///
/// # Safety
/// `device` is null or a device from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
    let Some(dev) = ours(device) else {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    };
    let events = Arc::new(AsyncEvents::new());
    let c = Box::into_raw(Box::new(Context {
        ext: abi::VerbsContextHead::new(),
        c: IbvContext {
            device,
            ops: ops_table(),
            cmd_fd: -1,
            // Asynchronous events (`AsyncEvents`): readable while one is
            // queued, so `ibv_get_async_event` and a poll on it wait as on
            // rdma-core's.
            async_fd: events.raw_fd(),
            num_comp_vectors: 1,
            mutex: [0; 5],
            abi_compat: abi::VERBS_ABI_IS_EXTENDED as *mut c_void,
        },
        dev,
        events,
    }));
    // SAFETY: just made; the program gets its `c` member, as rdma-core's
    // `&verbs_context->context`.
    unsafe { std::ptr::addr_of_mut!((*c).c) }
}

/// A context for our first device, for librdmacm's ids (null without
/// one).
pub(crate) fn open_first_device() -> *mut IbvContext {
    match devices().first() {
        // SAFETY: a device of our list.
        Some(d) => unsafe { ibv_open_device(std::ptr::addr_of!(d.c).cast_mut()) },
        None => std::ptr::null_mut(),
    }
}

/// The operation table the header's inline `ibv_post_send`,
/// `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq` call through.
fn ops_table() -> [abi::OpSlot; abi::CONTEXT_OPS] {
    use abi::{IbvCq, IbvQp, IbvRecvWr, IbvSendWr, IbvSrq, IbvWc};
    type PostSend = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
    type PostRecv = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
    type PostSrq = unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
    type Poll = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
    type Notify = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;
    let mut ops: [abi::OpSlot; abi::CONTEXT_OPS] = [None; abi::CONTEXT_OPS];
    // SAFETY (each): a function pointer stored in the table's generic slot
    // type; the header's inline functions call each slot with the slot's
    // own signature, which is the one the function has.
    unsafe {
        ops[abi::OP_POLL_CQ] = Some(std::mem::transmute::<Poll, unsafe extern "C" fn()>(
            objects::poll_cq,
        ));
        ops[abi::OP_REQ_NOTIFY_CQ] = Some(std::mem::transmute::<Notify, unsafe extern "C" fn()>(
            objects::req_notify_cq,
        ));
        ops[abi::OP_POST_SEND] = Some(std::mem::transmute::<PostSend, unsafe extern "C" fn()>(
            objects::post_send,
        ));
        ops[abi::OP_POST_RECV] = Some(std::mem::transmute::<PostRecv, unsafe extern "C" fn()>(
            objects::post_recv,
        ));
        ops[abi::OP_POST_SRQ_RECV] = Some(std::mem::transmute::<PostSrq, unsafe extern "C" fn()>(
            objects::post_srq_recv,
        ));
    }
    ops
}

/// `ibv_close_device`.
///
/// # Safety
/// `ctx` is null or came from `ibv_open_device` and was not closed.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut IbvContext) -> c_int {
    if ctx.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the allocation `ibv_open_device` made (the `Context` whose
    // `c` member the pointer points to), not freed before by the contract.
    // Its event descriptor closes with the last holder of its events (an
    // SRQ not destroyed yet holds them too).
    drop(unsafe { Box::from_raw(Context::of(ctx)) });
    0
}

/// The asynchronous events of the context `ctx` (null: none).
///
/// # Safety
/// As [`context`].
pub(crate) unsafe fn context_events(ctx: *mut IbvContext) -> Option<Arc<AsyncEvents>> {
    // SAFETY: by the caller's contract.
    unsafe { context(ctx) }.map(|c| c.events.clone())
}

/// `ibv_get_async_event`: the context's oldest event, waiting for one on
/// its descriptor (`EAGAIN` at once when the program made it
/// non-blocking). The only event is `IBV_EVENT_SRQ_LIMIT_REACHED` (an
/// armed SRQ limit, `ibv_modify_srq`), whose element is the SRQ.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `event` writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut IbvContext,
    event: *mut abi::IbvAsyncEvent,
) -> c_int {
    // SAFETY: by the contract.
    let Some(c) = (unsafe { context(ctx) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    loop {
        let mut n: u64 = 0;
        // SAFETY: an 8-octet read into a u64 from our eventfd (semaphore
        // mode: it takes one count, waiting for one unless non-blocking).
        if unsafe { libc::read(c.c.async_fd, (&mut n as *mut u64).cast(), 8) } != 8 {
            // EAGAIN, EINTR, EBADF: errno says which.
            return -1;
        }
        // A count whose event was dropped with its object has none.
        if let Some(e) = c.events.queue().pop_front() {
            // SAFETY: writable by the contract.
            unsafe {
                event.write(abi::IbvAsyncEvent {
                    element: e.element as *mut c_void,
                    event_type: e.event_type,
                })
            };
            return 0;
        }
    }
}

/// `ibv_ack_async_event`: for an SRQ's event, counts it in the SRQ's
/// `events_completed`, as rdma-core does.
///
/// # Safety
/// `event` from `ibv_get_async_event`, its element not destroyed.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut abi::IbvAsyncEvent) {
    // SAFETY: by the contract.
    let Some(e) = (unsafe { event.as_ref() }) else {
        return;
    };
    if e.event_type == abi::EVENT_SRQ_LIMIT_REACHED {
        // SAFETY: a live SRQ of ours by the contract.
        if let Some(s) = unsafe { e.element.cast::<abi::IbvSrq>().as_mut() } {
            s.events_completed = s.events_completed.wrapping_add(1);
        }
    }
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(e: c_int) -> *const c_char {
    const S: [&CStr; 22] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
        c"device fatal",
        c"unknown",
    ];
    usize::try_from(e)
        .ok()
        .and_then(|i| S.get(i))
        .unwrap_or(&c"unknown")
        .as_ptr()
}

/// `ibv_get_device_index`: our one device is index 0.
///
/// # Safety
/// `device` null or from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut IbvDevice) -> c_int {
    if ours(device).is_some() {
        0
    } else {
        -1
    }
}

/// `ibv_get_pkey_index`: the default P_Key (0xffff, network order) is at
/// index 0; there is no other.
#[no_mangle]
pub extern "C" fn ibv_get_pkey_index(ctx: *mut IbvContext, port: u8, pkey: u16) -> c_int {
    if ctx.is_null() || port != 1 || pkey != 0xffff {
        set_errno(libc::EINVAL);
        return -1;
    }
    0
}

/// `ibv_get_sysfs_path`: where sysfs is mounted.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` — no memory is pinned
/// for a device, so a child's copy-on-write cannot break a registration.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// `ibv_query_device`: what the stack supports (limits it enforces).
///
/// # Safety
/// `ctx` from `ibv_open_device`; `attr` null or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(ctx: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int {
    // SAFETY: by the caller's contract.
    let Some(c) = (unsafe { context(ctx) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    let guid = u64::from_ne_bytes(c.dev.guid());
    let mut a = IbvDeviceAttr {
        fw_ver: [0; 64],
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: 4096,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 1 << 16,
        max_qp_wr: MAX_QP_WR as c_int,
        device_cap_flags: 0,
        // `iwarp::MAX_SGE`.
        max_sge: 4,
        max_sge_rd: 4,
        max_cq: 1 << 16,
        max_cqe: 1 << 20,
        max_mr: 1 << 16,
        max_pd: 1 << 16,
        // IRD/ORD: RFC 6581's 14-bit fields.
        max_qp_rd_atom: 128,
        max_ee_rd_atom: 0,
        max_res_rd_atom: 1 << 16,
        max_qp_init_rd_atom: 128,
        max_ee_init_rd_atom: 0,
        atomic_cap: abi::ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        // No memory windows in the C ABI (the `alloc_mw` slot is empty:
        // `ibv_alloc_mw` fails with EOPNOTSUPP), so none are promised.
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 0,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 1 << 16,
        max_srq_wr: MAX_SRQ_WR as c_int,
        // `iwarp::MAX_SGE`.
        max_srq_sge: 4,
        max_pkeys: 0,
        local_ca_ack_delay: 0,
        phys_port_cnt: 1,
    };
    put(
        &mut a.fw_ver,
        concat!("iwarp-rs ", env!("CARGO_PKG_VERSION")),
    );
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { attr.write(a) };
    0
}

/// `ibv_query_port` (the exported function behind the header's inline
/// one; it writes the compat part of `struct ibv_port_attr`).
///
/// # Safety
/// `ctx` from `ibv_open_device`; `attr` null or writable for
/// `IbvPortAttr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut IbvContext,
    port: u8,
    attr: *mut IbvPortAttr,
) -> c_int {
    // SAFETY: by the caller's contract.
    let Some(c) = (unsafe { context(ctx) }) else {
        return libc::EINVAL;
    };
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let (up, mtu) = (c.dev.up(), abi::ibv_mtu(c.dev.mtu()));
    let a = IbvPortAttr {
        state: if up { abi::PORT_ACTIVE } else { abi::PORT_DOWN },
        max_mtu: mtu,
        active_mtu: mtu,
        gid_tbl_len: 1,
        port_cap_flags: 0,
        max_msg_sz: u32::MAX,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 1,
        active_speed: 1,
        // 5: LinkUp, 3: Disabled (IBTA port physical states).
        phys_state: if up { 5 } else { 3 },
        link_layer: abi::LINK_LAYER_ETHERNET,
        flags: 0,
    };
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { attr.write(a) };
    0
}

/// `ibv_query_gid`: GID 0 is the MAC in its first six octets (as Linux
/// siw's); there is no other.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `gid` null or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut IbvContext,
    port: u8,
    index: c_int,
    gid: *mut IbvGid,
) -> c_int {
    // SAFETY: by the caller's contract.
    let Some(c) = (unsafe { context(ctx) }) else {
        return -1;
    };
    if port != 1 || index != 0 || gid.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let mut g = IbvGid { raw: [0; 16] };
    g.raw[..6].copy_from_slice(&c.dev.mac);
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { gid.write(g) };
    0
}

/// `ibv_query_gid_type` (rdma-core's private ABI, which `ibv_devinfo`
/// links against): GID 0 is of type 0 (`IBV_GID_TYPE_SYSFS_IB_ROCE_V1`,
/// what an iWARP device's sysfs reports).
///
/// # Safety
/// `ctx` from `ibv_open_device`; `kind` null or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut IbvContext,
    port: u8,
    index: u32,
    kind: *mut c_int,
) -> c_int {
    // SAFETY: by the caller's contract.
    if unsafe { context(ctx) }.is_none() || port != 1 || index != 0 || kind.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { kind.write(0) };
    0
}

/// `ibv_wc_status_str`: rdma-core's words for a completion status.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const S: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| S.get(i))
        .unwrap_or(&c"unknown")
        .as_ptr()
}

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    match t {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    }
    .as_ptr()
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(s: c_int) -> *const c_char {
    match s {
        0 => c"PORT_NOP",
        1 => c"PORT_DOWN",
        2 => c"PORT_INIT",
        3 => c"PORT_ARMED",
        4 => c"PORT_ACTIVE",
        5 => c"PORT_ACTIVE_DEFER",
        _ => c"unknown",
    }
    .as_ptr()
}

/// `ibv_read_sysfs_file`: read `dir/file` into `buf` (at most `size`
/// octets, a trailing newline replaced by NUL); its length, or -1.
///
/// # Safety
/// `dir` and `file` are C strings; `buf` is writable for `size` octets.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: C strings by the caller's contract.
    let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
    let data = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
    };
    let n = data.len().min(size);
    // SAFETY: `buf` is writable for `size` ≥ n octets by the contract.
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
    out[..n].copy_from_slice(&data[..n]);
    if n > 0 && out[n - 1] == b'\n' {
        out[n - 1] = 0;
    } else if n < size {
        out[n] = 0;
    }
    n as c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_guids_follow_eui64() {
        use engine::parse_mac;
        assert_eq!(
            parse_mac("02:42:ac:1f:c8:0b\n"),
            Some([2, 0x42, 0xac, 0x1f, 0xc8, 0x0b])
        );
        assert_eq!(parse_mac("02:42:ac:1f:c8"), None);
        assert_eq!(parse_mac("02:42:ac:1f:c8:0b:00"), None);
        assert_eq!(parse_mac("02:42:ac:1f:c8:100"), None);
        let lo = engine::Link::Xdp { iface: "lo".into() };
        let d = Device {
            c: Device::new(&lo).expect("lo").c,
            link: Port::Iface("lo".into()),
            mac: [0x02, 0x42, 0xac, 0x1f, 0xc8, 0x0b],
        };
        assert_eq!(d.guid(), [0x00, 0x42, 0xac, 0xff, 0xfe, 0x1f, 0xc8, 0x0b]);
    }

    #[test]
    fn a_dpdk_device_reports_the_mac_and_mtu_of_its_port() {
        let link = engine::Link::Dpdk {
            devargs: "net_memif0,role=server".into(),
            mac: [0x02, 0, 10, 80, 0, 1],
            mtu: 9000,
            server_socket: None,
        };
        let d = Device::new(&link).expect("a DPDK device needs no interface");
        assert_eq!(d.mac, [0x02, 0, 10, 80, 0, 1]);
        assert_eq!((d.mtu(), d.up()), (9000, true));
        // SAFETY: `put` wrote a NUL-terminated string into the array.
        let name = unsafe { CStr::from_ptr(d.c.name.as_ptr()) };
        assert_eq!(name.to_str(), Ok("iwarp0"));
    }

    #[test]
    fn rdma_mtus_fit_the_ethernet_mtu() {
        assert_eq!(abi::ibv_mtu(1500), 3);
        assert_eq!(abi::ibv_mtu(9000), 5);
        assert_eq!(abi::ibv_mtu(2048), 4);
        assert_eq!(abi::ibv_mtu(576), 2);
    }
}
