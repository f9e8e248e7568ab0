//! A small eBPF assembler and the XDP program that steers the stack's own
//! traffic to its AF_XDP sockets.
//!
//! # The program
//!
//! For each received frame (`r1` = `struct xdp_md *`):
//!
//! 1. If the frame is shorter than an Ethernet header: `XDP_PASS`.
//! 2. EtherType ARP (0x0806): if the frame holds a whole ARP packet
//!    (14 + 28 octets) and the ARP *target protocol address* (offset 14 + 24)
//!    is ours, redirect; otherwise `XDP_PASS`. So requests for our address and
//!    replies to our requests reach the stack, and every other ARP packet
//!    (requests for the kernel's addresses, gratuitous ARP, replies to the
//!    kernel) stays with the kernel. VLAN-tagged frames always pass.
//! 3. EtherType IPv4 (0x0800): if the frame holds an IPv4 header (14 + 20)
//!    and the destination address (offset 14 + 16) is ours, redirect;
//!    otherwise `XDP_PASS`.
//! 4. Anything else: `XDP_PASS`.
//!
//! "Redirect" is `bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)`:
//! the frame goes to the AF_XDP socket bound to the queue it arrived on, and
//! when no socket is in the map at that index the low bits of the flags
//! (`XDP_PASS`) are the fallback action, so the kernel gets it.
//!
//! Only the IPv4 address is matched, not the destination MAC: a frame for
//! our address is ours whatever link address it was sent to. Our address
//! must not also be configured on the kernel's side of the interface.
//!
//! # Sharing the kernel's address ([`SharedPorts`])
//!
//! [`xdp_shared_program`] is the variant for an address the kernel owns
//! too (a Kubernetes pod's only address). It steers only TCP segments to
//! the stack's ports and leaves everything else, ARP included, to the
//! kernel:
//!
//! 1. Shorter than an Ethernet header, not IPv4 (ARP, IPv6, VLAN tags):
//!    `XDP_PASS`.
//! 2. IPv4 whose header is not exactly 20 octets (options), whose protocol
//!    is not TCP (6), that is a fragment (MF set or a fragment offset), or
//!    that does not hold the TCP ports (14 + 20 + 4 octets): `XDP_PASS`.
//! 3. Destination address not ours: `XDP_PASS`.
//! 4. TCP destination port ≥ [`SharedPorts::local_from`] (the stack's
//!    outgoing connections) or one of [`SharedPorts::listen`]: redirect as
//!    above. Any other port: `XDP_PASS`.
//!
//! Addresses are compared as they lie in the frame: a 32-bit load of the four
//! network-order octets gives `u32::from_ne_bytes(octets)` on any host, and
//! the comparisons are 32-bit (`BPF_JMP32`), so an address whose last octet is
//! ≥ 128 is not sign-extended into a mismatch.

use crate::sys;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high nibble.
    pub regs: u8,
    /// Signed offset (memory and jumps).
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src.0 << 4) | (dst.0 & 0x0f),
            off,
            imm,
        }
    }

    /// `dst_reg`.
    pub const fn dst(&self) -> u8 {
        self.regs & 0x0f
    }

    /// `src_reg`.
    pub const fn src(&self) -> u8 {
        self.regs >> 4
    }

    /// The eight octets as the kernel reads them (little-endian host).
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// A register, `r0`–`r10`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(pub u8);

/// Return value / helper result.
pub const R0: Reg = Reg(0);
/// First argument (the context on entry).
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);

// Opcode parts (linux/bpf_common.h, linux/bpf.h).
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_ALU: u8 = 0x04;
const BPF_ALU64: u8 = 0x07;
const BPF_JMP: u8 = 0x05;
const BPF_JMP32: u8 = 0x06;
const BPF_W: u8 = 0x00;
const BPF_H: u8 = 0x08;
const BPF_B: u8 = 0x10;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;
const BPF_ADD: u8 = 0x00;
const BPF_AND: u8 = 0x50;
const BPF_MOV: u8 = 0xb0;
const BPF_END: u8 = 0xd0;
/// `BPF_END` source bit: convert to big endian.
const BPF_TO_BE: u8 = 0x08;
const BPF_JA: u8 = 0x00;
const BPF_JEQ: u8 = 0x10;
const BPF_JGT: u8 = 0x20;
const BPF_JGE: u8 = 0x30;
const BPF_JNE: u8 = 0x50;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
/// `src_reg` of a `BPF_LD_IMM64` whose immediate is a map fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Memory access size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// 8 bits.
    Byte,
    /// 16 bits.
    Half,
    /// 32 bits.
    Word,
}

/// A jump condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// Unsigned `>`.
    Gt,
    /// Unsigned `>=`.
    Ge,
}

impl Cond {
    fn op(self) -> u8 {
        match self {
            Cond::Eq => BPF_JEQ,
            Cond::Ne => BPF_JNE,
            Cond::Gt => BPF_JGT,
            Cond::Ge => BPF_JGE,
        }
    }
}

/// A jump target, resolved by [`Asm::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// An assembler: instructions, labels, and jumps to fix up.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

/// A jump to a label that was never placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnplacedLabel;

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A new label, to be placed later with [`place`](Self::place).
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Put `l` at the next instruction.
    pub fn place(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }

    fn push(&mut self, i: Insn) -> &mut Asm {
        self.insns.push(i);
        self
    }

    /// `dst = src` (64-bit).
    pub fn mov(&mut self, dst: Reg, src: Reg) -> &mut Asm {
        self.push(Insn::new(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0))
    }

    /// `dst = imm` (64-bit, sign-extended).
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) -> &mut Asm {
        self.push(Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, dst, R0, 0, imm))
    }

    /// `dst += imm` (64-bit).
    pub fn add_imm(&mut self, dst: Reg, imm: i32) -> &mut Asm {
        self.push(Insn::new(BPF_ALU64 | BPF_ADD | BPF_K, dst, R0, 0, imm))
    }

    /// `dst &= imm` (64-bit, `imm` sign-extended).
    pub fn and_imm(&mut self, dst: Reg, imm: i32) -> &mut Asm {
        self.push(Insn::new(BPF_ALU64 | BPF_AND | BPF_K, dst, R0, 0, imm))
    }

    /// `dst = htobe16(dst)`: the low 16 bits in network order become a
    /// number (a byte swap on little-endian hosts, a truncation on
    /// big-endian ones), upper bits cleared.
    pub fn be16(&mut self, dst: Reg) -> &mut Asm {
        self.push(Insn::new(BPF_ALU | BPF_END | BPF_TO_BE, dst, R0, 0, 16))
    }

    /// `dst = *(size *)(src + off)` (zero-extended).
    pub fn ldx(&mut self, size: Size, dst: Reg, src: Reg, off: i16) -> &mut Asm {
        let sz = match size {
            Size::Byte => BPF_B,
            Size::Half => BPF_H,
            Size::Word => BPF_W,
        };
        self.push(Insn::new(BPF_LDX | BPF_MEM | sz, dst, src, off, 0))
    }

    /// `dst = map` : the 16-octet `BPF_LD_IMM64` with
    /// `src_reg = BPF_PSEUDO_MAP_FD`, which the verifier turns into a
    /// pointer to the map.
    pub fn ld_map_fd(&mut self, dst: Reg, map_fd: i32) -> &mut Asm {
        self.push(Insn::new(
            BPF_LD | BPF_DW | BPF_IMM,
            dst,
            Reg(BPF_PSEUDO_MAP_FD),
            0,
            map_fd,
        ));
        self.push(Insn::default())
    }

    /// `if dst <cond> src goto l` (64-bit).
    pub fn jmp_reg(&mut self, cond: Cond, dst: Reg, src: Reg, l: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), l));
        self.push(Insn::new(BPF_JMP | cond.op() | BPF_X, dst, src, 0, 0))
    }

    /// `if (u32)dst <cond> (u32)imm goto l` (32-bit, `BPF_JMP32`).
    pub fn jmp32_imm(&mut self, cond: Cond, dst: Reg, imm: u32, l: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), l));
        self.push(Insn::new(
            BPF_JMP32 | cond.op() | BPF_K,
            dst,
            R0,
            0,
            imm as i32,
        ))
    }

    /// `goto l`.
    pub fn ja(&mut self, l: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), l));
        self.push(Insn::new(BPF_JMP | BPF_JA, R0, R0, 0, 0))
    }

    /// Call helper `id`.
    pub fn call(&mut self, id: i32) -> &mut Asm {
        self.push(Insn::new(BPF_JMP | BPF_CALL, R0, R0, 0, id))
    }

    /// `return r0`.
    pub fn exit(&mut self) -> &mut Asm {
        self.push(Insn::new(BPF_JMP | BPF_EXIT, R0, R0, 0, 0))
    }

    /// Resolve the jumps.
    pub fn finish(mut self) -> Result<Vec<Insn>, UnplacedLabel> {
        for &(at, l) in &self.fixups {
            let target = self.labels[l.0].ok_or(UnplacedLabel)?;
            let off = target as i64 - (at as i64 + 1);
            self.insns[at].off = i16::try_from(off).map_err(|_| UnplacedLabel)?;
        }
        Ok(self.insns)
    }
}

/// Offsets into `struct xdp_md`.
mod xdp_md {
    pub const DATA: i16 = 0;
    pub const DATA_END: i16 = 4;
    pub const RX_QUEUE_INDEX: i16 = 16;
}

const ETH_HLEN: i32 = 14;
const ETHERTYPE_OFF: i16 = 12;
/// Ethernet + ARP for IPv4 over Ethernet.
const ARP_END: i32 = ETH_HLEN + 28;
/// ARP target protocol address.
const ARP_TPA_OFF: i16 = 14 + 24;
/// Ethernet + minimal IPv4 header.
const IPV4_END: i32 = ETH_HLEN + 20;
/// IPv4 destination address.
const IPV4_DST_OFF: i16 = 14 + 16;
/// IPv4 version and header length.
const IPV4_VIHL_OFF: i16 = 14;
/// IPv4 flags and fragment offset.
const IPV4_FRAG_OFF: i16 = 14 + 6;
/// IPv4 protocol.
const IPV4_PROTO_OFF: i16 = 14 + 9;
/// TCP destination port behind a 20-octet IPv4 header.
const TCP_DPORT_OFF: i16 = 14 + 20 + 2;
/// Ethernet + 20-octet IPv4 + TCP source and destination ports.
const TCP_PORTS_END: i32 = 14 + 20 + 4;

/// The filter program (see the module docs) for `our_ip`, redirecting to the
/// XSKMAP `map_fd`.
pub fn xdp_filter_program(our_ip: [u8; 4], map_fd: i32) -> Vec<Insn> {
    // Loads are host-endian: a 16-bit load of the EtherType's two
    // network-order octets yields u16::from_ne_bytes(those octets).
    let arp = u16::from_ne_bytes(0x0806u16.to_be_bytes()) as u32;
    let ipv4 = u16::from_ne_bytes(0x0800u16.to_be_bytes()) as u32;
    let ours = u32::from_ne_bytes(our_ip);

    let mut a = Asm::new();
    let pass = a.label();
    let is_arp = a.label();
    let redirect = a.label();

    // r2 = data, r3 = data_end; r4 = data + 14; if r4 > r3: pass
    a.ldx(Size::Word, R2, R1, xdp_md::DATA)
        .ldx(Size::Word, R3, R1, xdp_md::DATA_END)
        .mov(R4, R2)
        .add_imm(R4, ETH_HLEN)
        .jmp_reg(Cond::Gt, R4, R3, pass)
        // r5 = ethertype
        .ldx(Size::Half, R5, R2, ETHERTYPE_OFF)
        .jmp32_imm(Cond::Eq, R5, arp, is_arp)
        .jmp32_imm(Cond::Ne, R5, ipv4, pass)
        // IPv4: r4 = data + 34; if r4 > r3: pass; if dst != ours: pass
        .mov(R4, R2)
        .add_imm(R4, IPV4_END)
        .jmp_reg(Cond::Gt, R4, R3, pass)
        .ldx(Size::Word, R5, R2, IPV4_DST_OFF)
        .jmp32_imm(Cond::Ne, R5, ours, pass)
        .ja(redirect);
    a.place(is_arp);
    // ARP: r4 = data + 42; if r4 > r3: pass; if target != ours: pass
    a.mov(R4, R2)
        .add_imm(R4, ARP_END)
        .jmp_reg(Cond::Gt, R4, R3, pass)
        .ldx(Size::Word, R5, R2, ARP_TPA_OFF)
        .jmp32_imm(Cond::Ne, R5, ours, pass);
    a.place(redirect);
    // return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
    a.ldx(Size::Word, R2, R1, xdp_md::RX_QUEUE_INDEX)
        .ld_map_fd(R1, map_fd)
        .mov_imm(R3, sys::XDP_PASS)
        .call(sys::BPF_FUNC_REDIRECT_MAP)
        .exit();
    a.place(pass);
    a.mov_imm(R0, sys::XDP_PASS).exit();
    // Every label above is placed and every jump is short.
    a.finish().unwrap_or_default()
}

/// The ports the stack owns on an address it shares with the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPorts {
    /// Its listening ports (at most [`SharedPorts::MAX_LISTEN`]).
    pub listen: Vec<u16>,
    /// First local port of its outgoing connections: it picks them from
    /// `local_from..=65535`, and every segment to a port in that range is
    /// its. The operator keeps the kernel off the range with
    /// `sysctl net.ipv4.ip_local_reserved_ports=LOCAL_FROM-65535` (and runs
    /// no kernel server on a port in it).
    pub local_from: u16,
}

impl SharedPorts {
    /// Most listening ports the program checks.
    pub const MAX_LISTEN: usize = 64;
    /// The default `local_from`: the top 4096 ports.
    pub const DEFAULT_LOCAL_FROM: u16 = 61440;

    /// `listen` and the default range for outgoing connections.
    pub fn new(listen: &[u16]) -> SharedPorts {
        SharedPorts {
            listen: listen.to_vec(),
            local_from: Self::DEFAULT_LOCAL_FROM,
        }
    }

    /// Why these ports cannot be steered, if they cannot.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.listen.len() > Self::MAX_LISTEN {
            return Err("at most 64 listening ports on a shared address");
        }
        if self.listen.contains(&0) {
            return Err("port 0 cannot be a listening port");
        }
        if self.local_from < 1024 {
            return Err("the local port range of a shared address must start at 1024 or above");
        }
        Ok(())
    }
}

/// The filter for an address shared with the kernel (see the module
/// docs): TCP to `ports` at `our_ip` is redirected to the XSKMAP `map_fd`,
/// everything else passes. `ports` must pass [`SharedPorts::check`]
/// (extra listening ports are ignored).
pub fn xdp_shared_program(our_ip: [u8; 4], ports: &SharedPorts, map_fd: i32) -> Vec<Insn> {
    let ipv4 = u16::from_ne_bytes(0x0800u16.to_be_bytes()) as u32;
    let ours = u32::from_ne_bytes(our_ip);
    // MF and the fragment offset, as the 16-bit load sees them.
    let frag_mask = i32::from(u16::from_ne_bytes(0x3fffu16.to_be_bytes()));

    let mut a = Asm::new();
    let pass = a.label();
    let redirect = a.label();

    // r2 = data, r3 = data_end; need Ethernet + IPv4 (20) + the TCP ports.
    a.ldx(Size::Word, R2, R1, xdp_md::DATA)
        .ldx(Size::Word, R3, R1, xdp_md::DATA_END)
        .mov(R4, R2)
        .add_imm(R4, ETH_HLEN)
        .jmp_reg(Cond::Gt, R4, R3, pass)
        .ldx(Size::Half, R5, R2, ETHERTYPE_OFF)
        .jmp32_imm(Cond::Ne, R5, ipv4, pass)
        .mov(R4, R2)
        .add_imm(R4, TCP_PORTS_END)
        .jmp_reg(Cond::Gt, R4, R3, pass)
        // Version 4, header length 5 words.
        .ldx(Size::Byte, R5, R2, IPV4_VIHL_OFF)
        .jmp32_imm(Cond::Ne, R5, 0x45, pass)
        .ldx(Size::Byte, R5, R2, IPV4_PROTO_OFF)
        .jmp32_imm(Cond::Ne, R5, 6, pass)
        .ldx(Size::Half, R5, R2, IPV4_FRAG_OFF)
        .and_imm(R5, frag_mask)
        .jmp32_imm(Cond::Ne, R5, 0, pass)
        .ldx(Size::Word, R5, R2, IPV4_DST_OFF)
        .jmp32_imm(Cond::Ne, R5, ours, pass)
        // r5 = TCP destination port, as a number.
        .ldx(Size::Half, R5, R2, TCP_DPORT_OFF)
        .be16(R5)
        .jmp32_imm(Cond::Ge, R5, u32::from(ports.local_from), redirect);
    for &p in ports.listen.iter().take(SharedPorts::MAX_LISTEN) {
        a.jmp32_imm(Cond::Eq, R5, u32::from(p), redirect);
    }
    a.ja(pass);
    a.place(redirect);
    a.ldx(Size::Word, R2, R1, xdp_md::RX_QUEUE_INDEX)
        .ld_map_fd(R1, map_fd)
        .mov_imm(R3, sys::XDP_PASS)
        .call(sys::BPF_FUNC_REDIRECT_MAP)
        .exit();
    a.place(pass);
    a.mov_imm(R0, sys::XDP_PASS).exit();
    // Every label above is placed and every jump is short (< 100 insns).
    a.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(i: &Insn) -> [u8; 8] {
        i.to_bytes()
    }

    #[test]
    fn encodings() {
        let mut a = Asm::new();
        let l = a.label();
        a.mov(R4, R2) // bf 24
            .add_imm(R4, 14) // 07 04 .. 0e
            .ldx(Size::Word, R2, R1, 16) // 61 12 10 00
            .ldx(Size::Half, R5, R2, 12) // 69 25 0c 00
            .ld_map_fd(R1, 7) // 18 11 00 00 07 00 00 00 + zeros
            .jmp32_imm(Cond::Ne, R5, 0xc800_000a, l) // 56 05
            .jmp_reg(Cond::Gt, R4, R3, l) // 2d 34
            .call(51) // 85 00 .. 33
            .mov_imm(R0, 2) // b7 00 .. 02
            .ja(l); // 05 00
        a.place(l);
        a.exit(); // 95
        let p = a.finish().expect("labels");
        assert_eq!(bytes(&p[0]), [0xbf, 0x24, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(&p[1]), [0x07, 0x04, 0, 0, 14, 0, 0, 0]);
        assert_eq!(bytes(&p[2]), [0x61, 0x12, 16, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(&p[3]), [0x69, 0x25, 12, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(&p[4]), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes(&p[5]), [0; 8]);
        // jmp32 at index 6 → exit at index 11: off = 11 - 7 = 4
        assert_eq!(bytes(&p[6]), [0x56, 0x05, 4, 0, 0x0a, 0, 0, 0xc8]);
        assert_eq!(bytes(&p[7]), [0x2d, 0x34, 3, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(&p[8]), [0x85, 0x00, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes(&p[9]), [0xb7, 0x00, 0, 0, 2, 0, 0, 0]);
        assert_eq!(bytes(&p[10]), [0x05, 0x00, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(&p[11]), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p[4].src(), 1);
        assert_eq!(p[4].dst(), 1);
    }

    #[test]
    fn unplaced_label_is_an_error() {
        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        assert_eq!(a.finish(), Err(UnplacedLabel));
    }

    /// A tiny interpreter for exactly the instructions the program uses, to
    /// check the program's decisions on sample frames without the kernel.
    fn run(prog: &[Insn], frame: &[u8], queue: u32) -> (i64, Option<(i32, u64, u64)>) {
        const DATA: u64 = 0x1000;
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        let mut redirect = None;
        let mem = |addr: u64, size: usize| -> u64 {
            let off = (addr - DATA) as usize;
            let b = &frame[off..off + size];
            match size {
                1 => b[0] as u64,
                2 => u16::from_ne_bytes([b[0], b[1]]) as u64,
                4 => u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as u64,
                _ => unreachable!(),
            }
        };
        loop {
            let i = prog[pc];
            let (d, s) = (i.dst() as usize, i.src() as usize);
            pc += 1;
            match i.code {
                0xbf => r[d] = r[s],
                0xb7 => r[d] = i.imm as i64 as u64,
                0x07 => r[d] = r[d].wrapping_add(i.imm as i64 as u64),
                0x61 if s == 1 => {
                    // ctx loads: data, data_end, rx_queue_index
                    r[d] = match i.off {
                        0 => DATA,
                        4 => DATA + frame.len() as u64,
                        16 => queue as u64,
                        o => panic!("ctx offset {o}"),
                    }
                }
                0x61 => r[d] = mem(r[s].wrapping_add(i.off as u64), 4),
                0x69 => r[d] = mem(r[s].wrapping_add(i.off as u64), 2),
                0x71 => r[d] = mem(r[s].wrapping_add(i.off as u64), 1),
                0x57 => r[d] &= i.imm as i64 as u64,
                // htobe16: as the kernel does it on this (little-endian
                // or big-endian) host.
                0xdc => {
                    assert_eq!(i.imm, 16);
                    r[d] = u16::from_ne_bytes((r[d] as u16).to_be_bytes()) as u64;
                }
                0x36 => {
                    if r[d] as u32 >= i.imm as u32 {
                        pc = (pc as i64 + i.off as i64) as usize;
                    }
                }
                0x18 => {
                    r[d] = 0xdead_0000 | i.imm as u64;
                    pc += 1;
                }
                0x2d => {
                    if r[d] > r[s] {
                        pc = (pc as i64 + i.off as i64) as usize;
                    }
                }
                0x16 | 0x56 => {
                    let eq = r[d] as u32 == i.imm as u32;
                    if eq == (i.code == 0x16) {
                        pc = (pc as i64 + i.off as i64) as usize;
                    }
                }
                0x05 => pc = (pc as i64 + i.off as i64) as usize,
                0x85 => {
                    assert_eq!(i.imm, 51);
                    redirect = Some((r[1] as i32, r[2], r[3]));
                    r[0] = 4; // XDP_REDIRECT
                }
                0x95 => return (r[0] as i64, redirect),
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn arp(target: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0, 1, 8, 0, 6, 4, 0, 1];
        p.extend_from_slice(&[2, 0, 0, 0, 0, 1, 10, 0, 0, 2]);
        p.extend_from_slice(&[0; 6]);
        p.extend_from_slice(&target);
        eth(0x0806, &p)
    }

    fn ipv4(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 2];
        p.extend_from_slice(&dst);
        p.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0]);
        eth(0x0800, &p)
    }

    #[test]
    fn program_decisions() {
        // .200: the last octet has the top bit set (sign-extension check).
        for ours in [[10, 1, 2, 1], [10, 1, 2, 200]] {
            let prog = xdp_filter_program(ours, 9);
            let redirected = |f: &[u8]| {
                let (ret, call) = run(&prog, f, 3);
                match call {
                    Some((map, q, flags)) => {
                        assert_eq!((map, q, flags, ret), (0xdead_0009u32 as i32, 3, 2, 4));
                        true
                    }
                    None => {
                        assert_eq!(ret, 2, "XDP_PASS");
                        false
                    }
                }
            };
            assert!(redirected(&arp(ours)));
            assert!(!redirected(&arp([10, 1, 2, 3])));
            assert!(redirected(&ipv4(ours)));
            assert!(!redirected(&ipv4([10, 1, 2, 3])));
            assert!(!redirected(&eth(0x86dd, &[0; 40])));
            // Truncated frames pass.
            assert!(!redirected(&arp(ours)[..41]));
            assert!(!redirected(&ipv4(ours)[..33]));
            assert!(!redirected(&[0u8; 13]));
        }
    }

    /// An IPv4/TCP frame to `dst`:`dport`; `vihl`, `frag` (flags and
    /// offset) and `proto` as given.
    fn tcp(dst: [u8; 4], dport: u16, vihl: u8, frag: u16, proto: u8) -> Vec<u8> {
        let mut p = vec![vihl, 0, 0, 40, 0, 0];
        p.extend_from_slice(&frag.to_be_bytes());
        p.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 2]);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0; 16]);
        eth(0x0800, &p)
    }

    #[test]
    fn shared_program_decisions() {
        let ports = SharedPorts {
            listen: vec![7471, 5201, 443],
            local_from: 61000,
        };
        assert_eq!(ports.check(), Ok(()));
        for ours in [[10, 1, 2, 1], [10, 1, 2, 200]] {
            let prog = xdp_shared_program(ours, &ports, 9);
            let redirected = |f: &[u8]| {
                let (ret, call) = run(&prog, f, 1);
                match call {
                    Some((map, q, flags)) => {
                        assert_eq!((map, q, flags, ret), (0xdead_0009u32 as i32, 1, 2, 4));
                        true
                    }
                    None => {
                        assert_eq!(ret, 2, "XDP_PASS");
                        false
                    }
                }
            };
            // Our listening ports and the local range come to us.
            for p in [7471, 5201, 443, 61000, 61001, 65535] {
                assert!(redirected(&tcp(ours, p, 0x45, 0x4000, 6)), "port {p}");
            }
            // The kernel's ports, just below the range, and port numbers
            // whose octets are swapped stay with the kernel.
            for p in [22, 80, 8080, 60999, 7470, 7472, 0x2f1d, 0x5114] {
                assert!(!redirected(&tcp(ours, p, 0x45, 0x4000, 6)), "port {p}");
            }
            // Another address, UDP, IP options, fragments: the kernel's.
            assert!(!redirected(&tcp([10, 1, 2, 3], 7471, 0x45, 0, 6)));
            assert!(!redirected(&tcp(ours, 7471, 0x45, 0, 17)));
            assert!(!redirected(&tcp(ours, 7471, 0x46, 0, 6)));
            assert!(!redirected(&tcp(ours, 7471, 0x45, 0x2000, 6)));
            assert!(!redirected(&tcp(ours, 7471, 0x45, 0x0001, 6)));
            // ARP for our address (the kernel's too) and other frames pass.
            assert!(!redirected(&arp(ours)));
            assert!(!redirected(&ipv4(ours)));
            assert!(!redirected(&eth(0x86dd, &[0; 40])));
            // Truncated: no room for the ports.
            assert!(!redirected(&tcp(ours, 7471, 0x45, 0, 6)[..37]));
            assert!(!redirected(&[0u8; 13]));
        }
    }

    #[test]
    fn shared_ports_checked() {
        assert!(SharedPorts::new(&[1; 65]).check().is_err());
        assert!(SharedPorts::new(&[0]).check().is_err());
        let low = SharedPorts {
            listen: vec![],
            local_from: 1023,
        };
        assert!(low.check().is_err());
        assert_eq!(SharedPorts::new(&[1; 64]).check(), Ok(()));
        // The program stays within jump range with the most ports.
        let p = xdp_shared_program([10, 0, 0, 1], &SharedPorts::new(&[1; 64]), 5);
        assert!(!p.is_empty() && p.len() < 120, "{} instructions", p.len());
    }

    #[test]
    fn program_shape() {
        let p = xdp_filter_program([10, 0, 0, 1], 5);
        assert!(p.len() < 40, "{} instructions", p.len());
        assert_eq!(p.last().map(|i| i.code), Some(0x95));
        let ld = p.iter().position(|i| i.code == 0x18).expect("ld_imm64");
        assert_eq!((p[ld].src(), p[ld].dst(), p[ld].imm), (1, 1, 5));
        assert_eq!(p[ld + 1], Insn::default());
    }
}
