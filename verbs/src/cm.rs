//! librdmacm over the stack's connection calls: event channels, CM ids,
//! address and route resolution, listen/accept/reject, connect,
//! disconnect, and the QP a CM id owns.
//!
//! An event channel's descriptor is an eventfd in semaphore mode: one
//! count per queued event, so `poll`/`epoll` see it readable while events
//! wait, `rdma_get_cm_event` blocks in `read` (or fails with `EAGAIN` when
//! the program made the descriptor non-blocking), as rdma-core's does.
//!
//! The stack's setup calls block (`Context::connect`, `Listener::get_request`,
//! `Qp::wait_disconnected`), so the CM runs them on its own threads, one
//! per listening id, per connecting id and per connection (which reports
//! its end as `RDMA_CM_EVENT_DISCONNECTED`), and turns their results into
//! events. Addresses need no resolution here: the stack resolves the
//! peer's MAC when it connects, so `ADDR_RESOLVED` and `ROUTE_RESOLVED`
//! are queued at once. IPv4 over `RDMA_PS_TCP` only.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::abi::{
    self, cm_event as ev, IbvContext, IbvPd, IbvQpInitAttr, RdmaAddrinfo, RdmaCmEvent, RdmaCmId,
    RdmaConnParam, RdmaEventChannel,
};
use crate::engine::engine;
use crate::objects::{self, errno_of, QpShared};
use crate::set_errno;

/// How long a setup (connect, accept) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a CM thread looks whether its id was destroyed.
const SLICE: Duration = Duration::from_millis(20);

/// `struct rdma_event_channel` and its queue.
#[repr(C)]
pub(crate) struct Channel {
    c: RdmaEventChannel,
    q: Arc<Queue>,
}

struct Queue {
    efd: OwnedFd,
    events: Mutex<VecDeque<usize>>,
}

impl Queue {
    fn push(&self, e: Box<Event>) {
        lock(&self.events).push_back(Box::into_raw(e) as usize);
        let one: u64 = 1;
        // SAFETY: an 8-octet write of a readable u64 to our eventfd.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// `struct rdma_cm_event` and the private data it points to.
#[repr(C)]
struct Event {
    c: RdmaCmEvent,
    private: Vec<u8>,
    /// The id this event was handed to the program for, until it is
    /// acknowledged (`rdma_get_cm_event` sets it; `rdma_destroy_id` waits
    /// for its count to fall to 0).
    held: Option<Arc<IdShared>>,
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some(s) = self.held.take() {
            let mut n = lock(&s.unacked);
            *n = n.saturating_sub(1);
            s.acked.notify_all();
        }
    }
}

// SAFETY: an event's pointers (its ids, its private data, which it owns)
// are for the program that receives it; the CM threads that make and
// queue events never follow them.
unsafe impl Send for Event {}

/// `struct rdma_cm_id` and the CM's state for it.
#[repr(C)]
pub(crate) struct CmId {
    c: RdmaCmId,
    s: Arc<IdShared>,
    /// A synchronous id's own channel (`rdma_create_id` with no channel,
    /// `rdma_create_ep`): `c.channel` points to it, and its calls wait for
    /// their event there before they return.
    own: Option<Box<Channel>>,
    /// A passive endpoint's QP attributes and PD (`rdma_create_ep`): each
    /// id `rdma_get_request` returns gets its QP made with them.
    ep_qp: Option<(IbvQpInitAttr, *mut IbvPd)>,
    /// What `rdma_create_qp` made for the id (freed with it).
    made: Made,
}

/// Objects the CM made for an id rather than the program.
#[derive(Default)]
struct Made {
    pd: bool,
    cqs: bool,
}

#[derive(Default)]
struct IdShared {
    /// Set by `rdma_destroy_id`: threads stop and queue nothing more.
    gone: AtomicBool,
    st: Mutex<IdState>,
    /// Events of this id `rdma_get_cm_event` handed out and the program
    /// has not acknowledged yet, and the wake-up of their acknowledgement.
    unacked: Mutex<u64>,
    acked: std::sync::Condvar,
}

#[derive(Default)]
struct IdState {
    src: Option<SocketAddrV4>,
    dst: Option<SocketAddrV4>,
    qp: Option<Arc<QpShared>>,
    /// A listening id's listener thread.
    listener: Option<JoinHandle<()>>,
    /// A connection request waiting for `rdma_accept`/`rdma_reject`.
    request: Option<iwarp::ConnectRequest>,
    threads: Vec<JoinHandle<()>>,
    /// The port `rdma_bind_addr` picked for the id (bound to port 0),
    /// given back when the id is destroyed.
    picked: Option<u16>,
}

/// Ports `rdma_bind_addr` picked for ids of this process that live.
static PICKED: Mutex<std::collections::BTreeSet<u16>> =
    Mutex::new(std::collections::BTreeSet::new());

/// A port for an id bound to port 0, as the kernel's CM picks one at bind
/// time (so that `rdma_get_src_port` names it before `rdma_listen`): one
/// of `from..=65535` that no other live id of this process picked,
/// starting from a point that differs between processes and calls.
/// `None`: the range is used up (`EADDRINUSE`, as the kernel's).
fn pick_port(from: u16) -> Option<u16> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = u32::from(u16::MAX - from) + 1;
    let start = (std::process::id().wrapping_mul(2_654_435_761))
        .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
    let mut picked = lock(&PICKED);
    (0..span)
        .map(|i| from + ((start.wrapping_add(i)) % span) as u16)
        .find(|p| !picked.contains(p))
        .inspect(|p| {
            picked.insert(*p);
        })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a refused connection request waits before it is made again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Refused connection requests of `rdma_connect` (`IWARP_CONNECT_RETRY_MS`)
/// waiting to be made again. A round, [`RETRY_PAUSE`] after the first of
/// them was refused, starts them one after the other in the order of their
/// `rdma_connect` calls (their tickets), as the first requests went out:
/// perftest's data connections, refused together while its server is not
/// listening yet, must reach the server in the order of the calls when
/// they are retried too (see `rdma_connect`), which threads retrying each
/// on its own did not keep.
struct Retries {
    /// By ticket: where to say "your turn" (with where to say "started").
    waiting: Mutex<
        std::collections::BTreeMap<
            u64,
            std::sync::mpsc::SyncSender<std::sync::mpsc::SyncSender<()>>,
        >,
    >,
    wake: std::sync::Condvar,
}

impl Retries {
    fn new() -> Retries {
        Retries {
            waiting: Mutex::new(std::collections::BTreeMap::new()),
            wake: std::sync::Condvar::new(),
        }
    }

    /// The process's, its round thread started on first use (`None`: no
    /// thread could be started).
    fn get() -> Option<&'static Retries> {
        static R: std::sync::OnceLock<Option<&'static Retries>> = std::sync::OnceLock::new();
        *R.get_or_init(|| {
            let r: &'static Retries = Box::leak(Box::new(Retries::new()));
            r.start().then_some(r)
        })
    }

    /// Start the round thread; whether it started.
    fn start(&'static self) -> bool {
        std::thread::Builder::new()
            .name("iwarp-cm-retry".into())
            .spawn(move || self.rounds())
            .is_ok()
    }

    /// Wait for the turn of the request with `ticket` in the next round,
    /// run `start` (which should only start the request: the round waits
    /// for it, up to a second) and return what it gave; `None` if no turn
    /// came within 10 s.
    fn in_turn<T>(&self, ticket: u64, start: impl FnOnce() -> T) -> Option<T> {
        let (go_tx, go_rx) = std::sync::mpsc::sync_channel(1);
        lock(&self.waiting).insert(ticket, go_tx);
        self.wake.notify_one();
        let started = go_rx.recv_timeout(Duration::from_secs(10)).ok()?;
        let r = start();
        let _ = started.send(());
        Some(r)
    }

    fn rounds(&self) {
        loop {
            {
                let mut w = lock(&self.waiting);
                while w.is_empty() {
                    w = self.wake.wait(w).unwrap_or_else(|p| p.into_inner());
                }
            }
            // The other requests refused with the first gather meanwhile.
            std::thread::sleep(RETRY_PAUSE);
            let round = std::mem::take(&mut *lock(&self.waiting));
            for (_, go) in round {
                let (started_tx, started_rx) = std::sync::mpsc::sync_channel(1);
                if go.send(started_tx).is_ok() {
                    let _ = started_rx.recv_timeout(Duration::from_secs(1));
                }
            }
        }
    }
}

/// Tickets of `rdma_connect` calls: the order [`Retries`] keeps.
static CONNECT_TICKETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// # Safety
/// `id` is null or from `rdma_create_id` (or a CONNECT_REQUEST event),
/// not destroyed.
unsafe fn id<'a>(id: *mut RdmaCmId) -> Option<&'a mut CmId> {
    // SAFETY: by the caller's contract (`repr(C)`, the C struct first).
    unsafe { id.cast::<CmId>().as_mut() }
}

/// The id's own PD, allocated on its context on first use (as rdma-core
/// does for `rdma_create_qp` and `rdma_create_srq` given no PD); null (and
/// errno set) if that fails. The id's destruction frees it.
fn own_pd(id: &mut CmId) -> *mut IbvPd {
    if id.c.pd.is_null() {
        // SAFETY: our context (the callers checked `verbs`).
        id.c.pd = unsafe { objects::ibv_alloc_pd(id.c.verbs) };
        if id.c.pd.is_null() {
            return std::ptr::null_mut();
        }
        id.made.pd = true;
    }
    id.c.pd
}

fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// The context every CM id uses: our device, opened once.
fn cm_context() -> *mut IbvContext {
    struct P(*mut IbvContext);
    // SAFETY: the context is never freed and its C part is read-only
    // after creation.
    unsafe impl Send for P {}
    // SAFETY: as above.
    unsafe impl Sync for P {}
    static CTX: std::sync::OnceLock<P> = std::sync::OnceLock::new();
    CTX.get_or_init(|| P(crate::open_first_device())).0
}

fn sin(a: SocketAddrV4) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a sockaddr_in fits in a sockaddr_storage.
    unsafe { std::ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin) };
    s
}

/// An IPv4 `sockaddr` (`EAFNOSUPPORT` for any other family).
///
/// # Safety
/// `a` is null or points to a `sockaddr` of its family's size.
unsafe fn v4(a: *const libc::sockaddr) -> Result<Option<SocketAddrV4>, c_int> {
    // SAFETY: by the contract.
    let Some(sa) = (unsafe { a.as_ref() }) else {
        return Ok(None);
    };
    if c_int::from(sa.sa_family) != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    // SAFETY: an AF_INET address is a sockaddr_in.
    let s = unsafe { a.cast::<libc::sockaddr_in>().read_unaligned() };
    Ok(Some(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )))
}

impl CmId {
    fn set_route(&mut self) {
        let st = lock(&self.s.st);
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        self.c.route.addr.src = sin(st.src.unwrap_or(any));
        self.c.route.addr.dst = sin(st.dst.unwrap_or(any));
    }

    fn event(&self, kind: c_int, status: c_int) -> Box<Event> {
        Box::new(Event {
            c: RdmaCmEvent {
                id: (self as *const CmId).cast_mut().cast(),
                listen_id: null_mut(),
                event: kind,
                status,
                conn: RdmaConnParam {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                },
                ud_tail: [0; 4],
            },
            private: Vec::new(),
            held: None,
        })
    }

    fn queue(&self) -> Option<Arc<Queue>> {
        // SAFETY: the channel outlives its ids (rdma-core's rule:
        // destroying a channel with ids on it is the program's error).
        unsafe { self.c.channel.cast::<Channel>().as_ref() }.map(|c| c.q.clone())
    }
}

/// An event with private data (the event points into its own copy).
fn with_private(mut e: Box<Event>, data: &[u8]) -> Box<Event> {
    e.private = data[..data.len().min(255)].to_vec();
    e.c.conn.private_data = e.private.as_ptr().cast();
    e.c.conn.private_data_len = e.private.len() as u8;
    e
}

/// Pointers cross to CM threads as addresses: the threads only put them
/// in events and never follow them.
#[derive(Clone, Copy)]
struct Addr(usize);

// ---- event channels ----

fn new_channel() -> Option<Box<Channel>> {
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor we just opened and own.
    let efd = unsafe { OwnedFd::from_raw_fd(fd) };
    Some(Box::new(Channel {
        c: RdmaEventChannel { fd },
        q: Arc::new(Queue {
            efd,
            events: Mutex::new(VecDeque::new()),
        }),
    }))
}

impl Drop for Queue {
    /// Unacknowledged events go with their channel.
    fn drop(&mut self) {
        for e in lock(&self.events).drain(..) {
            // SAFETY: queued events are boxes only the queue holds.
            drop(unsafe { Box::from_raw(e as *mut Event) });
        }
    }
}

/// Take the next event of `ch`, waiting for it unless the descriptor is
/// non-blocking.
fn next_event(ch: &Channel) -> Result<*mut Event, c_int> {
    loop {
        let mut n: u64 = 0;
        // SAFETY: an 8-octet read into a u64 from our eventfd (blocking
        // unless the program set O_NONBLOCK on it).
        let r = unsafe { libc::read(ch.c.fd, (&mut n as *mut u64).cast(), 8) };
        if r == 8 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err.raw_os_error().unwrap_or(libc::EIO));
        }
    }
    lock(&ch.q.events)
        .pop_front()
        .map(|e| e as *mut Event)
        .ok_or(libc::EAGAIN)
}

/// A synchronous id's call: wait for its event on the id's own channel;
/// `Ok` when it is `want`, else the errno the event's status names.
fn wait_for(id: &CmId, want: c_int) -> Result<Box<Event>, c_int> {
    let Some(ch) = id.own.as_deref() else {
        return Err(libc::EINVAL);
    };
    // SAFETY: a box `Queue::push` made, now ours.
    let e = unsafe { Box::from_raw(next_event(ch)?) };
    if e.c.event == want {
        Ok(e)
    } else if e.c.status < 0 {
        Err(-e.c.status)
    } else {
        Err(match e.c.event {
            ev::REJECTED => libc::ECONNREFUSED,
            ev::UNREACHABLE => libc::ETIMEDOUT,
            _ => libc::EIO,
        })
    }
}

/// `rdma_create_event_channel`.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut RdmaEventChannel {
    new_channel().map_or(null_mut(), |c| Box::into_raw(c).cast())
}

/// `rdma_destroy_event_channel`: unacknowledged events are freed.
///
/// # Safety
/// `ch` is null or from `rdma_create_event_channel`, not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut RdmaEventChannel) {
    if ch.is_null() {
        return;
    }
    // SAFETY: the allocation `rdma_create_event_channel` made (its drop
    // frees the events still queued).
    drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
}

/// `rdma_get_cm_event`.
///
/// # Safety
/// `ch` from `rdma_create_event_channel`; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut RdmaEventChannel,
    out: *mut *mut RdmaCmEvent,
) -> c_int {
    // SAFETY: by the contract.
    let Some(c) = (unsafe { ch.cast::<Channel>().as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if out.is_null() {
        return fail(libc::EINVAL);
    }
    let e = match next_event(c) {
        Ok(e) => e,
        Err(err) => return fail(err),
    };
    // SAFETY: a live event; the program reads it until it acks it.
    unsafe {
        if let Some(i) = id((*e).c.id) {
            i.c.event = e.cast();
            *lock(&i.s.unacked) += 1;
            (*e).held = Some(i.s.clone());
        }
        *out = e.cast();
    }
    0
}

/// `rdma_ack_cm_event`: frees the event.
///
/// # Safety
/// `e` from `rdma_get_cm_event`, not acknowledged before.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(e: *mut RdmaCmEvent) -> c_int {
    if e.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the box `Queue::push` made.
    drop(unsafe { Box::from_raw(e.cast::<Event>()) });
    0
}

/// `rdma_event_str`.
#[no_mangle]
pub extern "C" fn rdma_event_str(kind: c_int) -> *const c_char {
    let s: &'static CStr = match kind {
        ev::ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        ev::ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        ev::ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        ev::ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        ev::CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        ev::CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        ev::CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        ev::UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        ev::REJECTED => c"RDMA_CM_EVENT_REJECTED",
        ev::ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        ev::DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        ev::DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        ev::MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        ev::MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        ev::ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        ev::TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

// ---- ids ----

fn new_id(channel: *mut RdmaEventChannel, context: *mut c_void) -> Box<CmId> {
    // SAFETY: all-zero is a valid `rdma_cm_id` (null pointers, zero
    // numbers, zeroed addresses).
    let mut c: RdmaCmId = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = abi::PS_TCP;
    c.port_num = 1;
    c.qp_type = abi::QPT_RC;
    Box::new(CmId {
        c,
        s: Arc::new(IdShared::default()),
        own: None,
        ep_qp: None,
        made: Made::default(),
    })
}

/// A synchronous id: its own channel.
fn new_sync_id(context: *mut c_void) -> Option<Box<CmId>> {
    let mut own = new_channel()?;
    let mut id = new_id(&mut own.c, context);
    id.own = Some(own);
    Some(id)
}

/// `rdma_create_id`: `RDMA_PS_TCP`; with no channel the id is synchronous
/// (its calls return once their event has come, as rdma-core's).
///
/// # Safety
/// `ch` from `rdma_create_event_channel`; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut RdmaEventChannel,
    out: *mut *mut RdmaCmId,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if out.is_null() {
        return fail(libc::EINVAL);
    }
    if ps != abi::PS_TCP {
        return fail(libc::EPROTONOSUPPORT);
    }
    let id = if ch.is_null() {
        match new_sync_id(context) {
            Some(id) => id,
            None => return -1,
        }
    } else {
        new_id(ch, context)
    };
    // SAFETY: writable by the contract.
    unsafe { *out = Box::into_raw(id).cast() };
    0
}

/// `rdma_destroy_id`: stops the id's threads; an accepted or connected
/// QP stays with the program (`rdma_destroy_qp`).
///
/// # Safety
/// `i` from `rdma_create_id` or a CONNECT_REQUEST event, not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(i: *mut RdmaCmId) -> c_int {
    if i.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the allocation `new_id` made.
    let b = unsafe { Box::from_raw(i.cast::<CmId>()) };
    b.s.gone.store(true, Ordering::Release);
    // As rdma-core's: wait until the program has acknowledged every event
    // of the id it was handed (a program's CM thread acknowledges the
    // DISCONNECTED event its main thread waits for, then goes back to
    // `rdma_get_cm_event`; returning before the acknowledgement lets the
    // main thread destroy the channel under it). Bounded, so a program
    // that destroys an id with an event it never acknowledges is held up
    // two seconds, not forever.
    {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut n = lock(&b.s.unacked);
        while *n > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            n = match b.s.acked.wait_timeout(n, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
    let (listener, threads, request, picked) = {
        let mut st = lock(&b.s.st);
        (
            st.listener.take(),
            std::mem::take(&mut st.threads),
            st.request.take(),
            st.picked.take(),
        )
    };
    // An unanswered request is rejected (its drop does it).
    drop(request);
    // The listener thread owns the listening port: wait for it to let go,
    // so that the port can be listened on again at once.
    if let Some(t) = listener {
        let _ = t.join();
    }
    if let Some(p) = picked {
        lock(&PICKED).remove(&p);
    }
    drop(threads);
    // SAFETY: objects the CM made for this id, which the program used
    // through the id only.
    unsafe { free_made(&b) };
    0
}

/// Free what `rdma_create_qp` made for `id` (its CQs and their channels,
/// its PD).
///
/// # Safety
/// The objects are no longer in use (their QP destroyed).
unsafe fn free_made(id: &CmId) {
    if id.made.cqs {
        // SAFETY: by the contract; made by `rdma_create_qp`.
        unsafe {
            for cq in [id.c.send_cq, id.c.recv_cq] {
                if !cq.is_null() {
                    objects::ibv_destroy_cq(cq);
                }
            }
            for ch in [id.c.send_cq_channel, id.c.recv_cq_channel] {
                if !ch.is_null() {
                    objects::ibv_destroy_comp_channel(ch);
                }
            }
        }
    }
    if id.made.pd && !id.c.pd.is_null() {
        // SAFETY: by the contract; made by `rdma_create_qp`.
        unsafe { objects::ibv_dealloc_pd(id.c.pd) };
    }
}

/// Whether one of the kernel's interfaces in this namespace has `ip`
/// (the loopback's 127.0.0.1 among them).
fn kernel_has(ip: Ipv4Addr) -> bool {
    let mut list: *mut libc::ifaddrs = null_mut();
    // SAFETY: `list` is writable; freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return false;
    }
    let mut found = false;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: an entry of the list getifaddrs made.
        let a = unsafe { (*cur).ifa_addr };
        // SAFETY: a `sockaddr` of the entry (or null), read as IPv4 only
        // when its family says so.
        if let Ok(Some(s)) = unsafe { v4(a) } {
            found |= *s.ip() == ip;
        }
        // SAFETY: as above.
        cur = unsafe { (*cur).ifa_next };
    }
    // SAFETY: the list getifaddrs made.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// `rdma_bind_addr`: our address or the wildcard, IPv4; port 0 picks a
/// free port of the stack's ephemeral range now, as the kernel's CM does
/// (`rdma_get_src_port` names it, for the program to tell its peer).
/// Another address fails as the kernel's CM fails it: `ENODEV` when a
/// kernel interface has it (no RDMA device there: the loopback's
/// 127.0.0.1, which libfabric's verbs provider binds to probe "localhost"),
/// `EADDRNOTAVAIL` when none has.
///
/// # Safety
/// `i` a live id; `addr` a `sockaddr`.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(i: *mut RdmaCmId, addr: *mut libc::sockaddr) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: by the contract.
    let a = match unsafe { v4(addr) } {
        Ok(Some(a)) => a,
        Ok(None) => return fail(libc::EINVAL),
        Err(e) => return fail(e),
    };
    let e = match engine() {
        Ok(e) => e,
        Err(_) => return fail(libc::ENODEV),
    };
    if !a.ip().is_unspecified() && *a.ip() != e.ip {
        return fail(if kernel_has(*a.ip()) {
            libc::ENODEV
        } else {
            libc::EADDRNOTAVAIL
        });
    }
    let mut st = lock(&id.s.st);
    if st.src.is_some() {
        // Bound already (or resolved): the kernel's CM refuses a second
        // bind.
        return fail(libc::EINVAL);
    }
    let port = if a.port() == 0 {
        let Some(p) = pick_port(e.ephemeral_from()) else {
            return fail(libc::EADDRINUSE);
        };
        st.picked = Some(p);
        p
    } else {
        a.port()
    };
    st.src = Some(SocketAddrV4::new(e.ip, port));
    drop(st);
    id.c.verbs = cm_context();
    id.set_route();
    0
}

/// `rdma_resolve_addr`: queues `ADDR_RESOLVED` (the stack resolves the
/// MAC when it connects).
///
/// # Safety
/// `i` a live id; `src` null or a `sockaddr`; `dst` a `sockaddr`.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    i: *mut RdmaCmId,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: by the contract.
    let (s, d) = match (unsafe { v4(src) }, unsafe { v4(dst) }) {
        (Ok(s), Ok(Some(d))) => (s, d),
        (Err(e), _) | (_, Err(e)) => return fail(e),
        _ => return fail(libc::EINVAL),
    };
    let e = match engine() {
        Ok(e) => e,
        Err(_) => return fail(libc::ENODEV),
    };
    if let Some(s) = s {
        if !s.ip().is_unspecified() && *s.ip() != e.ip {
            return fail(libc::EADDRNOTAVAIL);
        }
    }
    {
        let mut st = lock(&id.s.st);
        st.src = Some(SocketAddrV4::new(e.ip, s.map_or(0, |s| s.port())));
        st.dst = Some(d);
    }
    id.c.verbs = cm_context();
    id.set_route();
    let Some(q) = id.queue() else {
        return fail(libc::EINVAL);
    };
    q.push(id.event(ev::ADDR_RESOLVED, 0));
    if id.own.is_some() {
        if let Err(e) = wait_for(id, ev::ADDR_RESOLVED) {
            return fail(e);
        }
    }
    0
}

/// `rdma_resolve_route`: queues `ROUTE_RESOLVED`.
///
/// # Safety
/// `i` a live id with a resolved address.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(i: *mut RdmaCmId, _timeout_ms: c_int) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    if lock(&id.s.st).dst.is_none() {
        return fail(libc::EINVAL);
    }
    let Some(q) = id.queue() else {
        return fail(libc::EINVAL);
    };
    q.push(id.event(ev::ROUTE_RESOLVED, 0));
    if id.own.is_some() {
        if let Err(e) = wait_for(id, ev::ROUTE_RESOLVED) {
            return fail(e);
        }
    }
    0
}

/// `rdma_set_option`: the options that mean something for a QP over TCP
/// are none; TOS, reuse-address and the ACK timeout are accepted and
/// ignored (TCP's own timers govern), others are `ENOSYS` as rdma-core's
/// for an unknown option.
///
/// # Safety
/// `i` a live id.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    i: *mut RdmaCmId,
    level: c_int,
    name: c_int,
    _val: *mut c_void,
    _len: usize,
) -> c_int {
    if i.is_null() {
        return fail(libc::EINVAL);
    }
    // RDMA_OPTION_ID: TOS 0, REUSEADDR 1, AFONLY 2, ACK_TIMEOUT 3.
    match (level, name) {
        (0, 0..=3) => 0,
        _ => fail(libc::ENOSYS),
    }
}

/// `rdma_listen`.
///
/// # Safety
/// `i` a live id bound with `rdma_bind_addr`.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(i: *mut RdmaCmId, _backlog: c_int) -> c_int {
    // SAFETY: by the contract.
    let Some(lid) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    let Some(src) = lock(&lid.s.st).src else {
        return fail(libc::EINVAL);
    };
    let e = match engine() {
        Ok(e) => e,
        Err(_) => return fail(libc::ENODEV),
    };
    if !e.port_is_ours(src.port()) {
        // On an address shared with the kernel, TCP to this port goes to
        // the kernel (IWARP_LISTEN_PORTS lists ours): no peer could reach
        // a listener here.
        return fail(libc::EADDRNOTAVAIL);
    }
    // The PD of an accepted QP is the one its program creates it in
    // (`rdma_accept`); the listener's is a placeholder.
    let pd = match e.ctx.alloc_pd() {
        Ok(pd) => pd,
        Err(err) => return fail(errno_of(&err)),
    };
    // Accepted QPs get the largest queues a QP may ask for
    // (`max_qp_wr`): the stack sizes them when the peer's TCP handshake
    // completes, before the program's QP exists.
    let mut lopts = iwarp::ListenOptions::new(&pd);
    lopts.mpa = e.mpa.clone();
    // (twice over for the send queue, where a Write with Immediate takes
    // two entries: see `rdma_connect`).
    lopts.sq_depth = 2 * crate::MAX_QP_WR;
    lopts.rq_depth = crate::MAX_QP_WR;
    let listener = match e.ctx.listen(src.port(), &lopts) {
        Ok(l) => l,
        Err(err) => return fail(errno_of(&err)),
    };
    let Some(q) = lid.queue() else {
        return fail(libc::EINVAL);
    };
    let shared = lid.s.clone();
    let (chan, ctx, lctx) = (
        Addr(lid.c.channel as usize),
        Addr(cm_context() as usize),
        Addr(lid.c.context as usize),
    );
    let lptr = Addr(i as usize);
    let sync = lid.own.is_some();
    let t = std::thread::Builder::new()
        .name("iwarp-cm-listen".into())
        .spawn(move || {
            let _pd = pd;
            while !shared.gone.load(Ordering::Acquire) {
                let req = match listener.get_request(SLICE) {
                    Ok(r) => r,
                    Err(iwarp::Error::TimedOut) => continue,
                    Err(_) => break,
                };
                let child = if sync {
                    new_sync_id(lctx.0 as *mut c_void)
                } else {
                    Some(new_id(
                        chan.0 as *mut RdmaEventChannel,
                        lctx.0 as *mut c_void,
                    ))
                };
                let Some(mut child) = child else {
                    // No descriptor for its channel: the request is
                    // rejected (dropping it does).
                    continue;
                };
                child.c.verbs = ctx.0 as *mut IbvContext;
                {
                    let mut st = lock(&child.s.st);
                    st.src = Some(src);
                    st.dst = Some(SocketAddrV4::new(req.remote(), 0));
                }
                child.set_route();
                let peer = req.peer().clone();
                lock(&child.s.st).request = Some(req);
                let mut e = with_private(child.event(ev::CONNECT_REQUEST, 0), &peer.private_data);
                // iWARP's mapping (as Linux iw_cm): what the peer may read
                // from us is its ORD, what we may read from it its IRD.
                e.c.conn.responder_resources = peer.ord.unwrap_or(0).min(255) as u8;
                e.c.conn.initiator_depth = peer.ird.unwrap_or(0).min(255) as u8;
                e.c.listen_id = lptr.0 as *mut RdmaCmId;
                let cptr = Box::into_raw(child);
                // SAFETY: just made; the event names it.
                e.c.id = cptr.cast();
                q.push(e);
            }
        });
    match t {
        Ok(t) => {
            lock(&lid.s.st).listener = Some(t);
            0
        }
        Err(_) => fail(libc::ENOMEM),
    }
}

/// `rdma_create_qp`: a QP for the id's connection (CQs made for it when
/// the attributes name none, as rdma-core does).
///
/// # Safety
/// `i` a live id with a context; `pd` null or from `ibv_alloc_pd`;
/// `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    i: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: by the contract.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    if id.c.verbs.is_null() {
        return fail(libc::EINVAL);
    }
    let pd = if pd.is_null() { own_pd(id) } else { pd };
    if pd.is_null() {
        return -1;
    }
    // The id's SRQ (`rdma_create_srq`) when the attributes name none, as
    // rdma-core's `rdma_create_qp_ex`.
    if a.srq.is_null() {
        a.srq = id.c.srq;
    }
    // A receive CQ made for a QP on an SRQ takes the SRQ's depth.
    // SAFETY: null or an SRQ from `ibv_create_srq` by the contract.
    let recv_depth = match unsafe { a.srq.cast::<objects::Srq>().as_ref() } {
        Some(s) => s.srq.capacity() as u32,
        None => a.cap.max_recv_wr,
    };
    // CQs of the id's own when the program gives none.
    for (want, depth, cq, ch) in [
        (
            a.send_cq.is_null(),
            a.cap.max_send_wr,
            &mut id.c.send_cq,
            &mut id.c.send_cq_channel,
        ),
        (
            a.recv_cq.is_null(),
            recv_depth,
            &mut id.c.recv_cq,
            &mut id.c.recv_cq_channel,
        ),
    ] {
        if want && cq.is_null() {
            // SAFETY: our context.
            *ch = unsafe { objects::ibv_create_comp_channel(id.c.verbs) };
            // SAFETY: our context and the channel just made.
            *cq = unsafe {
                objects::ibv_create_cq(id.c.verbs, depth.max(1) as c_int, null_mut(), *ch, 0)
            };
            if cq.is_null() {
                return -1;
            }
            id.made.cqs = true;
        }
    }
    if a.send_cq.is_null() {
        a.send_cq = id.c.send_cq;
    }
    if a.recv_cq.is_null() {
        a.recv_cq = id.c.recv_cq;
    }
    // The id's type where the program leaves it 0 (rdma-core's examples
    // zero the attributes and rely on the id's port space).
    if a.qp_type == 0 {
        a.qp_type = id.c.qp_type;
    }
    // SAFETY: by the contract.
    let qp = unsafe { objects::ibv_create_qp(pd, attr) };
    if qp.is_null() {
        return -1;
    }
    id.c.qp = qp;
    id.c.pd = pd;
    // SAFETY: just made.
    let shared = unsafe { objects::qp(qp) }.map(|q| q.q.clone());
    lock(&id.s.st).qp = shared;
    0
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `i` a live id whose QP the program no longer uses.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(i: *mut RdmaCmId) {
    // SAFETY: by the contract.
    if let Some(id) = unsafe { id(i) } {
        lock(&id.s.st).qp = None;
        if !id.c.qp.is_null() {
            // SAFETY: the QP `rdma_create_qp` made.
            unsafe { objects::ibv_destroy_qp(id.c.qp) };
            id.c.qp = null_mut();
        }
    }
}

/// The line a connection that ended by a Terminate leaves on standard
/// error (`None` for any other end): the program may not be listening
/// for its CM events (perftest does not while it measures), and a peer
/// whose Send found no receive buffer, which iWARP does not retry (RFC
/// 5041 §7.1, §7.2), would otherwise only stop.
fn terminate_note(qp_num: u32, uses_srq: bool, cause: iwarp::DisconnectCause) -> Option<String> {
    use iwarp::{DisconnectCause as D, TermCode};
    let why = match cause {
        D::TerminateSent(c) if c == TermCode::DDP_U_NO_BUFFER => {
            if uses_srq {
                ": a Send arrived while its shared receive queue was empty"
            } else {
                ": a Send arrived while it had no receive posted"
            }
        }
        D::TerminateReceived(c) if c == TermCode::DDP_U_NO_BUFFER => {
            ": the peer had no receive buffer posted for a Send"
        }
        D::TerminateSent(_) | D::TerminateReceived(_) => "",
        _ => return None,
    };
    let retry = if why.is_empty() {
        ""
    } else {
        " (iWARP has no receiver-not-ready retry)"
    };
    Some(format!(
        "iwarp verbs: QP {qp_num:#x} ended, {cause}{why}{retry}"
    ))
}

/// Watch a connection until it ends, then queue `DISCONNECTED` (unless
/// the id is gone). A Terminate, sent or received, ends the stream (RFC
/// 5040 §5.4: nothing more may be sent after one), and §6.2.1 wants the
/// LLP stream torn down, gracefully so that the Terminate arrives: the
/// stack leaves that to its user, so the watch closes the connection
/// then, as a kernel RNIC's connection manager does (both ends get
/// `DISCONNECTED`; the QP's work completes or is flushed), and says why
/// on standard error ([`terminate_note`]).
fn watch(
    q: Arc<Queue>,
    s: Arc<IdShared>,
    qp: Arc<QpShared>,
    ev: Box<Event>,
) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("iwarp-cm-conn".into())
        .spawn(move || {
            let Some(conn) = qp.conn.get() else { return };
            let mut terminated = false;
            while !s.gone.load(Ordering::Acquire) {
                // A slice without the end is `TimedOut`; the end is `Ok`
                // (with its cause, or none recorded).
                match conn.wait_disconnected(Duration::from_millis(100)) {
                    Err(iwarp::Error::TimedOut) => {
                        // The stream's events (nothing else reads them).
                        while let Some(e) = conn.poll_event() {
                            let cause = match e {
                                iwarp::QpEvent::TerminateSent(t) => {
                                    Some(iwarp::DisconnectCause::TerminateSent(t.code))
                                }
                                iwarp::QpEvent::TerminateReceived(t) => {
                                    Some(iwarp::DisconnectCause::TerminateReceived(t.code))
                                }
                                iwarp::QpEvent::MalformedTerminate(_) => None,
                                _ => continue,
                            };
                            if terminated {
                                continue;
                            }
                            terminated = true;
                            match cause.and_then(|c| terminate_note(qp.qp_num, qp.srq.is_some(), c))
                            {
                                Some(note) => eprintln!("{note}"),
                                None => eprintln!("iwarp verbs: QP {:#x} ended, {e}", qp.qp_num),
                            }
                            let _ = conn.disconnect();
                        }
                    }
                    end => {
                        if !terminated {
                            if let Some(note) = end
                                .ok()
                                .flatten()
                                .and_then(|c| terminate_note(qp.qp_num, qp.srq.is_some(), c))
                            {
                                eprintln!("{note}");
                            }
                        }
                        qp.state.store(abi::qps::ERR, Ordering::Release);
                        if !s.gone.load(Ordering::Acquire) {
                            q.push(ev);
                        }
                        return;
                    }
                }
            }
        })
        .ok()
}

fn mpa_of(base: &iwarp::MpaConfig, p: Option<&RdmaConnParam>) -> iwarp::MpaConfig {
    let mut m = base.clone();
    if let Some(p) = p {
        m.ird = u16::from(p.responder_resources);
        m.ord = u16::from(p.initiator_depth);
        if !p.private_data.is_null() && p.private_data_len > 0 {
            // SAFETY: `private_data_len` readable octets by the contract.
            m.private_data = unsafe {
                std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
            }
            .to_vec();
        }
    }
    m
}

/// `rdma_connect`: the connection is made on a CM thread, which queues
/// `ESTABLISHED` (with the peer's private data), `REJECTED`,
/// `UNREACHABLE` or `CONNECT_ERROR`.
///
/// # Safety
/// `i` a live id with a resolved route and a QP; `param` null or
/// readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(i: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    let (dst, qp) = {
        let st = lock(&id.s.st);
        (st.dst, st.qp.clone())
    };
    let (Some(dst), Some(qp)) = (dst, qp) else {
        return fail(libc::EINVAL);
    };
    if qp.conn.get().is_some() {
        return fail(libc::EISCONN);
    }
    let Ok(e) = engine() else {
        return fail(libc::ENODEV);
    };
    let Some(q) = id.queue() else {
        return fail(libc::EINVAL);
    };
    // SAFETY: by the contract.
    let mpa = mpa_of(&e.mpa, unsafe { param.as_ref() });
    let mut opts = iwarp::ConnectOptions::new(&qp.pd, &qp.send_cq);
    opts.recv_cq = Some(qp.recv_cq.clone());
    opts.srq = qp.srq.clone();
    opts.mpa = mpa;
    // The stack queues an RDMA Write with Immediate as two send-queue
    // entries (the Write, then the Immediate Data message): room for
    // `max_send_wr` of them whatever their kind (qperf's
    // rc_rdma_write_lat posts them one at a time on a send queue of 1).
    // An accepted QP's queues are `MAX_QP_WR` deep already (`rdma_listen`).
    opts.sq_depth = (qp.cap.max_send_wr as usize).max(1) * 2;
    opts.rq_depth = qp.cap.max_recv_wr as usize;
    opts.timeout = SETUP_TIMEOUT;
    let ctx = e.ctx.clone();
    let retry = e.connect_retry;
    let s = id.s.clone();
    let (est, dis, err_ev) = (
        id.event(ev::ESTABLISHED, 0),
        id.event(ev::DISCONNECTED, 0),
        id.event(ev::CONNECT_ERROR, 0),
    );
    // The connection request goes out here, in the caller's thread, so
    // that requests leave in the order of the calls, as a kernel RNIC's
    // do: perftest's `-q N` matches its queue pairs to the server's by the
    // order the server accepts them (its SEND tests write receive credits
    // into the peer's slot of that index; out of order, a credit lands in
    // another queue pair's slot and the test stalls). The wait for the
    // outcome, and retries of a refused request, go to a thread.
    // A refused request made again ([`Retries`]) keeps that order too.
    opts.recvs = qp.take_early();
    let ticket = CONNECT_TICKETS.fetch_add(1, Ordering::Relaxed);
    let first = ctx.connect_start(dst, &opts);
    // A refused request is made again on the loop of the first attempt,
    // so that the queue pairs stay spread over the loops as their order
    // placed them (perftest's `-q N` on a context of several loops).
    opts.loop_index = first.as_ref().ok().map(iwarp::Connecting::loop_index);
    let t = std::thread::Builder::new()
        .name("iwarp-cm-connect".into())
        .spawn(move || {
            let deadline = std::time::Instant::now() + retry;
            let mut r = first.and_then(iwarp::Connecting::finish);
            while matches!(r, Err(iwarp::Error::ConnectionRefused))
                && std::time::Instant::now() < deadline
                && !s.gone.load(Ordering::Acquire)
            {
                r = match Retries::get() {
                    Some(rounds) => {
                        match rounds.in_turn(ticket, || ctx.connect_start(dst, &opts)) {
                            Some(started) => started.and_then(iwarp::Connecting::finish),
                            None => continue,
                        }
                    }
                    None => {
                        std::thread::sleep(RETRY_PAUSE);
                        ctx.connect(dst, &opts)
                    }
                };
            }
            if s.gone.load(Ordering::Acquire) {
                return;
            }
            match r.and_then(|conn| {
                let pd = conn.negotiated().peer_private_data.clone();
                qp.attach(conn).map(|()| pd)
            }) {
                Ok(private) => {
                    q.push(with_private(est, &private));
                    if let Some(t) = watch(q, s.clone(), qp, dis) {
                        lock(&s.st).threads.push(t);
                    }
                }
                Err(err) => {
                    let mut e = err_ev;
                    e.c.status = -errno_of(&err);
                    e.c.event = match &err {
                        iwarp::Error::Rejected { private_data } => {
                            e = with_private(e, private_data);
                            ev::REJECTED
                        }
                        iwarp::Error::ConnectionRefused => ev::REJECTED,
                        iwarp::Error::Unreachable | iwarp::Error::TimedOut => ev::UNREACHABLE,
                        _ => ev::CONNECT_ERROR,
                    };
                    qp.state.store(abi::qps::ERR, Ordering::Release);
                    q.push(e);
                }
            }
        });
    match t {
        Ok(t) => lock(&id.s.st).threads.push(t),
        Err(_) => return fail(libc::ENOMEM),
    }
    if id.own.is_some() {
        if let Err(e) = wait_for(id, ev::ESTABLISHED) {
            return fail(e);
        }
    }
    0
}

/// `rdma_accept`: answers the request with the id's QP; returns once the
/// connection is in full operation, and queues `ESTABLISHED`.
///
/// # Safety
/// `i` an id from a CONNECT_REQUEST event, with a QP; `param` null or
/// readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(i: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    let (req, qp) = {
        let mut st = lock(&id.s.st);
        if st.qp.is_none() {
            return fail(libc::EINVAL);
        }
        (st.request.take(), st.qp.clone())
    };
    let (Some(req), Some(qp)) = (req, qp) else {
        return fail(libc::EINVAL);
    };
    let Some(q) = id.queue() else {
        return fail(libc::EINVAL);
    };
    for (wr_id, sgl) in qp.take_early() {
        if let Err(e) = req.post_recv_list(wr_id, sgl) {
            return fail(errno_of(&e));
        }
    }
    let Ok(e) = engine() else {
        return fail(libc::ENODEV);
    };
    // SAFETY: by the contract.
    let mpa = mpa_of(&e.mpa, unsafe { param.as_ref() });
    let opts = iwarp::AcceptOptions {
        private_data: mpa.private_data,
        ird: mpa.ird,
        ord: mpa.ord,
        timeout: SETUP_TIMEOUT,
        recv_cq: Some(qp.recv_cq.clone()),
        pd: Some(qp.pd.clone()),
        srq: qp.srq.clone(),
    };
    let conn = match req.accept(&opts, &qp.send_cq) {
        Ok(c) => c,
        Err(e) => {
            qp.state.store(abi::qps::ERR, Ordering::Release);
            return fail(errno_of(&e));
        }
    };
    if let Err(e) = qp.attach(conn) {
        return fail(errno_of(&e));
    }
    q.push(id.event(ev::ESTABLISHED, 0));
    if let Some(t) = watch(q, id.s.clone(), qp, id.event(ev::DISCONNECTED, 0)) {
        lock(&id.s.st).threads.push(t);
    }
    if id.own.is_some() {
        if let Err(e) = wait_for(id, ev::ESTABLISHED) {
            return fail(e);
        }
    }
    0
}

/// `rdma_get_request`: the next connection request on a synchronous
/// listening id, as a new id (with its QP made from the attributes given
/// to `rdma_create_ep`, if any).
///
/// # Safety
/// `listen` a live synchronous id that listens; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(listen: *mut RdmaCmId, out: *mut *mut RdmaCmId) -> c_int {
    // SAFETY: by the contract.
    let Some(lid) = (unsafe { id(listen) }) else {
        return fail(libc::EINVAL);
    };
    if out.is_null() || lid.own.is_none() {
        return fail(libc::EINVAL);
    }
    let e = match wait_for(lid, ev::CONNECT_REQUEST) {
        Ok(e) => e,
        Err(err) => return fail(err),
    };
    let new = e.c.id;
    if let Some((mut attr, pd)) = lid.ep_qp {
        // SAFETY: the id the listener thread made; the program's PD (or
        // none) and attributes as `rdma_create_ep` was given them.
        if unsafe { rdma_create_qp(new, pd, &mut attr) } != 0 {
            let err = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            // SAFETY: ours, not yet handed out.
            unsafe { rdma_destroy_id(new) };
            return fail(err);
        }
    }
    // SAFETY: writable by the contract.
    unsafe { *out = new };
    0
}

/// `rdma_create_ep`: a synchronous id for `res` — bound (passive: the
/// QP attributes are kept for each request's id) or resolved and with
/// its QP (active).
///
/// # Safety
/// `out` writable; `res` from `rdma_getaddrinfo`; `pd` null or from
/// `ibv_alloc_pd`; `attr` null or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut RdmaCmId,
    res: *mut RdmaAddrinfo,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> c_int {
    // SAFETY: by the contract.
    let Some(r) = (unsafe { res.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if out.is_null() {
        return fail(libc::EINVAL);
    }
    let Some(id) = new_sync_id(null_mut()) else {
        return -1;
    };
    let p: *mut RdmaCmId = Box::into_raw(id).cast();
    // SAFETY: the id just made; addresses from `rdma_getaddrinfo`.
    let rc = unsafe {
        if r.ai_flags & abi::RAI_PASSIVE != 0 {
            let rc = rdma_bind_addr(p, r.ai_src_addr);
            if rc == 0 {
                if let Some(a) = attr.as_ref() {
                    (*p.cast::<CmId>()).ep_qp = Some((*a, pd));
                }
            }
            rc
        } else {
            let mut rc = rdma_resolve_addr(p, r.ai_src_addr, r.ai_dst_addr, 2000);
            if rc == 0 {
                rc = rdma_resolve_route(p, 2000);
            }
            if rc == 0 && !attr.is_null() {
                rc = rdma_create_qp(p, pd, attr);
            }
            rc
        }
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        // SAFETY: ours, not handed out.
        unsafe { rdma_destroy_ep(p) };
        return fail(err);
    }
    // SAFETY: writable by the contract.
    unsafe { *out = p };
    0
}

/// `rdma_destroy_ep`: the id's QP, what the CM made for it, the id.
///
/// # Safety
/// `i` null or a live id.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(i: *mut RdmaCmId) {
    if i.is_null() {
        return;
    }
    // SAFETY: by the contract.
    unsafe {
        rdma_destroy_qp(i);
        rdma_destroy_srq(i);
        rdma_destroy_id(i);
    }
}

/// `rdma_create_srq`: an SRQ for the id (`id->srq`), in `pd` or else the
/// id's PD (one made for it, as `rdma_create_qp` makes, when it has
/// none); `rdma_create_qp` on the id then uses it when its attributes
/// name no SRQ. `attr` is written back as `ibv_create_srq` does.
///
/// # Safety
/// `i` a live id with a context; `pd` null or from `ibv_alloc_pd`;
/// `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    i: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut abi::IbvSrqInitAttr,
) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    if id.c.verbs.is_null() || attr.is_null() || !id.c.srq.is_null() {
        return fail(libc::EINVAL);
    }
    let pd = if pd.is_null() { own_pd(id) } else { pd };
    if pd.is_null() {
        return -1;
    }
    // SAFETY: by the contract.
    let srq = unsafe { objects::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return -1;
    }
    id.c.srq = srq.cast();
    id.c.pd = pd;
    0
}

/// `rdma_destroy_srq`: the id's SRQ (`EBUSY` from `ibv_destroy_srq`
/// while a QP uses it leaves it in place, as rdma-core's returns nothing).
///
/// # Safety
/// `i` null or a live id.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(i: *mut RdmaCmId) {
    // SAFETY: by the contract.
    if let Some(id) = unsafe { id(i) } {
        if !id.c.srq.is_null() {
            // SAFETY: the SRQ `rdma_create_srq` made.
            if unsafe { objects::ibv_destroy_srq(id.c.srq.cast()) } == 0 {
                id.c.srq = null_mut();
            }
        }
    }
}

/// `rdma_get_devices`: the contexts of our devices (one), NULL-terminated;
/// `rdma_free_devices` frees the list.
///
/// # Safety
/// `num` null or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut IbvContext {
    let ctx = cm_context();
    let list: Vec<*mut IbvContext> = if ctx.is_null() { vec![] } else { vec![ctx] };
    if !num.is_null() {
        // SAFETY: writable by the contract.
        unsafe { *num = list.len() as c_int };
    }
    let mut list = list;
    list.push(null_mut());
    Box::into_raw(list.into_boxed_slice()).cast()
}

/// `rdma_free_devices`.
///
/// # Safety
/// `list` from `rdma_get_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut IbvContext) {
    // SAFETY: by the caller's contract, the list `rdma_get_devices` made.
    unsafe { crate::free_null_terminated(list) }
}

/// `rdma_get_src_port`: the id's local port (network order).
///
/// # Safety
/// `i` a live id.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(i: *mut RdmaCmId) -> u16 {
    // SAFETY: by the contract.
    unsafe { id(i) }.map_or(0, |id| lock(&id.s.st).src.map_or(0, |a| a.port().to_be()))
}

/// `rdma_get_dst_port`: the peer's port (network order).
///
/// # Safety
/// `i` a live id.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(i: *mut RdmaCmId) -> u16 {
    // SAFETY: by the contract.
    unsafe { id(i) }.map_or(0, |id| lock(&id.s.st).dst.map_or(0, |a| a.port().to_be()))
}

/// `rdma_reject`.
///
/// # Safety
/// `i` an id from a CONNECT_REQUEST event; `data` null or readable for
/// `len` octets.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(i: *mut RdmaCmId, data: *const c_void, len: u8) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    let Some(req) = lock(&id.s.st).request.take() else {
        return fail(libc::EINVAL);
    };
    let pd = if data.is_null() || len == 0 {
        &[][..]
    } else {
        // SAFETY: `len` readable octets by the contract.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len.into()) }
    };
    match req.reject(pd) {
        Ok(()) => 0,
        Err(e) => fail(errno_of(&e)),
    }
}

/// `rdma_disconnect`: a graceful close; both ends then see
/// `DISCONNECTED`.
///
/// # Safety
/// `i` a live id.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(i: *mut RdmaCmId) -> c_int {
    // SAFETY: by the contract.
    let Some(id) = (unsafe { id(i) }) else {
        return fail(libc::EINVAL);
    };
    let qp = lock(&id.s.st).qp.clone();
    if let Some(q) = &qp {
        q.closing.store(true, Ordering::Release);
        // The exit hook waits for this close too, if the program leaves
        // without destroying the QP.
        objects::linger(q.clone());
    }
    if let Ok(e) = engine() {
        if !e.fin_grace.is_zero() && qp.as_ref().is_some_and(|q| q.conn.get().is_some()) {
            std::thread::sleep(e.fin_grace);
        }
    }
    match qp.as_ref().and_then(|q| q.conn.get()) {
        Some(c) => match c.disconnect() {
            Ok(()) => 0,
            Err(e) => fail(errno_of(&e)),
        },
        None => fail(libc::ENOTCONN),
    }
}

/// A boxed copy of the `len` octets of address `a` (at most a
/// `sockaddr_storage`), as `rdma_freeaddrinfo` frees them.
///
/// # Safety
/// `a` readable for `len` octets.
unsafe fn copy_addr(a: *const libc::sockaddr, len: u32) -> Option<*mut libc::sockaddr> {
    if a.is_null() || len as usize > std::mem::size_of::<libc::sockaddr_storage>() {
        return None;
    }
    // SAFETY: all-zero is a valid sockaddr_storage.
    let b = Box::into_raw(Box::new(unsafe {
        std::mem::zeroed::<libc::sockaddr_storage>()
    }));
    // SAFETY: `len` octets readable by the contract, and they fit.
    unsafe { std::ptr::copy_nonoverlapping(a.cast::<u8>(), b.cast::<u8>(), len as usize) };
    Some(b.cast())
}

/// `rdma_getaddrinfo`, as rdma-core's: a name or service through libc's
/// resolver (IPv4; the result is the source address of a passive lookup,
/// the destination of an active one); with neither, the addresses the
/// hints carry (libfabric's verbs provider passes the peer's that way);
/// the hints' source address where the lookup gave none. Neither name,
/// service nor hints: `EINVAL`.
///
/// # Safety
/// `node`, `service` null or C strings; `hints` null or readable, its
/// addresses readable for their lengths; `res` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
    res: *mut *mut RdmaAddrinfo,
) -> c_int {
    // SAFETY: by the contract.
    let h = unsafe { hints.as_ref() };
    if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
        return fail(libc::EINVAL);
    }
    let passive = h.is_some_and(|h| h.ai_flags & abi::RAI_PASSIVE != 0);
    let mut r = Box::new(RdmaAddrinfo {
        ai_flags: h.map_or(0, |h| h.ai_flags),
        ai_family: libc::AF_INET,
        ai_qp_type: abi::QPT_RC,
        ai_port_space: abi::PS_TCP,
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: null_mut(),
        ai_dst_addr: null_mut(),
        ai_src_canonname: null_mut(),
        ai_dst_canonname: null_mut(),
        ai_route_len: 0,
        ai_route: null_mut(),
        ai_connect_len: 0,
        ai_connect: null_mut(),
        ai_next: null_mut(),
    });
    let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
    if !node.is_null() || !service.is_null() {
        if h.is_some_and(|h| h.ai_family != libc::AF_UNSPEC && h.ai_family != libc::AF_INET) {
            return libc::EAI_FAMILY;
        }
        // SAFETY: all-zero is valid for `addrinfo`.
        let mut gh: libc::addrinfo = unsafe { std::mem::zeroed() };
        gh.ai_family = libc::AF_INET;
        gh.ai_socktype = libc::SOCK_STREAM;
        gh.ai_flags = if passive { libc::AI_PASSIVE } else { 0 };
        let mut gres: *mut libc::addrinfo = null_mut();
        // SAFETY: C strings or null by the contract; `gres` writable.
        let rc = unsafe { libc::getaddrinfo(node, service, &gh, &mut gres) };
        if rc != 0 {
            return rc;
        }
        // SAFETY: a successful getaddrinfo gives at least one entry.
        let a = unsafe { v4((*gres).ai_addr) };
        // SAFETY: the list getaddrinfo made.
        unsafe { libc::freeaddrinfo(gres) };
        let Ok(Some(a)) = a else {
            return libc::EAI_FAMILY;
        };
        let addr = Box::into_raw(Box::new(sin(a))).cast::<libc::sockaddr>();
        if passive {
            (r.ai_src_addr, r.ai_src_len) = (addr, len);
        } else {
            (r.ai_dst_addr, r.ai_dst_len) = (addr, len);
        }
    } else if let Some(h) = h {
        r.ai_family = h.ai_family;
        r.ai_qp_type = h.ai_qp_type;
        r.ai_port_space = h.ai_port_space;
        if h.ai_dst_len > 0 {
            // SAFETY: the hints' address, readable for its length.
            let Some(d) = (unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) }) else {
                return fail(libc::EINVAL);
            };
            (r.ai_dst_addr, r.ai_dst_len) = (d, h.ai_dst_len);
        }
    }
    if let Some(h) = h.filter(|h| r.ai_src_len == 0 && h.ai_src_len > 0) {
        // SAFETY: the hints' address, readable for its length.
        let Some(s) = (unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) }) else {
            // SAFETY: made above, not yet handed out.
            unsafe { rdma_freeaddrinfo(Box::into_raw(r)) };
            return fail(libc::EINVAL);
        };
        (r.ai_src_addr, r.ai_src_len) = (s, h.ai_src_len);
    }
    // SAFETY: writable by the contract.
    unsafe { *res = Box::into_raw(r) };
    0
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `r` null or from `rdma_getaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(r: *mut RdmaAddrinfo) {
    let mut cur = r;
    while !cur.is_null() {
        // SAFETY: a box `rdma_getaddrinfo` made, with boxed addresses.
        let b = unsafe { Box::from_raw(cur) };
        for a in [b.ai_src_addr, b.ai_dst_addr] {
            if !a.is_null() {
                // SAFETY: boxed `sockaddr_storage`s.
                drop(unsafe { Box::from_raw(a.cast::<libc::sockaddr_storage>()) });
            }
        }
        cur = b.ai_next;
    }
}

/// Calls of librdmacm this library does not have (extended QP creation,
/// multicast, `rsocket`s): each fails
/// with `ENOSYS`, so a program sees at once what it cannot use.
macro_rules! not_here {
    ($($name:ident),* $(,)?) => {$(
        /// Not in this library: fails with `ENOSYS`.
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            fail(libc::ENOSYS)
        }
    )*};
}

not_here!(
    rdma_create_qp_ex,
    rdma_establish,
    rdma_init_qp_attr,
    rdma_join_multicast,
    rdma_leave_multicast,
    rdma_migrate_id,
    rdma_notify,
    rpoll,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests refused together are made again in the order of their
    /// tickets, whatever the order their threads came in.
    #[test]
    fn retried_requests_start_in_the_order_of_their_calls() {
        let r: &'static Retries = Box::leak(Box::new(Retries::new()));
        let order = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = [5u64, 3, 4, 1, 2]
            .into_iter()
            .map(|ticket| {
                let order = order.clone();
                std::thread::spawn(move || {
                    r.in_turn(ticket, || lock(&order).push(ticket))
                        .expect("a turn")
                })
            })
            .collect();
        // All five wait before the first round runs.
        let t0 = std::time::Instant::now();
        while lock(&r.waiting).len() < 5 {
            assert!(t0.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(lock(&order).is_empty());
        assert!(r.start());
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock(&order), [1, 2, 3, 4, 5]);
        // A later round serves a later refusal.
        r.in_turn(9, || lock(&order).push(9)).expect("a turn");
        assert_eq!(lock(&order).last(), Some(&9));
    }

    #[test]
    fn a_terminate_is_named_and_no_buffer_explained() {
        use iwarp::{DisconnectCause as D, TermCode};
        let n = |uses_srq, c| terminate_note(0x101, uses_srq, c);
        assert_eq!(
            n(true, D::TerminateSent(TermCode::DDP_U_NO_BUFFER)).as_deref(),
            Some(
                "iwarp verbs: QP 0x101 ended, Terminate sent: DDP: untagged buffer error: \
                 invalid MSN, no buffer available: a Send arrived while its shared receive \
                 queue was empty (iWARP has no receiver-not-ready retry)"
            )
        );
        assert!(n(false, D::TerminateSent(TermCode::DDP_U_NO_BUFFER))
            .unwrap()
            .contains("while it had no receive posted (iWARP has no"));
        assert!(n(false, D::TerminateReceived(TermCode::DDP_U_NO_BUFFER))
            .unwrap()
            .contains("Terminate received: DDP: untagged buffer error: invalid MSN, no buffer available: the peer had no receive buffer posted for a Send (iWARP"));
        assert_eq!(
            n(false, D::TerminateReceived(TermCode::RDMAP_INVALID_STAG)).as_deref(),
            Some(
                "iwarp verbs: QP 0x101 ended, Terminate received: RDMAP: remote protection \
                 error: invalid STag"
            )
        );
        for quiet in [
            D::LocalClose,
            D::PeerClosed,
            D::PeerReset,
            D::TimedOut,
            D::LocalAbort,
        ] {
            assert_eq!(n(true, quiet), None);
        }
    }

    fn addr_of(a: *const libc::sockaddr) -> SocketAddrV4 {
        // SAFETY: an IPv4 address `rdma_getaddrinfo` made or copied.
        unsafe { v4(a) }.unwrap().unwrap()
    }

    fn hints() -> RdmaAddrinfo {
        // SAFETY: all-zero is a valid `rdma_addrinfo` (null pointers).
        let mut h: RdmaAddrinfo = unsafe { std::mem::zeroed() };
        h.ai_family = libc::AF_INET;
        h.ai_qp_type = abi::QPT_RC;
        h.ai_port_space = abi::PS_TCP;
        h
    }

    #[test]
    fn a_port_picked_for_a_bind_is_free_until_given_back() {
        // The top two ports: each picked once, then the range is used up
        // (EADDRINUSE at the bind).
        let a = pick_port(u16::MAX - 1).unwrap();
        let b = pick_port(u16::MAX - 1).unwrap();
        assert_ne!(a, b);
        assert!(a >= u16::MAX - 1 && b >= u16::MAX - 1);
        assert_eq!(pick_port(u16::MAX - 1), None);
        lock(&PICKED).remove(&a);
        assert_eq!(pick_port(u16::MAX - 1), Some(a));
        lock(&PICKED).remove(&a);
        lock(&PICKED).remove(&b);
    }

    #[test]
    fn rdma_getaddrinfo_takes_addresses_from_the_hints_as_rdma_core() {
        let mut res: *mut RdmaAddrinfo = null_mut();
        // Nothing to resolve: -1 and EINVAL.
        // SAFETY: null name, service and hints; `res` writable.
        let rc = unsafe { rdma_getaddrinfo(null_mut(), null_mut(), std::ptr::null(), &mut res) };
        assert_eq!(rc, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );

        // Only hints (libfabric's verbs client): their destination and
        // source come back as copies.
        let dst = sin(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 7471));
        let src = sin(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 4), 0));
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        let mut h = hints();
        h.ai_dst_addr = (&dst as *const libc::sockaddr_storage).cast_mut().cast();
        h.ai_dst_len = len;
        h.ai_src_addr = (&src as *const libc::sockaddr_storage).cast_mut().cast();
        h.ai_src_len = len;
        // SAFETY: the hints' addresses live through the call.
        let rc = unsafe { rdma_getaddrinfo(null_mut(), null_mut(), &h, &mut res) };
        assert_eq!(rc, 0);
        // SAFETY: the result just made.
        let r = unsafe { &*res };
        assert_eq!((r.ai_dst_len, r.ai_src_len), (len, len));
        assert_ne!(r.ai_dst_addr, h.ai_dst_addr);
        assert_eq!(
            addr_of(r.ai_dst_addr),
            SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 7471)
        );
        assert_eq!(
            addr_of(r.ai_src_addr),
            SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 4), 0)
        );
        // SAFETY: from rdma_getaddrinfo.
        unsafe { rdma_freeaddrinfo(res) };

        // A passive lookup of a service: the wildcard source, and the
        // hints' source does not replace it.
        let mut h = hints();
        h.ai_flags = abi::RAI_PASSIVE;
        h.ai_src_addr = (&src as *const libc::sockaddr_storage).cast_mut().cast();
        h.ai_src_len = len;
        let service = c"7471";
        // SAFETY: a C string and live hints.
        let rc = unsafe { rdma_getaddrinfo(null_mut(), service.as_ptr(), &h, &mut res) };
        assert_eq!(rc, 0);
        // SAFETY: the result just made.
        let r = unsafe { &*res };
        assert!(r.ai_dst_addr.is_null());
        assert_eq!(
            addr_of(r.ai_src_addr),
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 7471)
        );
        // SAFETY: from rdma_getaddrinfo.
        unsafe { rdma_freeaddrinfo(res) };
    }
}
