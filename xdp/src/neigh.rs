//! Neighbour resolution by the kernel, for an address the stack shares
//! with it (see [`crate::bpf::SharedPorts`]).
//!
//! On a shared address ARP belongs to the kernel: the XDP program passes
//! every ARP frame to it, so the stack would never see a reply to a request
//! of its own. Instead the device ([`crate::XdpDevice`]) takes the stack's
//! ARP requests off the wire and asks the kernel: an `RTM_NEWNEIGH` with
//! `NTF_USE` makes the kernel resolve the address (it sends its own ARP
//! request, as if it had a packet for it), and `RTM_GETNEIGH` reads the
//! entry back. When the kernel has a link address, the device hands the
//! stack an ARP reply carrying it, which the stack's ARP cache takes like
//! any other reply. The rtnetlink socket is made where the device is opened,
//! so it speaks to that network namespace's neighbour table.

use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::Error;
use crate::sys;

// rtnetlink (linux/rtnetlink.h, linux/neighbour.h, linux/netlink.h).
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_CREATE: u16 = 0x400;
const NTF_USE: u8 = 0x01;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// States in which an entry's link address may be used (`NUD_VALID`):
/// REACHABLE, STALE, DELAY, PROBE, NOARP, PERMANENT.
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;
/// `struct nlmsghdr` + `struct ndmsg` + one `NDA_DST` attribute.
const REQUEST_LEN: usize = 16 + 12 + 8;

/// An rtnetlink socket for one interface's IPv4 neighbours.
#[derive(Debug)]
pub struct KernelNeighbours {
    fd: OwnedFd,
    ifindex: u32,
    seq: u32,
}

impl KernelNeighbours {
    /// A non-blocking `NETLINK_ROUTE` socket in the calling thread's network
    /// namespace, for interface `ifindex`.
    pub fn open(ifindex: u32) -> Result<KernelNeighbours, Error> {
        // SAFETY: socket(2) takes no pointers; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(Error::sys(
                "creating the rtnetlink socket for neighbours",
                sys::errno(),
            ));
        }
        Ok(KernelNeighbours {
            fd: sys::owned_fd(libc::c_long::from(fd)),
            ifindex,
            seq: 0,
        })
    }

    fn request(&mut self, kind: u16, flags: u16, ndm_flags: u8, ip: [u8; 4]) -> [u8; REQUEST_LEN] {
        self.seq = self.seq.wrapping_add(1);
        let mut m = [0u8; REQUEST_LEN];
        m[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[6..8].copy_from_slice(&flags.to_ne_bytes());
        m[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        // struct ndmsg: family, 3 pad, ifindex, state, flags, type.
        m[16] = libc::AF_INET as u8;
        m[20..24].copy_from_slice(&(self.ifindex as i32).to_ne_bytes());
        m[26] = ndm_flags;
        // NDA_DST: rta_len, rta_type, the address.
        m[28..30].copy_from_slice(&8u16.to_ne_bytes());
        m[30..32].copy_from_slice(&NDA_DST.to_ne_bytes());
        m[32..36].copy_from_slice(&ip);
        m
    }

    fn send(&self, m: &[u8], op: &'static str) -> Result<(), Error> {
        // SAFETY: `m` is a live buffer of m.len() octets, only read by the
        // call. (An unconnected netlink socket sends to port 0, the kernel,
        // and is bound automatically on its first send.)
        let n = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if n < 0 {
            return Err(Error::sys(op, sys::errno()));
        }
        Ok(())
    }

    /// Drop whatever answers are queued (acks and errors of earlier
    /// requests).
    fn drain(&self) {
        let mut buf = [0u8; 512];
        // SAFETY: `buf` is live and writable for its length; MSG_DONTWAIT
        // never blocks. Stops at the first error (EAGAIN: empty).
        while unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        } > 0
        {}
    }

    /// Have the kernel resolve `ip` on the interface (it sends an ARP
    /// request unless it has a usable entry). Returns at once.
    pub fn resolve(&mut self, ip: [u8; 4]) -> Result<(), Error> {
        self.drain();
        let m = self.request(RTM_NEWNEIGH, NLM_F_REQUEST | NLM_F_CREATE, NTF_USE, ip);
        self.send(
            &m,
            "asking the kernel to resolve a neighbour (RTM_NEWNEIGH NTF_USE)",
        )
    }

    /// The kernel's link address for `ip` on the interface, if it has a
    /// usable one.
    pub fn lookup(&mut self, ip: [u8; 4]) -> Result<Option<[u8; 6]>, Error> {
        self.drain();
        let m = self.request(RTM_GETNEIGH, NLM_F_REQUEST, 0, ip);
        self.send(&m, "reading a neighbour entry (RTM_GETNEIGH)")?;
        // rtnetlink answers within the send: the reply is queued already.
        let mut buf = [0u8; 512];
        // SAFETY: as in `drain`.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = sys::errno();
            if e == libc::EAGAIN {
                return Ok(None);
            }
            return Err(Error::sys("reading a neighbour entry (recv)", e));
        }
        Ok(parse_neigh(&buf[..n as usize], self.seq))
    }
}

/// The link address in an `RTM_NEWNEIGH` answer with sequence `seq`, if the
/// entry is usable; `None` for an error answer (ENOENT: no entry), an entry
/// still resolving or failed, or anything malformed.
fn parse_neigh(m: &[u8], seq: u32) -> Option<[u8; 6]> {
    let u16_at = |o: usize| Some(u16::from_ne_bytes(m.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_ne_bytes(m.get(o..o + 4)?.try_into().ok()?));
    let len = (u32_at(0)? as usize).min(m.len());
    if u16_at(4)? != RTM_NEWNEIGH || u32_at(8)? != seq || len < 28 {
        // NLMSG_ERROR (ENOENT: no such entry) or another message.
        return None;
    }
    let state = u16_at(24)?;
    if state & NUD_VALID == 0 {
        return None;
    }
    let mut at = 28;
    while at + 4 <= len {
        let rta_len = usize::from(u16_at(at)?);
        let rta_type = u16_at(at + 2)?;
        if rta_len < 4 || at + rta_len > len {
            return None;
        }
        if rta_type == NDA_LLADDR && rta_len == 4 + 6 {
            let mac: [u8; 6] = m[at + 4..at + 10].try_into().ok()?;
            return (mac != [0; 6]).then_some(mac);
        }
        at += (rta_len + 3) & !3;
    }
    None
}

/// Ethernet + ARP for IPv4: 42 octets.
pub(crate) const ARP_FRAME_LEN: usize = 42;

/// The target protocol address of an ARP request frame, if `f` is one.
pub(crate) fn arp_request_target(f: &[u8]) -> Option<[u8; 4]> {
    if f.len() < ARP_FRAME_LEN || f[12..14] != [0x08, 0x06] {
        return None;
    }
    // htype 1, ptype IPv4, hlen 6, plen 4, op 1 (request).
    if f[14..22] != [0, 1, 0x08, 0x00, 6, 4, 0, 1] {
        return None;
    }
    f[38..42].try_into().ok()
}

/// Whether `f` is an ARP frame (the stack's requests, replies and
/// announcements: none goes on a shared address's wire).
pub(crate) fn is_arp(f: &[u8]) -> bool {
    f.len() >= 14 && f[12..14] == [0x08, 0x06]
}

/// An ARP reply from `peer_mac`/`peer_ip` to `our_mac`/`our_ip`, as the peer
/// would have sent it.
pub(crate) fn arp_reply(
    peer_mac: [u8; 6],
    peer_ip: [u8; 4],
    our_mac: [u8; 6],
    our_ip: [u8; 4],
) -> [u8; ARP_FRAME_LEN] {
    let mut f = [0u8; ARP_FRAME_LEN];
    f[0..6].copy_from_slice(&our_mac);
    f[6..12].copy_from_slice(&peer_mac);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f[14..22].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 2]);
    f[22..28].copy_from_slice(&peer_mac);
    f[28..32].copy_from_slice(&peer_ip);
    f[32..38].copy_from_slice(&our_mac);
    f[38..42].copy_from_slice(&our_ip);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const NLMSG_ERROR: u16 = 2;

    fn answer(kind: u16, seq: u32, state: u16, lladdr: Option<[u8; 6]>) -> Vec<u8> {
        let mut m = vec![0u8; 28];
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        m[16] = libc::AF_INET as u8;
        m[24..26].copy_from_slice(&state.to_ne_bytes());
        // NDA_DST first, then NDA_LLADDR (padded to 12), as the kernel does.
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&NDA_DST.to_ne_bytes());
        m.extend_from_slice(&[10, 0, 0, 2]);
        if let Some(mac) = lladdr {
            m.extend_from_slice(&10u16.to_ne_bytes());
            m.extend_from_slice(&NDA_LLADDR.to_ne_bytes());
            m.extend_from_slice(&mac);
            m.extend_from_slice(&[0, 0]);
        }
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn parses_usable_entries_only() {
        let mac = [2, 0, 0, 0, 0, 2];
        // REACHABLE and STALE carry a usable address.
        assert_eq!(
            parse_neigh(&answer(RTM_NEWNEIGH, 7, 0x02, Some(mac)), 7),
            Some(mac)
        );
        assert_eq!(
            parse_neigh(&answer(RTM_NEWNEIGH, 7, 0x04, Some(mac)), 7),
            Some(mac)
        );
        // INCOMPLETE, FAILED, no address, another sequence, an error.
        assert_eq!(parse_neigh(&answer(RTM_NEWNEIGH, 7, 0x01, None), 7), None);
        assert_eq!(
            parse_neigh(&answer(RTM_NEWNEIGH, 7, 0x20, Some(mac)), 7),
            None
        );
        assert_eq!(parse_neigh(&answer(RTM_NEWNEIGH, 7, 0x02, None), 7), None);
        assert_eq!(
            parse_neigh(&answer(RTM_NEWNEIGH, 6, 0x02, Some(mac)), 7),
            None
        );
        assert_eq!(parse_neigh(&answer(NLMSG_ERROR, 7, 0, None), 7), None);
        // Truncated anywhere before the address's end: no address, no
        // panic (the last two octets are the attribute's padding).
        let full = answer(RTM_NEWNEIGH, 7, 0x02, Some(mac));
        assert_eq!(full.len(), 48);
        for n in 0..full.len() {
            let mut cut = full[..n].to_vec();
            if n >= 4 {
                cut[0..4].copy_from_slice(&(n as u32).to_ne_bytes());
            }
            let want = if n >= 46 { Some(mac) } else { None };
            assert_eq!(parse_neigh(&cut, 7), want, "cut at {n}");
        }
    }

    #[test]
    fn arp_frames() {
        let (pm, pi, om, oi) = (
            [2, 0, 0, 0, 0, 2],
            [10, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            [10, 0, 0, 1],
        );
        let reply = arp_reply(pm, pi, om, oi);
        assert!(is_arp(&reply));
        assert_eq!(arp_request_target(&reply), None, "a reply is no request");
        let mut req = reply;
        req[21] = 1;
        assert_eq!(arp_request_target(&req), Some(oi));
        assert_eq!(arp_request_target(&req[..41]), None);
        let mut ip = req;
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert!(!is_arp(&ip));
        assert_eq!(arp_request_target(&ip), None);
    }
}
