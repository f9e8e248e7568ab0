//! The C structures of rdma-core 44's `<infiniband/verbs.h>` that this
//! library fills or hands out, laid out as the header lays them out. Every
//! size and field offset used here is checked against the real header by
//! `tests/abi.rs` (a C probe compiled with gcc).

use std::ffi::{c_char, c_int, c_void};

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `IBV_NODE_RNIC`.
pub const NODE_RNIC: c_int = 4;
/// `IBV_TRANSPORT_IWARP`.
pub const TRANSPORT_IWARP: c_int = 1;

/// `enum ibv_port_state`: `IBV_PORT_DOWN`, `IBV_PORT_ACTIVE`.
pub const PORT_DOWN: c_int = 1;
/// See [`PORT_DOWN`].
pub const PORT_ACTIVE: c_int = 4;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_ATOMIC_NONE`.
pub const ATOMIC_NONE: c_int = 0;
/// `IBV_ATOMIC_HCA`: atomic with respect to this device's other atomics
/// (not to the CPU's).
pub const ATOMIC_HCA: c_int = 1;

/// `struct _ibv_device_ops`: two unused slots.
#[repr(C)]
#[derive(Debug)]
pub struct DeviceOps {
    pub dummy1: *mut c_void,
    pub dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvDevice {
    pub ops: DeviceOps,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; SYSFS_NAME_MAX],
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// A slot of `struct ibv_context_ops`: a function pointer of whatever
/// signature the slot has (the table is read by inline functions of the
/// header, such as `ibv_poll_cq`, which call through it).
pub type OpSlot = Option<unsafe extern "C" fn()>;

/// Slots in `struct ibv_context_ops`.
pub const CONTEXT_OPS: usize = 32;
/// Index of `poll_cq` in the table.
pub const OP_POLL_CQ: usize = 11;
/// Index of `req_notify_cq`.
pub const OP_REQ_NOTIFY_CQ: usize = 12;
/// Index of `post_srq_recv`.
pub const OP_POST_SRQ_RECV: usize = 20;
/// Index of `post_send`.
pub const OP_POST_SEND: usize = 25;
/// Index of `post_recv`.
pub const OP_POST_RECV: usize = 26;

/// `struct ibv_context`. `abi_compat` is `__VERBS_ABI_IS_EXTENDED`
/// (all ones), as on every context rdma-core's providers make: a
/// [`VerbsContextHead`] lies right before it. Its operations are all
/// null, so the header's inline extended verbs (`verbs_get_ctx_op`) fall
/// back to the plain ones or fail with `EOPNOTSUPP`; code that follows
/// `verbs_get_ctx` itself (libefa's `efadv_query_device` logging "Not an
/// EFA device" through it, which libfabric calls on every device) finds a
/// `struct verbs_context` there rather than a null pointer.
#[repr(C)]
#[derive(Debug)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: [OpSlot; CONTEXT_OPS],
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    /// `pthread_mutex_t` (glibc x86-64: 40 octets, all zero is
    /// `PTHREAD_MUTEX_INITIALIZER`).
    pub mutex: [u64; 5],
    pub abi_compat: *mut c_void,
}

/// `abi_compat` of an extended context (`__VERBS_ABI_IS_EXTENDED`).
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// Operations of `struct verbs_context` before `sz` (`query_port` …
/// `_ABI_placeholder3`, rdma-core 44).
pub const VERBS_CONTEXT_OPS: usize = 39;

/// `struct verbs_context` up to its last member, the `struct
/// ibv_context` that follows it in memory.
#[repr(C)]
#[derive(Debug)]
pub struct VerbsContextHead {
    /// The extended operations and `priv`: all null (none here).
    pub ops: [OpSlot; VERBS_CONTEXT_OPS],
    /// `sizeof(struct verbs_context)`: how far the operations reach.
    pub sz: usize,
}

impl VerbsContextHead {
    /// No extended operations; `sz` is the whole structure's size.
    pub fn new() -> VerbsContextHead {
        VerbsContextHead {
            ops: [None; VERBS_CONTEXT_OPS],
            sz: size_of::<VerbsContextHead>() + size_of::<IbvContext>(),
        }
    }
}

impl Default for VerbsContextHead {
    fn default() -> Self {
        Self::new()
    }
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    /// `__be64`: network order in memory.
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// The part of `struct ibv_port_attr` that `ibv_query_port` (the exported
/// function, which takes rdma-core's `struct _compat_ibv_port_attr`)
/// writes: every field up to `link_layer`, then `flags` (zero) — no
/// implicit padding, so a write puts no stray octet in the caller's
/// struct, and it ends before `port_cap_flags2`. The header's inline
/// `ibv_query_port` zeroes the whole caller's struct first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvPortAttr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    /// `flags` in today's struct (the compat struct's tail padding).
    pub flags: u8,
}

/// `union ibv_gid` (8-aligned: its other member is two `__be64`).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbvGid {
    pub raw: [u8; 16],
}

/// `enum ibv_mtu` for an Ethernet MTU: the largest RDMA MTU that fits
/// (as Linux siw reports it: 1500 → `IBV_MTU_1024`).
pub fn ibv_mtu(mtu: usize) -> c_int {
    match mtu {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    }
}

/// `pthread_mutex_t` on glibc x86-64 (40 octets; all zero is the
/// initializer).
pub type Mutex = [u64; 5];
/// `pthread_cond_t` on glibc x86-64 (48 octets; all zero is the
/// initializer).
pub type Cond = [u64; 6];

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvPd {
    pub context: *mut IbvContext,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvCq {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: Mutex,
    pub cond: Cond,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvSrq {
    pub context: *mut IbvContext,
    pub srq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub handle: u32,
    pub mutex: Mutex,
    pub cond: Cond,
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_async_event`: the element (a union of the CQ, QP, SRQ or
/// WQ pointer and the port number) and `enum ibv_event_type`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvAsyncEvent {
    pub element: *mut c_void,
    pub event_type: c_int,
}

/// `enum ibv_event_type`: `IBV_EVENT_SRQ_LIMIT_REACHED`.
pub const EVENT_SRQ_LIMIT_REACHED: c_int = 15;

/// `enum ibv_srq_attr_mask`: `IBV_SRQ_MAX_WR`.
pub const SRQ_MAX_WR: c_int = 1 << 0;
/// `enum ibv_srq_attr_mask`: `IBV_SRQ_LIMIT`.
pub const SRQ_LIMIT: c_int = 1 << 1;

/// `IBV_QPT_RC`.
pub const QPT_RC: c_int = 2;

/// `struct ibv_qp`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: Mutex,
    pub cond: Cond,
    pub events_completed: u32,
}

/// `enum ibv_qp_state`.
pub mod qps {
    use std::ffi::c_int;
    pub const RESET: c_int = 0;
    pub const INIT: c_int = 1;
    pub const RTR: c_int = 2;
    pub const RTS: c_int = 3;
    pub const SQD: c_int = 4;
    pub const SQE: c_int = 5;
    pub const ERR: c_int = 6;
}

/// `IBV_QP_STATE` in `enum ibv_qp_attr_mask`.
pub const QP_STATE: c_int = 1;
/// `IBV_QP_CUR_STATE`.
pub const QP_CUR_STATE: c_int = 1 << 1;

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// The `wr.atomic` member of `struct ibv_send_wr`'s `wr` union, the
/// largest; `wr.rdma` is its `remote_addr` and (at offset 8) ... the
/// `rdma` member's `rkey` sits at offset 8 too (`{u64 remote_addr; u32
/// rkey}`), the atomic's at 24.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SendWrWr {
    pub remote_addr: u64,
    /// `wr.rdma.rkey` (the low half) or `wr.atomic.compare_add`.
    pub word1: u64,
    /// `wr.atomic.swap`.
    pub swap: u64,
    /// `wr.atomic.rkey`.
    pub atomic_rkey: u32,
}

/// `struct ibv_send_wr` (through the `wr` union; the `qp_type` and
/// `bind_mw`/`tso` unions after it are not read: no XRC, memory window
/// binding or TSO here).
#[repr(C)]
#[derive(Debug)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: SendWrWr,
}

/// `enum ibv_wr_opcode`.
pub mod wr {
    use std::ffi::c_int;
    pub const RDMA_WRITE: c_int = 0;
    pub const RDMA_WRITE_WITH_IMM: c_int = 1;
    pub const SEND: c_int = 2;
    pub const SEND_WITH_IMM: c_int = 3;
    pub const RDMA_READ: c_int = 4;
    pub const ATOMIC_CMP_AND_SWP: c_int = 5;
    pub const ATOMIC_FETCH_AND_ADD: c_int = 6;
    pub const SEND_WITH_INV: c_int = 9;
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    pub const FENCE: u32 = 1;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// `enum ibv_access_flags`.
pub mod access {
    use std::ffi::c_int;
    pub const LOCAL_WRITE: c_int = 1;
    pub const REMOTE_WRITE: c_int = 1 << 1;
    pub const REMOTE_READ: c_int = 1 << 2;
    pub const REMOTE_ATOMIC: c_int = 1 << 3;
    pub const MW_BIND: c_int = 1 << 4;
    pub const ZERO_BASED: c_int = 1 << 5;
    pub const ON_DEMAND: c_int = 1 << 6;
    pub const HUGETLB: c_int = 1 << 7;
    /// `IBV_ACCESS_RELAXED_ORDERING` (`IBV_ACCESS_OPTIONAL_FIRST`) and the
    /// optional range above it: hints a provider may ignore.
    pub const OPTIONAL_RANGE: c_int = 0x3ff0_0000;
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `enum ibv_wc_status`.
pub mod wc_status {
    use std::ffi::c_int;
    pub const SUCCESS: c_int = 0;
    pub const LOC_LEN_ERR: c_int = 1;
    pub const LOC_QP_OP_ERR: c_int = 2;
    pub const LOC_PROT_ERR: c_int = 4;
    pub const WR_FLUSH_ERR: c_int = 5;
    pub const BAD_RESP_ERR: c_int = 7;
    pub const LOC_ACCESS_ERR: c_int = 8;
    pub const REM_INV_REQ_ERR: c_int = 9;
    pub const REM_ACCESS_ERR: c_int = 10;
    pub const REM_OP_ERR: c_int = 11;
    pub const GENERAL_ERR: c_int = 21;
}

/// `enum ibv_wc_opcode`.
pub mod wc_opcode {
    use std::ffi::c_int;
    pub const SEND: c_int = 0;
    pub const RDMA_WRITE: c_int = 1;
    pub const RDMA_READ: c_int = 2;
    pub const COMP_SWAP: c_int = 3;
    pub const FETCH_ADD: c_int = 4;
    pub const RECV: c_int = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: c_int = (1 << 7) + 1;
}

/// `IBV_WC_WITH_IMM` in `enum ibv_wc_flags`.
pub const WC_WITH_IMM: u32 = 1 << 1;
/// `IBV_WC_WITH_INV` in `enum ibv_wc_flags`.
pub const WC_WITH_INV: u32 = 1 << 3;

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

// ---- <rdma/rdma_cma.h> ----

/// `struct rdma_event_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaEventChannel {
    pub fd: c_int,
}

/// `struct rdma_addr`: source and destination as `sockaddr_storage`
/// (128 octets each), then `struct rdma_ib_addr` (two GIDs and a pkey).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaAddr {
    pub src: libc::sockaddr_storage,
    pub dst: libc::sockaddr_storage,
    pub sgid: IbvGid,
    pub dgid: IbvGid,
    pub pkey: u16,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaRoute {
    pub addr: RdmaAddr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaCmId {
    pub verbs: *mut IbvContext,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut IbvQp,
    pub route: RdmaRoute,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut RdmaCmEvent,
    pub send_cq_channel: *mut IbvCompChannel,
    pub send_cq: *mut IbvCq,
    pub recv_cq_channel: *mut IbvCompChannel,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub pd: *mut IbvPd,
    pub qp_type: c_int,
}

/// `RDMA_PS_TCP`.
pub const PS_TCP: c_int = 0x0106;

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_event`; `param` is the union of `struct
/// rdma_conn_param` and the larger `struct rdma_ud_param` (56 octets),
/// read here as the former.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    pub event: c_int,
    pub status: c_int,
    pub conn: RdmaConnParam,
    /// The rest of the union.
    pub ud_tail: [u64; 4],
}

/// `enum rdma_cm_event_type`.
pub mod cm_event {
    use std::ffi::c_int;
    pub const ADDR_RESOLVED: c_int = 0;
    pub const ADDR_ERROR: c_int = 1;
    pub const ROUTE_RESOLVED: c_int = 2;
    pub const ROUTE_ERROR: c_int = 3;
    pub const CONNECT_REQUEST: c_int = 4;
    pub const CONNECT_RESPONSE: c_int = 5;
    pub const CONNECT_ERROR: c_int = 6;
    pub const UNREACHABLE: c_int = 7;
    pub const REJECTED: c_int = 8;
    pub const ESTABLISHED: c_int = 9;
    pub const DISCONNECTED: c_int = 10;
    pub const DEVICE_REMOVAL: c_int = 11;
    pub const MULTICAST_JOIN: c_int = 12;
    pub const MULTICAST_ERROR: c_int = 13;
    pub const ADDR_CHANGE: c_int = 14;
    pub const TIMEWAIT_EXIT: c_int = 15;
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaAddrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut RdmaAddrinfo,
}

/// `RAI_PASSIVE`.
pub const RAI_PASSIVE: c_int = 1;
