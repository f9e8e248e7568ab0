//! Exports that programs and the provider libraries rdma-core ships
//! beside libibverbs bind to at load time, for things this device does
//! not do.
//!
//! Debian's perftest links `libmlx5` and `libefa`, which are linked with
//! `BIND_NOW` against libibverbs' private ABI (`IBVERBS_PRIVATE_34`:
//! `ibv_cmd_*`, `verbs_register_driver_34`…): the dynamic loader refuses
//! to start a program unless every one of those symbols is defined. They
//! serve kernel-backed devices; no device of ours reaches them (their
//! constructors call `verbs_register_driver_34`, which registers nothing
//! here), so each fails with `EOPNOTSUPP`.
//!
//! DPDK's mlx4/mlx5 drivers link the same way, and DPDK's EAL loads every
//! driver of its plugin directory with `RTLD_NOW` (`IWARP_BACKEND=dpdk`):
//! its `rte_eal_init` fails unless their libibverbs symbols resolve here
//! too (`ibv_cmd_create_cq`, the `ibv_import_*` calls).
//!
//! The public calls below are real answers for an iWARP device: no
//! address handles, multicast or shared receive queues (not in this
//! library yet), P_Key 0xffff only.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use crate::set_errno;

macro_rules! private_abi {
    ($($name:ident),* $(,)?) => {$(
        /// rdma-core's private provider ABI: not for this device.
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    )*};
}

private_abi!(
    __verbs_log,
    _verbs_init_and_alloc_context,
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
    verbs_allow_disassociate_destroy,
    verbs_init_cq,
    verbs_open_device,
    verbs_register_driver_34,
    verbs_set_ops,
    verbs_uninit_context,
);

/// `ibv_create_ah`: iWARP has no address handles.
#[no_mangle]
pub extern "C" fn ibv_create_ah(_pd: *mut c_void, _attr: *mut c_void) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

/// `ibv_create_ah_from_wc`: as [`ibv_create_ah`].
#[no_mangle]
pub extern "C" fn ibv_create_ah_from_wc(
    _pd: *mut c_void,
    _wc: *mut c_void,
    _grh: *mut c_void,
    _port: u8,
) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

/// `ibv_destroy_ah`: there is none to destroy.
#[no_mangle]
pub extern "C" fn ibv_destroy_ah(_ah: *mut c_void) -> c_int {
    libc::EINVAL
}

/// `ibv_attach_mcast`: no multicast over iWARP.
#[no_mangle]
pub extern "C" fn ibv_attach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_detach_mcast`: as [`ibv_attach_mcast`].
#[no_mangle]
pub extern "C" fn ibv_detach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_query_pkey`: one P_Key, the default 0xffff (as Linux siw).
///
/// # Safety
/// `pkey` null or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut c_void,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if ctx.is_null() || port != 1 || index != 0 || pkey.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: non-null and writable by the contract.
    unsafe { *pkey = 0xffff };
    0
}

/// `ibv_dontfork_range`: memory is not pinned for a device here (the
/// stack copies through the CPU), so a child's copy-on-write cannot
/// break a registration: nothing to do.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: as [`ibv_dontfork_range`].
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_fork_init`: as [`ibv_dontfork_range`].
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_resolve_eth_l2_from_gid`: for RoCE address handles; none here.
#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid() -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_qp_to_qp_ex`: our QPs have no extended (`ibv_wr_*`) interface.
#[no_mangle]
pub extern "C" fn ibv_qp_to_qp_ex(_qp: *mut c_void) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

/// `_ibv_query_gid_ex` (behind the header's `ibv_query_gid_ex`): not
/// here; `ibv_query_gid` answers.
#[no_mangle]
pub extern "C" fn _ibv_query_gid_ex() -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_copy_qp_attr_from_kern`, `ibv_copy_ah_attr_from_kern`,
/// `ibv_copy_path_rec_from_kern`: conversions of kernel structures for
/// kernel-backed devices (librbd links them); nothing of ours has them.
macro_rules! kernel_struct_copy {
    ($($name:ident),* $(,)?) => {$(
        /// For kernel-backed devices: copies nothing here.
        #[no_mangle]
        pub extern "C" fn $name(_dst: *mut c_void, _src: *const c_void) {}
    )*};
}

kernel_struct_copy!(
    ibv_copy_qp_attr_from_kern,
    ibv_copy_ah_attr_from_kern,
    ibv_copy_path_rec_from_kern,
);

/// `ibv_query_ece`: no enhanced connection establishment (an InfiniBand
/// and RoCE feature).
#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_set_ece`: as [`ibv_query_ece`].
#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_reg_dmabuf_mr`: memory here is the process's own, not a device
/// buffer.
#[no_mangle]
pub extern "C" fn ibv_reg_dmabuf_mr() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

/// `ibv_import_device`: a context from another process's command FD.
/// rdma-core's answer for an FD that is not a character device is
/// `EINVAL`, and `ENODEV` for one no device of the list owns: none of
/// ours has a kernel uverbs device.
#[no_mangle]
pub extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut c_void {
    // SAFETY: `stat` is plain data, all zeroes a valid value; `fstat`
    // writes it and reads nothing else (a bad FD fails with EBADF).
    let chr = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(cmd_fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFCHR
    };
    set_errno(if chr { libc::ENODEV } else { libc::EINVAL });
    null_mut()
}

/// `ibv_import_pd`: our device shares no PD with another process
/// (rdma-core's answer for a provider without `import_pd`).
#[no_mangle]
pub extern "C" fn ibv_import_pd(_ctx: *mut c_void, _pd_handle: u32) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

/// `ibv_unimport_pd`: [`ibv_import_pd`] never made one; as rdma-core's
/// default, nothing to do.
#[no_mangle]
pub extern "C" fn ibv_unimport_pd(_pd: *mut c_void) {}

/// `ibv_import_mr`: as [`ibv_import_pd`].
#[no_mangle]
pub extern "C" fn ibv_import_mr(_pd: *mut c_void, _mr_handle: u32) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

/// `ibv_unimport_mr`: as [`ibv_unimport_pd`].
#[no_mangle]
pub extern "C" fn ibv_unimport_mr(_mr: *mut c_void) {}
