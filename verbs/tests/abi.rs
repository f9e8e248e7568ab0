//! The C ABI against the real thing: every structure this library fills
//! has the size and field offsets of rdma-core's `<infiniband/verbs.h>`
//! (a C probe compiled with gcc against the installed header), and
//! Debian's unmodified `ibv_devices` and `ibv_devinfo` run on
//! `libibverbs.so.1` as `scripts/verbs-build.sh` links it.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use iwarp_verbs::abi::{
    IbvContext, IbvDevice, IbvDeviceAttr, IbvGid, IbvPortAttr, VerbsContextHead,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the test needs from the machine, or why it cannot run (a failure
/// under CI: `scripts/deps.sh --test` installs them).
fn have(what: &[(&str, &str)]) -> bool {
    for (path, pkg) in what {
        if !Path::new(path).exists() {
            netns_harness::skip_test(&format!("{path} missing (apt-get install {pkg})"));
            return false;
        }
    }
    true
}

/// The structures of objects, work requests, completions and librdmacm
/// that this library reads or fills: (C type, our size, [(field, our
/// offset)]).
type Layout = (String, usize, Vec<(&'static str, usize)>);

macro_rules! layout {
    ($rust:ty, $c:expr, [$($f:ident $(= $cf:expr)?),* $(,)?]) => {
        (
            $c.to_string(),
            size_of::<$rust>(),
            vec![$((layout!(@name $f $(, $cf)?), offset_of!($rust, $f))),*],
        )
    };
    (@name $f:ident) => { stringify!($f) };
    (@name $f:ident, $cf:expr) => { $cf };
}

fn layouts() -> Vec<Layout> {
    use iwarp_verbs::abi::*;
    vec![
        layout!(IbvPd, "struct ibv_pd", [context, handle]),
        layout!(
            IbvMr,
            "struct ibv_mr",
            [context, pd, addr, length, handle, lkey, rkey]
        ),
        layout!(
            IbvCompChannel,
            "struct ibv_comp_channel",
            [context, fd, refcnt]
        ),
        layout!(
            IbvCq,
            "struct ibv_cq",
            [
                context,
                channel,
                cq_context,
                handle,
                cqe,
                mutex,
                cond,
                comp_events_completed,
                async_events_completed
            ]
        ),
        layout!(
            IbvQpCap,
            "struct ibv_qp_cap",
            [
                max_send_wr,
                max_recv_wr,
                max_send_sge,
                max_recv_sge,
                max_inline_data
            ]
        ),
        layout!(
            IbvQpInitAttr,
            "struct ibv_qp_init_attr",
            [qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all]
        ),
        layout!(
            IbvSrqAttr,
            "struct ibv_srq_attr",
            [max_wr, max_sge, srq_limit]
        ),
        layout!(
            IbvSrqInitAttr,
            "struct ibv_srq_init_attr",
            [srq_context, attr]
        ),
        layout!(
            IbvSrq,
            "struct ibv_srq",
            [
                context,
                srq_context,
                pd,
                handle,
                mutex,
                cond,
                events_completed
            ]
        ),
        layout!(
            IbvAsyncEvent,
            "struct ibv_async_event",
            [element, event_type]
        ),
        layout!(
            IbvQp,
            "struct ibv_qp",
            [
                context,
                qp_context,
                pd,
                send_cq,
                recv_cq,
                srq,
                handle,
                qp_num,
                state,
                qp_type,
                mutex,
                cond,
                events_completed
            ]
        ),
        layout!(IbvSge, "struct ibv_sge", [addr, length, lkey]),
        layout!(
            IbvRecvWr,
            "struct ibv_recv_wr",
            [wr_id, next, sg_list, num_sge]
        ),
        layout!(
            IbvWc,
            "struct ibv_wc",
            [
                wr_id,
                status,
                opcode,
                vendor_err,
                byte_len,
                imm_data,
                qp_num,
                src_qp,
                wc_flags,
                pkey_index,
                slid,
                sl,
                dlid_path_bits
            ]
        ),
        layout!(
            IbvQpAttr,
            "struct ibv_qp_attr",
            [
                qp_state,
                cur_qp_state,
                path_mtu,
                qkey,
                dest_qp_num,
                qp_access_flags,
                cap,
                ah_attr,
                alt_ah_attr,
                pkey_index,
                max_rd_atomic,
                max_dest_rd_atomic,
                min_rnr_timer,
                port_num,
                alt_timeout,
                rate_limit
            ]
        ),
        layout!(RdmaEventChannel, "struct rdma_event_channel", [fd]),
        layout!(
            RdmaAddr,
            "struct rdma_addr",
            [
                src = "src_addr",
                dst = "dst_addr",
                sgid = "addr.ibaddr.sgid",
                dgid = "addr.ibaddr.dgid",
                pkey = "addr.ibaddr.pkey"
            ]
        ),
        layout!(RdmaRoute, "struct rdma_route", [addr, path_rec, num_paths]),
        layout!(
            RdmaCmId,
            "struct rdma_cm_id",
            [
                verbs,
                channel,
                context,
                qp,
                route,
                ps,
                port_num,
                event,
                send_cq_channel,
                send_cq,
                recv_cq_channel,
                recv_cq,
                srq,
                pd,
                qp_type
            ]
        ),
        layout!(
            RdmaConnParam,
            "struct rdma_conn_param",
            [
                private_data,
                private_data_len,
                responder_resources,
                initiator_depth,
                flow_control,
                retry_count,
                rnr_retry_count,
                srq,
                qp_num
            ]
        ),
        layout!(
            RdmaCmEvent,
            "struct rdma_cm_event",
            [id, listen_id, event, status, conn = "param.conn"]
        ),
        layout!(
            RdmaAddrinfo,
            "struct rdma_addrinfo",
            [
                ai_flags,
                ai_family,
                ai_qp_type,
                ai_port_space,
                ai_src_len,
                ai_dst_len,
                ai_src_addr,
                ai_dst_addr,
                ai_src_canonname,
                ai_dst_canonname,
                ai_route_len,
                ai_route,
                ai_connect_len,
                ai_connect,
                ai_next
            ]
        ),
    ]
}

/// `ibv_send_wr` through its unions: (C expression, our offset).
fn send_wr_fields() -> Vec<(&'static str, usize)> {
    use iwarp_verbs::abi::{IbvSendWr, SendWrWr};
    let wr = offset_of!(IbvSendWr, wr);
    vec![
        ("wr_id", offset_of!(IbvSendWr, wr_id)),
        ("next", offset_of!(IbvSendWr, next)),
        ("sg_list", offset_of!(IbvSendWr, sg_list)),
        ("num_sge", offset_of!(IbvSendWr, num_sge)),
        ("opcode", offset_of!(IbvSendWr, opcode)),
        ("send_flags", offset_of!(IbvSendWr, send_flags)),
        ("imm_data", offset_of!(IbvSendWr, imm_data)),
        ("invalidate_rkey", offset_of!(IbvSendWr, imm_data)),
        (
            "wr.rdma.remote_addr",
            wr + offset_of!(SendWrWr, remote_addr),
        ),
        ("wr.rdma.rkey", wr + offset_of!(SendWrWr, word1)),
        ("wr.atomic.compare_add", wr + offset_of!(SendWrWr, word1)),
        ("wr.atomic.swap", wr + offset_of!(SendWrWr, swap)),
        ("wr.atomic.rkey", wr + offset_of!(SendWrWr, atomic_rkey)),
    ]
}

/// `name=value` lines the C probe printed.
fn probe() -> std::collections::HashMap<String, usize> {
    let dir = std::env::temp_dir().join(format!("iwarp-verbs-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    let mut line = |name: &str, expr: &str| {
        c += &format!("printf(\"{name}=%zu\\n\", (size_t)({expr}));\n");
    };
    line("device", "sizeof(struct ibv_device)");
    for f in [
        "node_type",
        "transport_type",
        "name",
        "dev_name",
        "dev_path",
        "ibdev_path",
    ] {
        line(
            &format!("device.{f}"),
            &format!("offsetof(struct ibv_device, {f})"),
        );
    }
    line("context", "sizeof(struct ibv_context)");
    line("context_ops", "sizeof(struct ibv_context_ops)");
    for f in [
        "ops",
        "cmd_fd",
        "async_fd",
        "num_comp_vectors",
        "mutex",
        "abi_compat",
    ] {
        line(
            &format!("context.{f}"),
            &format!("offsetof(struct ibv_context, {f})"),
        );
    }
    for f in [
        "poll_cq",
        "req_notify_cq",
        "post_srq_recv",
        "post_send",
        "post_recv",
    ] {
        line(
            &format!("ops.{f}"),
            &format!("offsetof(struct ibv_context_ops, {f})"),
        );
    }
    line("verbs_context", "sizeof(struct verbs_context)");
    line("verbs_context.sz", "offsetof(struct verbs_context, sz)");
    line(
        "verbs_context.context",
        "offsetof(struct verbs_context, context)",
    );
    line("device_attr", "sizeof(struct ibv_device_attr)");
    for f in [
        "node_guid",
        "max_mr_size",
        "vendor_id",
        "max_qp",
        "device_cap_flags",
        "max_sge",
        "max_qp_rd_atom",
        "atomic_cap",
        "max_srq_sge",
        "max_pkeys",
        "local_ca_ack_delay",
        "phys_port_cnt",
    ] {
        line(
            &format!("device_attr.{f}"),
            &format!("offsetof(struct ibv_device_attr, {f})"),
        );
    }
    for f in [
        "state",
        "gid_tbl_len",
        "max_msg_sz",
        "pkey_tbl_len",
        "lid",
        "lmc",
        "active_width",
        "phys_state",
        "link_layer",
        "flags",
        "port_cap_flags2",
    ] {
        line(
            &format!("port_attr.{f}"),
            &format!("offsetof(struct ibv_port_attr, {f})"),
        );
    }
    line("gid", "sizeof(union ibv_gid)");
    line("IBV_EVENT_SRQ_LIMIT_REACHED", "IBV_EVENT_SRQ_LIMIT_REACHED");
    for (f, _) in send_wr_fields() {
        line(
            &format!("send_wr.{f}"),
            &format!("offsetof(struct ibv_send_wr, {f})"),
        );
    }
    for (cty, _, fields) in layouts() {
        line(&cty, &format!("sizeof({cty})"));
        for (f, _) in fields {
            line(&format!("{cty}.{f}"), &format!("offsetof({cty}, {f})"));
        }
    }
    c += "return 0; }\n";
    std::fs::write(&src, c).unwrap();
    let out = Command::new("gcc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn structures_match_rdma_core_44() {
    if !have(&[
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/usr/bin/gcc", "gcc"),
    ]) {
        return;
    }
    let c = probe();
    let want = |k: &str| *c.get(k).unwrap_or_else(|| panic!("{k} not probed"));
    assert_eq!(size_of::<IbvDevice>(), want("device"));
    assert_eq!(offset_of!(IbvDevice, node_type), want("device.node_type"));
    assert_eq!(
        offset_of!(IbvDevice, transport_type),
        want("device.transport_type")
    );
    assert_eq!(offset_of!(IbvDevice, name), want("device.name"));
    assert_eq!(offset_of!(IbvDevice, dev_name), want("device.dev_name"));
    assert_eq!(offset_of!(IbvDevice, dev_path), want("device.dev_path"));
    assert_eq!(offset_of!(IbvDevice, ibdev_path), want("device.ibdev_path"));

    assert_eq!(size_of::<IbvContext>(), want("context"));
    assert_eq!(
        iwarp_verbs::abi::CONTEXT_OPS * size_of::<usize>(),
        want("context_ops")
    );
    assert_eq!(offset_of!(IbvContext, ops), want("context.ops"));
    assert_eq!(offset_of!(IbvContext, cmd_fd), want("context.cmd_fd"));
    assert_eq!(offset_of!(IbvContext, async_fd), want("context.async_fd"));
    assert_eq!(
        offset_of!(IbvContext, num_comp_vectors),
        want("context.num_comp_vectors")
    );
    assert_eq!(offset_of!(IbvContext, mutex), want("context.mutex"));
    assert_eq!(
        offset_of!(IbvContext, abi_compat),
        want("context.abi_compat")
    );
    let slot = |i: usize| i * size_of::<usize>();
    use iwarp_verbs::abi::{
        OP_POLL_CQ, OP_POST_RECV, OP_POST_SEND, OP_POST_SRQ_RECV, OP_REQ_NOTIFY_CQ,
    };
    assert_eq!(slot(OP_POLL_CQ), want("ops.poll_cq"));
    assert_eq!(slot(OP_REQ_NOTIFY_CQ), want("ops.req_notify_cq"));
    assert_eq!(slot(OP_POST_SRQ_RECV), want("ops.post_srq_recv"));
    assert_eq!(slot(OP_POST_SEND), want("ops.post_send"));
    assert_eq!(slot(OP_POST_RECV), want("ops.post_recv"));

    // An extended context: `struct verbs_context` ends with the
    // `struct ibv_context` that programs get.
    assert_eq!(size_of::<VerbsContextHead>(), want("verbs_context.context"));
    assert_eq!(offset_of!(VerbsContextHead, sz), want("verbs_context.sz"));
    assert_eq!(VerbsContextHead::new().sz, want("verbs_context"));

    assert_eq!(size_of::<IbvDeviceAttr>(), want("device_attr"));
    macro_rules! attr {
        ($($f:ident),*) => {$(
            assert_eq!(
                offset_of!(IbvDeviceAttr, $f),
                want(concat!("device_attr.", stringify!($f))),
                stringify!($f)
            );
        )*};
    }
    attr!(
        node_guid,
        max_mr_size,
        vendor_id,
        max_qp,
        device_cap_flags,
        max_sge,
        max_qp_rd_atom,
        atomic_cap,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt
    );
    macro_rules! port {
        ($($f:ident),*) => {$(
            assert_eq!(
                offset_of!(IbvPortAttr, $f),
                want(concat!("port_attr.", stringify!($f))),
                stringify!($f)
            );
        )*};
    }
    port!(
        state,
        gid_tbl_len,
        max_msg_sz,
        pkey_tbl_len,
        lid,
        lmc,
        active_width,
        phys_state,
        link_layer,
        flags
    );
    // What ibv_query_port writes (the compat part, `flags` zeroed, no
    // padding of its own) ends where `port_cap_flags2` begins: never past
    // the caller's struct, no stray octet in it.
    assert_eq!(size_of::<IbvPortAttr>(), want("port_attr.port_cap_flags2"));
    assert_eq!(offset_of!(IbvPortAttr, flags) + 1, size_of::<IbvPortAttr>());
    assert_eq!(size_of::<IbvGid>(), want("gid"));
    assert_eq!(
        iwarp_verbs::abi::EVENT_SRQ_LIMIT_REACHED as usize,
        want("IBV_EVENT_SRQ_LIMIT_REACHED")
    );
    for (cty, size, fields) in layouts() {
        assert_eq!(size, want(&cty), "sizeof({cty})");
        for (f, off) in fields {
            assert_eq!(off, want(&format!("{cty}.{f}")), "offsetof({cty}, {f})");
        }
    }
    for (f, off) in send_wr_fields() {
        assert_eq!(
            off,
            want(&format!("send_wr.{f}")),
            "offsetof(struct ibv_send_wr, {f})"
        );
    }
}

/// Run `program args` on our library with `IWARP_IFACE=lo`.
fn run(env_iface: Option<&str>, program: &str, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(root().join("scripts/verbs-run.sh"));
    cmd.arg(program).args(args);
    match env_iface {
        Some(i) => cmd.env("IWARP_IFACE", i),
        None => cmd.env_remove("IWARP_IFACE"),
    };
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unmodified_ibv_devices_and_ibv_devinfo_see_our_device() {
    if !have(&[
        ("/usr/bin/ibv_devinfo", "ibverbs-utils"),
        ("/usr/bin/ibv_devices", "ibverbs-utils"),
        ("/usr/bin/gcc", "gcc"),
    ]) {
        return;
    }
    let (ok, out, err) = run(Some("lo"), "ibv_devices", &[]);
    assert!(ok, "{out}{err}");
    // lo's MAC is all zeros: the EUI-64 GUID with the U/L bit flipped.
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().eq(["iwarp0", "020000fffe000000"])),
        "{out}"
    );
    let (ok, out, err) = run(Some("lo"), "ibv_devinfo", &["-v"]);
    assert!(ok, "{out}{err}");
    for want in [
        "hca_id:\tiwarp0",
        "transport:\t\t\tiWARP (1)",
        "fw_ver:\t\t\t\tiwarp-rs",
        "phys_port_cnt:\t\t\t1",
        "max_sge:\t\t\t4",
        // What the C ABI has: SRQs, no memory windows (`ibv_alloc_mw`
        // fails with EOPNOTSUPP, so none are promised).
        "max_mw:\t\t\t\t0",
        "max_srq:\t\t\t65536",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        // lo's MTU (65536) holds the largest RDMA MTU.
        "active_mtu:\t\t4096 (5)",
    ] {
        assert!(out.contains(want), "no {want:?} in\n{out}");
    }
    // No interface configured: no device, and the reason on stderr.
    let (_, out, err) = run(None, "ibv_devices", &[]);
    assert!(!out.contains("iwarp0"), "{out}");
    assert!(err.contains("set IWARP_IFACE"), "{err}");
    let (_, out, err) = run(Some("no-such-if0"), "ibv_devices", &[]);
    assert!(!out.contains("iwarp0"), "{out}");
    assert!(err.contains("no-such-if0: no such interface"), "{err}");
}

/// `IWARP_BACKEND=dpdk`: the device is listed and queried from the
/// environment alone (GUID from the MAC the memif port will have, made
/// from `IWARP_IP`), without starting DPDK: no memif socket appears. A
/// missing port is named on standard error.
#[test]
fn ibv_devinfo_sees_a_dpdk_device_without_starting_it() {
    if !have(&[
        ("/usr/bin/ibv_devinfo", "ibverbs-utils"),
        ("/usr/bin/gcc", "gcc"),
    ]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("iwarp-abi-dpdk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let dpdk = |memif: Option<String>, program: &str, args: &[&str]| {
        let mut cmd = Command::new(root().join("scripts/verbs-run.sh"));
        cmd.arg(program)
            .args(args)
            .env_remove("IWARP_IFACE")
            .env("IWARP_BACKEND", "dpdk")
            .env("IWARP_IP", "10.81.0.1/24")
            .env_remove("IWARP_DPDK_VDEV");
        match memif {
            Some(m) => cmd.env("IWARP_MEMIF", m),
            None => cmd.env_remove("IWARP_MEMIF"),
        };
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let memif = Some(format!("server:{}", sock.display()));
    let (ok, out, err) = dpdk(memif, "ibv_devinfo", &["-v"]);
    let made_socket = sock.exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "{out}{err}");
    for want in [
        "hca_id:\tiwarp0",
        "transport:\t\t\tiWARP (1)",
        // 02:00:0a:51:00:01 (10.81.0.1) as a modified EUI-64.
        "node_guid:\t\t\t0000:0aff:fe51:0001",
        "state:\t\t\tPORT_ACTIVE (4)",
        // The port's default MTU, 1500, holds 1024-octet RDMA MTUs.
        "active_mtu:\t\t1024 (3)",
    ] {
        assert!(out.contains(want), "no {want:?} in\n{out}");
    }
    assert!(!made_socket, "ibv_devinfo started the stack:\n{out}{err}");
    let (_, out, err) = dpdk(None, "ibv_devices", &[]);
    assert!(!out.contains("iwarp0"), "{out}");
    assert!(
        err.contains("IWARP_BACKEND=dpdk: set IWARP_MEMIF=server:"),
        "{err}"
    );
}
