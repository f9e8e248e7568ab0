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

/// `struct ibv_context`. `abi_compat` is not `__VERBS_ABI_IS_EXTENDED`:
/// the header's inline extended verbs (`verbs_get_ctx`) see a context
/// without them and fall back to the plain ones or fail with
/// `EOPNOTSUPP`.
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

/// `union ibv_gid`.
#[repr(C)]
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
