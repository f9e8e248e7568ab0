//! Protection domains, memory regions, completion channels, CQs and queue
//! pairs: each a C struct of rdma-core's layout first (programs hold and
//! read it), then the stack's object it stands for.
//!
//! Memory regions are registered with the virtual address as their base
//! tagged offset (`ibv_reg_mr_iova2`: the IOVA), so an SGE's `addr` and a
//! work request's `remote_addr` are TOs as they stand and `lkey` = `rkey`
//! = the STag (iWARP has one key).
//!
//! A queue pair exists before its connection (verbs creates it, posts
//! receives, then `rdma_connect`/`rdma_accept`): receives posted before
//! go to the connection when the CM makes it ([`QpShared::attach`]).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};

use iwarp::{Access, STag, SgList, Sge, Status, WcOpcode, WcStatus, WorkRequest};

use crate::abi::{
    self, IbvCompChannel, IbvContext, IbvCq, IbvMr, IbvPd, IbvQp, IbvQpAttr, IbvQpCap,
    IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSge, IbvSrq, IbvSrqAttr, IbvSrqInitAttr, IbvWc,
};
use crate::engine::engine;
use crate::set_errno;

/// `struct ibv_pd` and its domain.
#[repr(C)]
pub(crate) struct Pd {
    pub c: IbvPd,
    pub pd: iwarp::Pd,
}

/// `struct ibv_mr` and its registration.
#[repr(C)]
pub(crate) struct Mr {
    pub c: IbvMr,
    pub mr: iwarp::Mr,
}

/// `struct ibv_comp_channel`: its descriptor is an epoll set over the
/// eventfds of the CQs that use it, so it is readable when an armed CQ
/// got a completion, and `poll`/`epoll` wait on it as on rdma-core's.
#[repr(C)]
pub(crate) struct CompChannel {
    pub c: IbvCompChannel,
    pub epoll: OwnedFd,
}

/// `struct ibv_cq` and its ring.
#[repr(C)]
pub(crate) struct Cq {
    pub c: IbvCq,
    pub cq: iwarp::Cq,
}

/// `struct ibv_srq` and its shared receive queue.
#[repr(C)]
pub(crate) struct Srq {
    pub c: IbvSrq,
    pub srq: iwarp::Srq,
    /// The scatter entries a receive may have (`attr.max_sge`).
    pub max_sge: u32,
    /// QPs created with it and not destroyed (`ibv_destroy_srq` is
    /// `EBUSY` meanwhile).
    pub users: AtomicU32,
    /// Its context's asynchronous events, where its limit event goes.
    pub events: Option<std::sync::Arc<crate::AsyncEvents>>,
}

/// `struct ibv_qp` and what the connection needs.
#[repr(C)]
pub(crate) struct Qp {
    pub c: IbvQp,
    pub q: std::sync::Arc<QpShared>,
}

/// The part of a QP its connection manager reads.
pub(crate) struct QpShared {
    pub qp_num: u32,
    pub pd: iwarp::Pd,
    pub send_cq: iwarp::Cq,
    pub recv_cq: iwarp::Cq,
    pub cap: IbvQpCap,
    pub sig_all: bool,
    /// The shared receive queue its Sends' buffers come from (then it has
    /// no receive queue of its own).
    pub srq: Option<iwarp::Srq>,
    /// The connection, once the CM made it.
    pub conn: OnceLock<iwarp::Qp>,
    /// Receives posted before the connection, in order (at most
    /// `cap.max_recv_wr`).
    early: Mutex<Vec<(u64, SgList)>>,
    /// `enum ibv_qp_state`, mirrored into `c.state`.
    pub state: AtomicI32,
    /// `rdma_disconnect` asked for a graceful close: destroying the QP
    /// then lets it finish (what was sent before still arrives) instead
    /// of aborting.
    pub closing: std::sync::atomic::AtomicBool,
}

/// Connection id → `qp_num`, for work completions (a CQ serves any QP).
fn qp_nums() -> &'static RwLock<HashMap<usize, u32>> {
    static M: OnceLock<RwLock<HashMap<usize, u32>>> = OnceLock::new();
    M.get_or_init(|| RwLock::new(HashMap::new()))
}

impl QpShared {
    /// Take the receives posted so far (to hand to the connection's
    /// setup).
    pub fn take_early(&self) -> Vec<(u64, SgList)> {
        std::mem::take(&mut *lock(&self.early))
    }

    /// The connection is up: receives posted since [`take_early`] go to
    /// it, in order, and later posts go straight to it.
    pub fn attach(self: &std::sync::Arc<Self>, conn: iwarp::Qp) -> Result<(), iwarp::Error> {
        write(qp_nums()).insert(conn.id(), self.qp_num);
        if let Ok(e) = engine() {
            e.count_qp(conn.loop_index());
        }
        {
            let mut a = lock(attached());
            a.retain(|q| q.strong_count() > 0);
            a.push(std::sync::Arc::downgrade(self));
        }
        let mut early = lock(&self.early);
        let late = std::mem::take(&mut *early);
        let conn = self.conn.get_or_init(|| conn);
        for (id, sgl) in late {
            conn.post_recv_list(id, sgl)?;
        }
        self.state.store(abi::qps::RTS, Ordering::Release);
        Ok(())
    }
}

/// The QPs the CM gave a connection, while the program holds them: at
/// exit those it left open are closed (`linger_at_exit`).
fn attached() -> &'static Mutex<Vec<std::sync::Weak<QpShared>>> {
    static A: OnceLock<Mutex<Vec<std::sync::Weak<QpShared>>>> = OnceLock::new();
    A.get_or_init(|| Mutex::new(Vec::new()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

static HANDLES: AtomicU32 = AtomicU32::new(1);

fn handle() -> u32 {
    HANDLES.fetch_add(1, Ordering::Relaxed)
}

/// A stack error as an errno.
pub(crate) fn errno_of(e: &iwarp::Error) -> c_int {
    use iwarp::Error as E;
    match e {
        E::AddrInUse => libc::EADDRINUSE,
        E::ConnectionRefused | E::Rejected { .. } | E::LocalRefused(_) => libc::ECONNREFUSED,
        E::Unreachable => libc::EHOSTUNREACH,
        E::ConnectionReset => libc::ECONNRESET,
        E::TimedOut => libc::ETIMEDOUT,
        E::QueueFull => libc::ENOMEM,
        E::Post(p) => post_errno(p),
        E::InvalidArgument(_) | E::OutOfBounds(_) | E::Memory(_) => libc::EINVAL,
        E::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        _ => libc::EIO,
    }
}

fn post_errno(p: &iwarp::PostError) -> c_int {
    use iwarp::PostError as P;
    match p {
        P::QueueFull => libc::ENOMEM,
        P::NotReady(_) | P::Disconnected(_) => libc::EINVAL,
        P::UsesSrq => libc::EINVAL,
        _ => libc::EINVAL,
    }
}

/// # Safety
/// `p` is null or a pointer this module handed out as `*mut C` for a
/// `T` whose first field is the `C` struct, not yet freed.
unsafe fn ours<'a, T, C>(p: *mut C) -> Option<&'a T> {
    // SAFETY: by the caller's contract (`repr(C)`, the C struct first).
    unsafe { p.cast::<T>().as_ref() }
}

// ---- protection domains ----

/// `ibv_alloc_pd`.
///
/// # Safety
/// `ctx` is null or from `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd {
    if ctx.is_null() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let e = match engine() {
        Ok(e) => e,
        Err(_) => {
            set_errno(libc::ENODEV);
            return null_mut();
        }
    };
    match e.ctx.alloc_pd() {
        Ok(pd) => Box::into_raw(Box::new(Pd {
            c: IbvPd {
                context: ctx,
                handle: handle(),
            },
            pd,
        }))
        .cast(),
        Err(err) => {
            set_errno(errno_of(&err));
            null_mut()
        }
    }
}

/// `ibv_dealloc_pd`.
///
/// # Safety
/// `pd` is null or from `ibv_alloc_pd`, not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the allocation `ibv_alloc_pd` made.
    drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
    0
}

// ---- memory regions ----

fn access_of(flags: c_int) -> Result<Access, c_int> {
    use abi::access as a;
    let known = a::LOCAL_WRITE
        | a::REMOTE_WRITE
        | a::REMOTE_READ
        | a::REMOTE_ATOMIC
        | a::MW_BIND
        | a::ZERO_BASED
        | a::ON_DEMAND
        | a::HUGETLB
        | a::OPTIONAL_RANGE;
    if flags & !known != 0 {
        return Err(libc::EINVAL);
    }
    // Remote write or atomic access needs local write (verbs' rule).
    if flags & (a::REMOTE_WRITE | a::REMOTE_ATOMIC) != 0 && flags & a::LOCAL_WRITE == 0 {
        return Err(libc::EINVAL);
    }
    // No on-demand paging in this stack.
    if flags & a::ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut acc = Access::LOCAL_READ;
    for (bit, r) in [
        (a::LOCAL_WRITE, Access::LOCAL_WRITE),
        (a::REMOTE_WRITE, Access::REMOTE_WRITE),
        (a::REMOTE_READ, Access::REMOTE_READ),
        (a::MW_BIND, Access::MW_BIND),
        (a::REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
    ] {
        if flags & bit != 0 {
            acc = acc | r;
        }
    }
    Ok(acc)
}

fn reg(pd: *mut IbvPd, addr: *mut c_void, len: usize, iova: u64, flags: c_int) -> *mut IbvMr {
    // SAFETY: `pd` from `ibv_alloc_pd` by the caller's contract.
    let Some(p) = (unsafe { ours::<Pd, _>(pd) }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let Some(ptr) = NonNull::new(addr.cast::<u8>()) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if len == 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let mut access = match access_of(flags) {
        Ok(a) => a,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    let base = if flags & abi::access::ZERO_BASED != 0 {
        0
    } else {
        iova
    };
    access = access | Access::LOCAL_READ;
    // SAFETY: verbs' contract for `ibv_reg_mr`: the caller's memory stays
    // valid and mapped until `ibv_dereg_mr`, which drops the region; the
    // stack writes it only where a peer's request passes the MR's checks.
    let region = unsafe { iwarp::Region::from_raw(ptr, len, None) };
    match p.pd.register_region_at(region, access, base) {
        Ok(mr) => {
            let key = mr.stag().0;
            Box::into_raw(Box::new(Mr {
                c: IbvMr {
                    context: p.c.context,
                    pd,
                    addr,
                    length: len,
                    handle: handle(),
                    lkey: key,
                    rkey: key,
                },
                mr,
            }))
            .cast()
        }
        Err(e) => {
            set_errno(errno_of(&e));
            null_mut()
        }
    }
}

/// `ibv_reg_mr` (the exported function behind the header's macro).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `addr..addr+length` stays valid until
/// `ibv_dereg_mr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut IbvMr {
    reg(pd, addr, length, addr as u64, access)
}

/// `ibv_reg_mr_iova2`: TOs start at `iova`.
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    reg(pd, addr, length, iova, access as c_int)
}

/// `ibv_reg_mr_iova` (IBVERBS_1.7's version, `int access`).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut IbvMr {
    reg(pd, addr, length, iova, access)
}

/// `ibv_dereg_mr`.
///
/// # Safety
/// `mr` is null or from `ibv_reg_mr`, not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the allocation `reg` made.
    let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
    match m.mr.deregister() {
        Ok(_) => 0,
        Err(e) => errno_of(&e),
    }
}

// ---- completion channels and CQs ----

/// `ibv_create_comp_channel`.
///
/// # Safety
/// `ctx` from `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut IbvContext) -> *mut IbvCompChannel {
    if ctx.is_null() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return null_mut();
    }
    // SAFETY: a descriptor we just opened and own.
    let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
    Box::into_raw(Box::new(CompChannel {
        c: IbvCompChannel {
            context: ctx,
            fd,
            refcnt: 0,
        },
        epoll,
    }))
    .cast()
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it.
///
/// # Safety
/// `ch` is null or from `ibv_create_comp_channel`, not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut IbvCompChannel) -> c_int {
    // SAFETY: by the contract.
    let Some(c) = (unsafe { ours::<CompChannel, _>(ch) }) else {
        return libc::EINVAL;
    };
    if c.c.refcnt > 0 {
        return libc::EBUSY;
    }
    // SAFETY: the allocation `ibv_create_comp_channel` made.
    drop(unsafe { Box::from_raw(ch.cast::<CompChannel>()) });
    0
}

/// `ibv_create_cq`: a ring of `cqe` completions (at least 1).
///
/// # Safety
/// `ctx` from `ibv_open_device`; `channel` null or from
/// `ibv_create_comp_channel`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    _comp_vector: c_int,
) -> *mut IbvCq {
    if ctx.is_null() || !(1..=1 << 20).contains(&cqe) {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let e = match engine() {
        Ok(e) => e,
        Err(_) => {
            set_errno(libc::ENODEV);
            return null_mut();
        }
    };
    let cq = e.ctx.create_cq(cqe as usize);
    let b = Box::into_raw(Box::new(Cq {
        c: IbvCq {
            context: ctx,
            channel,
            cq_context,
            handle: handle(),
            cqe,
            mutex: [0; 5],
            cond: [0; 6],
            comp_events_completed: 0,
            async_events_completed: 0,
        },
        cq,
    }));
    // SAFETY: by the contract, `channel` is null or a live channel.
    if let Some(ch) = unsafe { channel.cast::<CompChannel>().as_mut() } {
        // SAFETY: `b` was just made and is not shared yet.
        let c = unsafe { &*b };
        let fd = match c.cq.notify_fd() {
            Ok(fd) => fd.as_raw_fd(),
            Err(err) => {
                // SAFETY: ours, never handed out.
                drop(unsafe { Box::from_raw(b) });
                set_errno(errno_of(&err));
                return null_mut();
            }
        };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: b as u64,
        };
        // SAFETY: both descriptors are open; `ev` is a valid event.
        if unsafe { libc::epoll_ctl(ch.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            // SAFETY: ours, never handed out.
            drop(unsafe { Box::from_raw(b) });
            return null_mut();
        }
        ch.c.refcnt += 1;
    }
    b.cast()
}

/// `ibv_destroy_cq`.
///
/// # Safety
/// `cq` is null or from `ibv_create_cq`, not freed, used by no QP.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the allocation `ibv_create_cq` made.
    let c = unsafe { Box::from_raw(cq.cast::<Cq>()) };
    // SAFETY: the channel outlives its CQs (destroying it fails while
    // any uses it).
    if let Some(ch) = unsafe { c.c.channel.cast::<CompChannel>().as_mut() } {
        if let Ok(fd) = c.cq.notify_fd() {
            // SAFETY: both descriptors are open.
            unsafe {
                libc::epoll_ctl(
                    ch.epoll.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    fd.as_raw_fd(),
                    null_mut(),
                )
            };
        }
        ch.c.refcnt -= 1;
    }
    0
}

/// Whether a blocking read interrupted by a signal handler would have
/// been restarted (`SA_RESTART`). rdma-core waits in `read` on the
/// channel's descriptor, which the kernel restarts after a handler that
/// has the flag and fails with `EINTR` after one without it; `epoll_wait`
/// never restarts, and which signal came is not known here, so: restart
/// only if every handler the process has installed asks for it.
/// Handlers of the synchronous signals (a fault, a trap) are left out:
/// they do not interrupt a wait.
fn restarts_after_signals() -> bool {
    let sync = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
    ];
    (1..libc::SIGRTMAX())
        .filter(|s| !sync.contains(s) && *s != libc::SIGKILL && *s != libc::SIGSTOP)
        .all(|s| {
            // SAFETY: all-zero is a valid `sigaction`, which the call
            // only writes (no new action is given).
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a query of the signal's action into `old`.
            let rc = unsafe { libc::sigaction(s, std::ptr::null(), &mut old) };
            rc != 0
                || old.sa_sigaction == libc::SIG_DFL
                || old.sa_sigaction == libc::SIG_IGN
                || old.sa_flags & libc::SA_RESTART != 0
        })
}

/// `ibv_get_cq_event`: wait for an armed CQ of the channel to fire (or
/// fail with `EAGAIN` at once if the channel's descriptor is
/// non-blocking, or with `EINTR` when a signal handler without
/// `SA_RESTART` interrupts the wait, as rdma-core's `read` does).
///
/// # Safety
/// `ch` from `ibv_create_comp_channel`; `cq_out`, `ctx_out` writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut IbvCompChannel,
    cq_out: *mut *mut IbvCq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    // SAFETY: by the contract.
    let Some(c) = (unsafe { ours::<CompChannel, _>(ch) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if cq_out.is_null() || ctx_out.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let fd = c.epoll.as_raw_fd();
    // SAFETY: plain syscall on our descriptor (whose flags the program
    // may have set through `channel->fd`).
    let nonblock = unsafe { libc::fcntl(c.c.fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    loop {
        // SAFETY: one writable event.
        let n = unsafe { libc::epoll_wait(fd, &mut ev, 1, if nonblock { 0 } else { -1 }) };
        match n {
            1 => break,
            0 => {
                set_errno(libc::EAGAIN);
                return -1;
            }
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
                if !restarts_after_signals() {
                    // errno is EINTR, as rdma-core's `read` of the channel
                    // leaves it: qperf stops its waits with SIGALRM.
                    return -1;
                }
            }
            _ => return -1,
        }
    }
    let cq = ev.u64 as *mut Cq;
    // SAFETY: a CQ registered in this channel, which removes itself at
    // destruction.
    let q = unsafe { &*cq };
    q.cq.ack_notify();
    // SAFETY: writable by the contract.
    unsafe {
        *cq_out = cq.cast();
        *ctx_out = q.c.cq_context;
    }
    0
}

/// `ibv_ack_cq_events`.
///
/// # Safety
/// `cq` from `ibv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut IbvCq, n: u32) {
    // SAFETY: by the contract; the count is the program's own field,
    // which it reads under no lock of ours.
    if let Some(c) = unsafe { cq.as_mut() } {
        c.comp_events_completed = c.comp_events_completed.wrapping_add(n);
    }
}

/// The `req_notify_cq` slot: arm the CQ (a solicited-only arm fires on
/// any completion: more wake-ups than asked, never fewer).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut IbvCq, _solicited_only: c_int) -> c_int {
    // SAFETY: by verbs' contract, a live CQ.
    match unsafe { ours::<Cq, _>(cq) } {
        Some(c) => match c.cq.req_notify() {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        },
        None => libc::EINVAL,
    }
}

fn wc_of(w: &iwarp::Wc) -> IbvWc {
    use abi::{wc_opcode as op, wc_status as st};
    let status = match w.status {
        Status::Wc(WcStatus::Success) => st::SUCCESS,
        Status::Wc(WcStatus::LocalProtection(_)) => st::LOC_PROT_ERR,
        Status::Wc(WcStatus::LocalLength) => st::LOC_LEN_ERR,
        Status::Wc(WcStatus::RemoteAccess) => st::REM_ACCESS_ERR,
        Status::Wc(WcStatus::RemoteOperation) => st::REM_OP_ERR,
        Status::Wc(WcStatus::RemoteInvalidRequest) => st::REM_INV_REQ_ERR,
        Status::Wc(WcStatus::BadResponse) => st::BAD_RESP_ERR,
        Status::Wc(WcStatus::Flushed) => st::WR_FLUSH_ERR,
        Status::Refused(iwarp::PostError::Disconnected(_)) => st::WR_FLUSH_ERR,
        Status::Refused(iwarp::PostError::Local(_)) => st::LOC_PROT_ERR,
        Status::Refused(_) => st::LOC_QP_OP_ERR,
        #[allow(unreachable_patterns)]
        _ => st::GENERAL_ERR,
    };
    let opcode = match w.opcode {
        Some(WcOpcode::Send) | None => op::SEND,
        Some(WcOpcode::Write) => op::RDMA_WRITE,
        Some(WcOpcode::Read) => op::RDMA_READ,
        Some(WcOpcode::Recv) => op::RECV,
        // verbs reports a Write with Immediate as a Write at the sender.
        Some(WcOpcode::WriteImm) => op::RDMA_WRITE,
        Some(WcOpcode::RecvRdmaWithImm) => op::RECV_RDMA_WITH_IMM,
        Some(WcOpcode::FetchAdd) => op::FETCH_ADD,
        Some(WcOpcode::CmpSwap) => op::COMP_SWAP,
        #[allow(unreachable_patterns)]
        Some(_) => op::SEND,
    };
    // `imm_data` is in network order, as rdma-core's providers leave it.
    let (wc_flags, imm) = match (w.invalidated, w.imm) {
        (Some(s), _) => (abi::WC_WITH_INV, s.0),
        (None, Some(i)) => (abi::WC_WITH_IMM, i.to_be()),
        (None, None) => (0, 0),
    };
    IbvWc {
        wr_id: w.wr_id,
        status,
        opcode,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: read(qp_nums()).get(&w.qp).copied().unwrap_or(0),
        wc_flags,
        ..IbvWc::default()
    }
}

/// The `poll_cq` slot: up to `n` completions into `wc`; on an inline
/// context an empty ring makes this thread run the stack once.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut IbvCq, n: c_int, wc: *mut IbvWc) -> c_int {
    // SAFETY: by verbs' contract, a live CQ.
    let Some(c) = (unsafe { ours::<Cq, _>(cq) }) else {
        return -libc::EINVAL;
    };
    if n < 0 || (n > 0 && wc.is_null()) {
        return -libc::EINVAL;
    }
    let mut got = 0;
    while got < n {
        let Some(w) = c.cq.poll_one() else { break };
        // SAFETY: `wc` holds `n` entries by the contract; got < n.
        unsafe { wc.add(got as usize).write(wc_of(&w)) };
        got += 1;
    }
    got
}

// ---- queue pairs ----

static QP_NUMS: AtomicU32 = AtomicU32::new(0x100);

/// `ibv_create_qp`: an RC queue pair, connected by librdmacm.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable and writable; its CQs from
/// `ibv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    // SAFETY: by the contract.
    let (Some(p), Some(a)) = (unsafe { ours::<Pd, _>(pd) }, unsafe { attr.as_mut() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if a.qp_type != abi::QPT_RC {
        // iWARP has reliable connected queue pairs only.
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: null or an SRQ from `ibv_create_srq` by the contract.
    let srq = unsafe { ours::<Srq, _>(a.srq.cast::<IbvSrq>()) };
    // SAFETY: CQs from `ibv_create_cq` by the contract.
    let (Some(scq), Some(rcq)) = (unsafe { ours::<Cq, _>(a.send_cq) }, unsafe {
        ours::<Cq, _>(a.recv_cq)
    }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let max_sge = iwarp::MAX_SGE as u32;
    let mut cap = a.cap;
    if srq.is_some() {
        // Receives come from the SRQ: the QP's own receive queue is not
        // used, whatever its attributes ask (verbs ignores them).
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    // A send queue of 0 is allowed (a QP that only receives and answers
    // the peer's Reads, as qperf's rc_rdma_read_bw server makes).
    if cap.max_send_wr as usize > crate::MAX_QP_WR
        || cap.max_recv_wr as usize > crate::MAX_QP_WR
        || cap.max_send_sge > max_sge
        || cap.max_recv_sge > max_sge
        || cap.max_inline_data > iwarp::MAX_INLINE as u32
    {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // What we give: what was asked, the inline size raised to ours.
    a.cap.max_inline_data = iwarp::MAX_INLINE as u32;
    let cap = IbvQpCap {
        max_send_sge: cap.max_send_sge.max(1),
        max_recv_sge: cap.max_recv_sge.max(1),
        max_recv_wr: cap.max_recv_wr.max(1),
        ..a.cap
    };
    a.cap = cap;
    if srq.is_some() {
        a.cap.max_recv_wr = 0;
        a.cap.max_recv_sge = 0;
    }
    let qp_num = QP_NUMS.fetch_add(1, Ordering::Relaxed);
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    let qp = Box::new(Qp {
        c: IbvQp {
            context: p.c.context,
            qp_context: a.qp_context,
            pd,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            handle: handle(),
            qp_num,
            state: abi::qps::INIT,
            qp_type: abi::QPT_RC,
            mutex: [0; 5],
            cond: [0; 6],
            events_completed: 0,
        },
        q: std::sync::Arc::new(QpShared {
            qp_num,
            pd: p.pd.clone(),
            send_cq: scq.cq.clone(),
            recv_cq: rcq.cq.clone(),
            cap,
            sig_all: a.sq_sig_all != 0,
            srq: srq.map(|s| s.srq.clone()),
            conn: OnceLock::new(),
            early: Mutex::new(Vec::new()),
            state: AtomicI32::new(abi::qps::INIT),
            closing: std::sync::atomic::AtomicBool::new(false),
        }),
    });
    Box::into_raw(qp).cast()
}

/// `ibv_destroy_qp`: an established connection is closed gracefully (as
/// siw's socket release sends a FIN, not a reset); if `rdma_disconnect`
/// closes it already, the call waits
/// (at most `IWARP_LINGER_MS`) for the close to finish, TCP's included
/// (`Qp::wait_closed`), so that what was
/// sent before it still arrives even if the process ends next — the
/// close lives in this process, not in a kernel that outlives it (fio's
/// job processes leave with `_exit`, past any exit hook).
///
/// # Safety
/// `qp` is null or from `ibv_create_qp`, not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the allocation `ibv_create_qp` made.
    let q = unsafe { Box::from_raw(qp.cast::<Qp>()) };
    // SAFETY: the QP's SRQ outlives it (`ibv_destroy_srq` is `EBUSY`
    // while it has users).
    if let Some(s) = unsafe { ours::<Srq, _>(q.c.srq.cast::<IbvSrq>()) } {
        s.users.fetch_sub(1, Ordering::AcqRel);
    }
    if let Some(c) = q.q.conn.get() {
        if q.q.closing.load(Ordering::Acquire) {
            let _ = c.wait_closed(linger_budget());
        } else {
            // The same grace before our FIN as `rdma_disconnect` gives.
            if let Ok(e) = engine() {
                if matches!(c.disconnect_cause(), Ok(None)) {
                    std::thread::sleep(e.fin_grace);
                }
            }
            let _ = c.disconnect();
        }
        linger(q.q.clone());
        write(qp_nums()).remove(&c.id());
    }
    0
}

/// Connections closing gracefully whose QP the program destroyed: the
/// process waits for them at exit (`linger_at_exit`), since their close
/// (and the data sent before it) lives in this process, not in a kernel
/// that outlives it. Until TCP is finished, not only until the iWARP
/// stream is over (`DISCONNECTED`): in LAST-ACK our FIN may still need
/// retransmitting, in FIN-WAIT-2 the peer's data and FIN our ACK; a
/// process gone by then leaves its peer waiting for them (a perftest
/// end that saw `DISCONNECTED` first and left made the other one wait
/// ~40 s for its own, until its FIN's retransmissions gave up).
fn lingering() -> &'static Mutex<Vec<std::sync::Arc<QpShared>>> {
    static L: OnceLock<Mutex<Vec<std::sync::Arc<QpShared>>>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(Vec::new()))
}

/// `IWARP_LINGER_MS` (the engine validated it; without an engine there
/// is no connection to wait for).
fn linger_budget() -> std::time::Duration {
    engine().map_or(std::time::Duration::ZERO, |e| e.linger)
}

pub(crate) fn linger(q: std::sync::Arc<QpShared>) {
    let mut l = lock(lingering());
    // Those whose TCP is finished need no wait.
    l.retain(|q| {
        q.conn
            .get()
            .is_some_and(|c| c.wait_closed(std::time::Duration::ZERO).is_err())
    });
    l.push(q);
}

/// At exit: close the connections the program left open (gracefully,
/// as `ibv_destroy_qp` does), as the kernel closes an exiting process's
/// QPs; then give them and those still closing up to `IWARP_LINGER_MS`
/// (default 2000) in all to finish, TCP included, so that what a program
/// sent just before `rdma_disconnect` and exit still arrives, and so does
/// the end of the close its peer waits for. A connection left open
/// would otherwise end with the process without a FIN: its peer (perftest's
/// `ib_atomic_lat` client, whose server destroys its CM ids and leaves)
/// waits for `DISCONNECTED` until its own FIN's retransmissions give up.
pub(crate) extern "C" fn linger_at_exit() {
    let deadline = std::time::Instant::now() + linger_budget();
    let held: Vec<_> = lock(attached())
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    let open: Vec<_> = held
        .iter()
        .filter(|q| {
            q.conn.get().is_some_and(|c| {
                !q.closing.load(Ordering::Acquire) && matches!(c.disconnect_cause(), Ok(None))
            })
        })
        .collect();
    if !open.is_empty() {
        // The same grace before our FIN as `rdma_disconnect` gives.
        if let Ok(e) = engine() {
            std::thread::sleep(e.fin_grace);
        }
    }
    for q in open {
        q.closing.store(true, Ordering::Release);
        if let Some(c) = q.conn.get() {
            let _ = c.disconnect();
        }
    }
    let mut list = std::mem::take(&mut *lock(lingering()));
    list.extend(held);
    for q in list {
        if let Some(c) = q.conn.get() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let _ = c.wait_closed(left);
        }
    }
}

/// The QP behind a pointer.
///
/// # Safety
/// `qp` is null or a live QP from `ibv_create_qp`.
pub(crate) unsafe fn qp<'a>(qp: *mut IbvQp) -> Option<&'a Qp> {
    // SAFETY: by the contract.
    unsafe { ours::<Qp, _>(qp) }
}

/// `ibv_modify_qp`: the CM moves the state; a program may move a
/// connected QP to the error state (the connection is aborted and its
/// work flushed) and set attributes that have no meaning over TCP
/// (timers, retry counts: accepted, ignored). Any other state change is
/// `EINVAL`, as for a transition the QP cannot make.
///
/// # Safety
/// `qp` from `ibv_create_qp`; `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp_: *mut IbvQp,
    attr: *mut IbvQpAttr,
    mask: c_int,
) -> c_int {
    // SAFETY: by the contract.
    let (Some(q), Some(a)) = (unsafe { qp(qp_) }, unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    if mask & abi::QP_STATE == 0 {
        return 0;
    }
    let now = q.q.state.load(Ordering::Acquire);
    match a.qp_state {
        s if s == now => 0,
        abi::qps::ERR => {
            if let Some(c) = q.q.conn.get() {
                let _ = c.abort();
            }
            q.q.state.store(abi::qps::ERR, Ordering::Release);
            // SAFETY: the program's own struct; it expects the field to
            // follow the state.
            unsafe { (*qp_).state = abi::qps::ERR };
            0
        }
        // rdma-core's CM moves a new QP through INIT and RTR itself.
        abi::qps::RTR | abi::qps::INIT if now == abi::qps::INIT => 0,
        _ => libc::EINVAL,
    }
}

/// `ibv_query_qp`.
///
/// # Safety
/// `qp` from `ibv_create_qp`; `attr`, `init` writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp_: *mut IbvQp,
    attr: *mut IbvQpAttr,
    _mask: c_int,
    init: *mut IbvQpInitAttr,
) -> c_int {
    // SAFETY: by the contract.
    let Some(q) = (unsafe { qp(qp_) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || init.is_null() {
        return libc::EINVAL;
    }
    let state = q.q.state.load(Ordering::Acquire);
    let (ird, ord) =
        q.q.conn
            .get()
            .map_or((0, 0), |c| (c.negotiated().ird, c.negotiated().ord));
    // SAFETY: writable by the contract; all-zero is a valid value of
    // these plain C structs.
    unsafe {
        attr.write(std::mem::zeroed());
        let a = &mut *attr;
        a.qp_state = state;
        a.cur_qp_state = state;
        a.path_mtu = abi::ibv_mtu(1500);
        a.cap = q.q.cap;
        a.max_rd_atomic = ord.min(255) as u8;
        a.max_dest_rd_atomic = ird.min(255) as u8;
        a.port_num = 1;
        if q.q.srq.is_some() {
            a.cap.max_recv_wr = 0;
            a.cap.max_recv_sge = 0;
        }
        init.write(IbvQpInitAttr {
            qp_context: q.c.qp_context,
            send_cq: q.c.send_cq,
            recv_cq: q.c.recv_cq,
            srq: q.c.srq,
            cap: a.cap,
            qp_type: abi::QPT_RC,
            sq_sig_all: c_int::from(q.q.sig_all),
        });
    }
    0
}

fn sgl_of(sg: *mut IbvSge, n: c_int) -> Result<SgList, c_int> {
    if n < 0 || n as usize > iwarp::MAX_SGE || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut l = SgList::EMPTY;
    for i in 0..n as usize {
        // SAFETY: `n` readable entries by verbs' contract.
        let s = unsafe { sg.add(i).read() };
        l.push(Sge {
            stag: STag(s.lkey),
            to: s.addr,
            len: s.length,
        })
        .map_err(|_| libc::EINVAL)?;
    }
    Ok(l)
}

/// Gather an inline request's payload from the program's memory (no MR
/// needed: verbs' `IBV_SEND_INLINE`).
fn inline_of(sg: *mut IbvSge, n: c_int) -> Result<iwarp::InlineData, c_int> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut buf = [0u8; iwarp::MAX_INLINE];
    let mut len = 0usize;
    for i in 0..n as usize {
        // SAFETY: `n` readable entries by verbs' contract.
        let s = unsafe { sg.add(i).read() };
        let l = s.length as usize;
        if len + l > buf.len() {
            return Err(libc::EINVAL);
        }
        if l > 0 {
            // SAFETY: verbs' contract for inline data: `addr..addr+length`
            // is readable while the post runs.
            let src = unsafe { std::slice::from_raw_parts(s.addr as *const u8, l) };
            buf[len..len + l].copy_from_slice(src);
            len += l;
        }
    }
    iwarp::InlineData::new(&buf[..len]).map_err(|_| libc::EINVAL)
}

fn work_request(w: &IbvSendWr, sig_all: bool) -> Result<WorkRequest, c_int> {
    use abi::{send_flags as f, wr as op};
    let signaled = sig_all || w.send_flags & f::SIGNALED != 0;
    let inline = w.send_flags & f::INLINE != 0;
    let solicited = w.send_flags & f::SOLICITED != 0;
    let remote_stag = STag(w.wr.word1 as u32);
    let remote_to = w.wr.remote_addr;
    Ok(match w.opcode {
        op::SEND | op::SEND_WITH_INV => {
            let invalidate = (w.opcode == op::SEND_WITH_INV).then_some(STag(w.imm_data));
            if inline {
                WorkRequest::SendInline {
                    wr_id: w.wr_id,
                    signaled,
                    data: inline_of(w.sg_list, w.num_sge)?,
                    solicited,
                    invalidate,
                }
            } else {
                WorkRequest::Send {
                    wr_id: w.wr_id,
                    signaled,
                    local: sgl_of(w.sg_list, w.num_sge)?,
                    solicited,
                    invalidate,
                }
            }
        }
        op::RDMA_WRITE if inline => WorkRequest::WriteInline {
            wr_id: w.wr_id,
            signaled,
            data: inline_of(w.sg_list, w.num_sge)?,
            remote_stag,
            remote_to,
        },
        op::RDMA_WRITE => WorkRequest::Write {
            wr_id: w.wr_id,
            signaled,
            local: sgl_of(w.sg_list, w.num_sge)?,
            remote_stag,
            remote_to,
        },
        op::RDMA_READ => WorkRequest::Read {
            wr_id: w.wr_id,
            signaled,
            local: sgl_of(w.sg_list, w.num_sge)?,
            remote_stag,
            remote_to,
        },
        // RFC 7306 §6: an RDMA Write then Immediate Data (`imm_data` is in
        // network order in the request).
        op::RDMA_WRITE_WITH_IMM => WorkRequest::WriteImm {
            wr_id: w.wr_id,
            signaled,
            local: sgl_of(w.sg_list, w.num_sge)?,
            remote_stag,
            remote_to,
            imm: u32::from_be(w.imm_data),
            solicited,
        },
        // RFC 7306 §5 atomics: `wr.atomic` (compare_add, swap, rkey at 24),
        // one 8-octet SGE for the original value.
        op::ATOMIC_FETCH_AND_ADD | op::ATOMIC_CMP_AND_SWP => {
            let local = sgl_of(w.sg_list, w.num_sge)?;
            let &[local] = local.as_slice() else {
                return Err(libc::EINVAL);
            };
            let remote_stag = STag(w.wr.atomic_rkey);
            if w.opcode == op::ATOMIC_FETCH_AND_ADD {
                WorkRequest::FetchAdd {
                    wr_id: w.wr_id,
                    signaled,
                    local,
                    remote_stag,
                    remote_to,
                    add: w.wr.word1,
                }
            } else {
                WorkRequest::CmpSwap {
                    wr_id: w.wr_id,
                    signaled,
                    local,
                    remote_stag,
                    remote_to,
                    compare: w.wr.word1,
                    swap: w.wr.swap,
                }
            }
        }
        // Send with Immediate: the wire has no Send carrying an immediate
        // (RFC 7306's Immediate Data is a message of its own that consumes
        // a receive buffer of its own; docs/rfc7306.md, "Send with Immediate: not supported"), so
        // EINVAL, as iw_cxgb4 and irdma answer on iWARP. Memory windows and
        // local invalidation are not in this library yet; as siw does for
        // an opcode it lacks.
        _ => return Err(libc::EINVAL),
    })
}

/// The `post_send` slot.
pub(crate) unsafe extern "C" fn post_send(
    qp_: *mut IbvQp,
    wr: *mut IbvSendWr,
    bad: *mut *mut IbvSendWr,
) -> c_int {
    let fail = |at: *mut IbvSendWr, e: c_int| {
        if !bad.is_null() {
            // SAFETY: a writable `bad_wr` by verbs' contract.
            unsafe { *bad = at };
        }
        e
    };
    // SAFETY: by verbs' contract, a live QP.
    let Some(q) = (unsafe { qp(qp_) }) else {
        return fail(wr, libc::EINVAL);
    };
    let Some(conn) = q.q.conn.get() else {
        return fail(wr, libc::EINVAL);
    };
    let sig_all = q.q.sig_all;
    let mut cur = wr;
    let mut err: Option<(*mut IbvSendWr, c_int)> = None;
    // Converted lazily: the list is posted with one doorbell, and stops at
    // the first request that does not convert.
    let iter = std::iter::from_fn(|| {
        // SAFETY: a NULL-terminated chain of readable requests.
        let w = unsafe { cur.as_ref() }?;
        match work_request(w, sig_all) {
            Ok(r) => {
                cur = w.next;
                Some(r)
            }
            Err(e) => {
                err = Some((cur, e));
                None
            }
        }
    });
    match conn.post_send_list(iter) {
        Ok(_) => match err {
            Some((at, e)) => fail(at, e),
            None => 0,
        },
        Err((n, e)) => {
            // The n-th request (from 0) is the one refused.
            let mut at = wr;
            for _ in 0..n {
                // SAFETY: the first n requests of the chain were read above.
                at = unsafe { (*at).next };
            }
            fail(at, errno_of(&e))
        }
    }
}

/// The `post_recv` slot.
pub(crate) unsafe extern "C" fn post_recv(
    qp_: *mut IbvQp,
    wr: *mut IbvRecvWr,
    bad: *mut *mut IbvRecvWr,
) -> c_int {
    let fail = |at: *mut IbvRecvWr, e: c_int| {
        if !bad.is_null() {
            // SAFETY: a writable `bad_wr` by verbs' contract.
            unsafe { *bad = at };
        }
        e
    };
    // SAFETY: by verbs' contract, a live QP.
    let Some(q) = (unsafe { qp(qp_) }) else {
        return fail(wr, libc::EINVAL);
    };
    if q.q.srq.is_some() {
        // Its receives come from its SRQ (`ibv_post_srq_recv`).
        return fail(wr, libc::EINVAL);
    }
    let mut cur = wr;
    // SAFETY: a NULL-terminated chain of readable requests.
    while let Some(w) = unsafe { cur.as_ref() } {
        let sgl = match sgl_of(w.sg_list, w.num_sge) {
            Ok(l) => l,
            Err(e) => return fail(cur, e),
        };
        let r = match q.q.conn.get() {
            Some(c) => c.post_recv_list(w.wr_id, sgl).map_err(|e| errno_of(&e)),
            None => {
                let mut early = lock(&q.q.early);
                match q.q.conn.get() {
                    Some(c) => c.post_recv_list(w.wr_id, sgl).map_err(|e| errno_of(&e)),
                    None if early.len() >= q.q.cap.max_recv_wr as usize => Err(libc::ENOMEM),
                    None => {
                        early.push((w.wr_id, sgl));
                        Ok(())
                    }
                }
            }
        };
        if let Err(e) = r {
            return fail(cur, e);
        }
        cur = w.next;
    }
    0
}

/// The `post_srq_recv` slot: each request's buffer joins the SRQ (its
/// entries are checked against the memory table by the QP that takes it);
/// the first one refused (too many entries: `EINVAL`; the SRQ full:
/// `ENOMEM`) stops the list and is `bad_wr`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut IbvSrq,
    wr: *mut IbvRecvWr,
    bad: *mut *mut IbvRecvWr,
) -> c_int {
    let fail = |at: *mut IbvRecvWr, e: c_int| {
        if !bad.is_null() {
            // SAFETY: a writable `bad_wr` by verbs' contract.
            unsafe { *bad = at };
        }
        e
    };
    // SAFETY: by verbs' contract, a live SRQ of ours.
    let Some(s) = (unsafe { ours::<Srq, _>(srq) }) else {
        return fail(wr, libc::EINVAL);
    };
    let mut cur = wr;
    // SAFETY: a NULL-terminated chain of readable requests.
    while let Some(w) = unsafe { cur.as_ref() } {
        if w.num_sge < 0 || w.num_sge as u32 > s.max_sge {
            return fail(cur, libc::EINVAL);
        }
        let sgl = match sgl_of(w.sg_list, w.num_sge) {
            Ok(l) => l,
            Err(e) => return fail(cur, e),
        };
        if let Err(e) = s.srq.post_recv(w.wr_id, sgl) {
            return fail(cur, errno_of(&e));
        }
        cur = w.next;
    }
    0
}

// ---- shared receive queues ----

/// `ibv_create_srq`: a shared receive queue of `attr.max_wr` buffers
/// (1..=`max_srq_wr`) of up to `attr.max_sge` entries (at most
/// `max_srq_sge`; 0 is taken as 1). The attributes are written back with
/// what it has; `srq_limit` is not armed at creation (verbs arms it with
/// `ibv_modify_srq`) and reads 0. Its limit event goes to the PD's
/// context's asynchronous events.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `init` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut IbvPd, init: *mut IbvSrqInitAttr) -> *mut IbvSrq {
    // SAFETY: by the contract.
    let (Some(p), Some(a)) = (unsafe { ours::<Pd, _>(pd) }, unsafe { init.as_mut() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let max_wr = a.attr.max_wr as usize;
    if !(1..=crate::MAX_SRQ_WR).contains(&max_wr) || a.attr.max_sge as usize > iwarp::MAX_SGE {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let e = match engine() {
        Ok(e) => e,
        Err(_) => {
            set_errno(libc::ENODEV);
            return null_mut();
        }
    };
    let srq = e.ctx.create_srq(max_wr);
    let max_sge = a.attr.max_sge.max(1);
    a.attr = IbvSrqAttr {
        max_wr: srq.capacity() as u32,
        max_sge,
        srq_limit: 0,
    };
    // SAFETY: the PD's context, from `ibv_open_device` (a PD lives in one).
    let events = unsafe { crate::context_events(p.c.context) };
    let s = Box::into_raw(Box::new(Srq {
        c: IbvSrq {
            context: p.c.context,
            srq_context: a.srq_context,
            pd,
            handle: handle(),
            mutex: [0; 5],
            cond: [0; 6],
            events_completed: 0,
        },
        srq,
        max_sge,
        users: AtomicU32::new(0),
        events: events.clone(),
    }));
    if let Some(ev) = events {
        // The limit's event names the SRQ (its address, which
        // `ibv_destroy_srq` stops this from using).
        let element = s as usize;
        // SAFETY: just made; read only here.
        unsafe { &(*s).srq }.on_limit(Some(std::sync::Arc::new(move || {
            ev.push(crate::AsyncEvent {
                event_type: abi::EVENT_SRQ_LIMIT_REACHED,
                element,
            })
        })));
    }
    s.cast()
}

/// `ibv_modify_srq`: the depth is fixed (`IBV_SRQ_MAX_WR`: `EINVAL`, as
/// for a device without `IBV_DEVICE_SRQ_RESIZE`); `IBV_SRQ_LIMIT` arms
/// the limit (up to the depth, else `EINVAL`; 0 disarms): the first time
/// a QP takes a buffer and fewer than `srq_limit` remain, the context
/// gets one `IBV_EVENT_SRQ_LIMIT_REACHED` (`ibv_get_async_event`) and the
/// limit disarms (`ibv_query_srq` reads 0 again), as Linux siw does. One
/// armed above what the SRQ holds fires at the next take.
///
/// # Safety
/// `srq` from `ibv_create_srq`; `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut IbvSrq,
    attr: *mut IbvSrqAttr,
    mask: c_int,
) -> c_int {
    // SAFETY: by the contract.
    let (Some(s), Some(a)) = (unsafe { ours::<Srq, _>(srq) }, unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    match modify_srq_answer(a, mask, s.srq.capacity()) {
        Ok(Some(limit)) => {
            s.srq.arm_limit(limit);
            0
        }
        Ok(None) => 0,
        Err(e) => e,
    }
}

/// What `ibv_modify_srq` does for `attr` and `mask` on an SRQ of
/// `depth`: the limit to arm (0: disarm), nothing, or the errno.
fn modify_srq_answer(a: &IbvSrqAttr, mask: c_int, depth: usize) -> Result<Option<usize>, c_int> {
    if mask & !(abi::SRQ_MAX_WR | abi::SRQ_LIMIT) != 0 || mask & abi::SRQ_MAX_WR != 0 {
        return Err(libc::EINVAL);
    }
    if mask & abi::SRQ_LIMIT == 0 {
        return Ok(None);
    }
    let limit = a.srq_limit as usize;
    if limit > depth {
        return Err(libc::EINVAL);
    }
    Ok(Some(limit))
}

/// `ibv_query_srq`.
///
/// # Safety
/// `srq` from `ibv_create_srq`; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr) -> c_int {
    // SAFETY: by the contract.
    let Some(s) = (unsafe { ours::<Srq, _>(srq) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: writable by the contract.
    unsafe {
        attr.write(IbvSrqAttr {
            max_wr: s.srq.capacity() as u32,
            max_sge: s.max_sge,
            srq_limit: s.srq.limit() as u32,
        })
    };
    0
}

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it; buffers still in it
/// are dropped without completions, and its events not yet taken with
/// `ibv_get_async_event` with it.
///
/// # Safety
/// `srq` is null or from `ibv_create_srq`, not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int {
    // SAFETY: by the contract.
    let Some(s) = (unsafe { ours::<Srq, _>(srq) }) else {
        return libc::EINVAL;
    };
    if s.users.load(Ordering::Acquire) > 0 {
        return libc::EBUSY;
    }
    // No QP takes from it any more: its limit cannot fire again.
    s.srq.on_limit(None);
    s.srq.arm_limit(0);
    if let Some(ev) = &s.events {
        ev.forget(srq as usize);
    }
    // SAFETY: the allocation `ibv_create_srq` made.
    drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modify_srq_refuses_resize_and_arms_a_limit_up_to_the_depth() {
        let a = |max_wr, srq_limit| IbvSrqAttr {
            max_wr,
            max_sge: 1,
            srq_limit,
        };
        let lim = abi::SRQ_LIMIT;
        assert_eq!(
            modify_srq_answer(&a(8, 0), abi::SRQ_MAX_WR, 16),
            Err(libc::EINVAL)
        );
        assert_eq!(modify_srq_answer(&a(0, 4), lim, 16), Ok(Some(4)));
        assert_eq!(modify_srq_answer(&a(0, 16), lim, 16), Ok(Some(16)));
        assert_eq!(modify_srq_answer(&a(0, 17), lim, 16), Err(libc::EINVAL));
        assert_eq!(modify_srq_answer(&a(0, 0), lim, 16), Ok(Some(0)));
        assert_eq!(modify_srq_answer(&a(0, 0), 1 << 5, 16), Err(libc::EINVAL));
        assert_eq!(modify_srq_answer(&a(0, 0), 0, 16), Ok(None));
        // A resize with a limit changes nothing.
        assert_eq!(
            modify_srq_answer(&a(32, 4), abi::SRQ_MAX_WR | lim, 16),
            Err(libc::EINVAL)
        );
    }
}
