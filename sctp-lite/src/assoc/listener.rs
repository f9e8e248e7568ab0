//! Packets that belong to no association: the [`Listener`] that answers
//! INITs with a State Cookie and keeps no state, turning valid
//! COOKIE-ECHOs into associations (RFC 9260 §5.1.3, §5.1.5), and the
//! answers to out-of-the-blue packets (§8.4).

use super::setup::{adaptation_cause, build_init_ack};
use super::*;

/// `addrs` copied out (each cut to [`MAX_ADDR_LEN`]).
fn owned_addrs(addrs: Addrs<'_>) -> (u8, [u8; MAX_ADDR_LEN], u8, [u8; MAX_ADDR_LEN]) {
    let copy = |a: &[u8]| {
        let a = &a[..a.len().min(MAX_ADDR_LEN)];
        let mut b = [0u8; MAX_ADDR_LEN];
        b[..a.len()].copy_from_slice(a);
        (a.len() as u8, b)
    };
    let (ln, l) = copy(addrs.local);
    let (pn, p) = copy(addrs.peer);
    (ln, l, pn, p)
}

/// Answers INITs with a State Cookie and turns valid COOKIE-ECHOs into
/// associations (RFC 9260 §5.1.3, §5.1.5). Keeps no per-INIT state.
///
/// The caller demultiplexes first: a packet whose ports (and verification
/// tag) belong to a live association goes to that association, and only
/// the rest to the listener. Otherwise a retransmitted COOKIE-ECHO (its
/// COOKIE-ACK lost) would make a second association.
#[derive(Debug)]
pub struct Listener {
    cfg: Config,
    key: Key,
    counter: u64,
}

/// What a [`Listener`] made of a packet.
#[derive(Debug)]
pub enum ListenOutcome {
    /// Nothing to do (discarded, §8.4).
    Drop,
    /// Send the first `n` octets of `out` back to the packet's source.
    Reply(usize),
    /// A valid COOKIE-ECHO: the new association, already fed the whole
    /// packet (COOKIE-ACK and any bundled DATA are in it).
    Accept(Box<Association>),
}

impl Listener {
    /// A listener; `cfg` must pass [`Config::validate`].
    pub fn new(cfg: Config) -> Result<Self, &'static str> {
        cfg.validate()?;
        let key = tag_key(&cfg.secret);
        Ok(Listener {
            cfg,
            key,
            counter: 0,
        })
    }

    /// Handles a packet that belongs to no association, binding cookies to
    /// no address: for simulations and tests. Network glue calls
    /// [`Listener::handle_packet_from`].
    pub fn handle_packet(&mut self, now: u64, bytes: &[u8], out: &mut [u8]) -> ListenOutcome {
        self.handle_packet_from(now, Addrs::default(), bytes, out)
    }

    /// Handles a packet that belongs to no association and travelled
    /// between `addrs`. The State Cookie of an INIT-ACK is MAC'd together
    /// with them, and a COOKIE-ECHO is accepted only between the same
    /// addresses: a cookie issued to one address cannot make associations
    /// from spoofed others.
    pub fn handle_packet_from(
        &mut self,
        now: u64,
        addrs: Addrs<'_>,
        bytes: &[u8],
        out: &mut [u8],
    ) -> ListenOutcome {
        let Some((h, chunks)) = parse_all(bytes, self.cfg.trusted_link) else {
            return ListenOutcome::Drop;
        };
        let Some(first) = chunks.first() else {
            return ListenOutcome::Drop;
        };
        match first {
            ChunkRepr::Init(init) => {
                // §8.5.1 A, §6.10: INIT has tag 0 and is alone in its packet.
                if h.verification_tag != 0 || chunks.len() != 1 {
                    return ListenOutcome::Drop;
                }
                if let Some(want) = self.cfg.require_adaptation {
                    if init.params.adaptation != Some(want) {
                        // RFC 5043 §7.1, §11.1: refuse, with ABORT carrying
                        // the INIT's Initiate Tag (§8.4, §5.1 note).
                        let (cause, n) = adaptation_cause(init.params.adaptation);
                        let rh = HeaderRepr {
                            src_port: h.dst_port,
                            dst_port: h.src_port,
                            verification_tag: init.initiate_tag,
                        };
                        return match emit_one(
                            rh,
                            &ChunkRepr::Abort {
                                t_bit: false,
                                causes: &cause[..n],
                            },
                            out,
                        ) {
                            Some(n) => ListenOutcome::Reply(n),
                            None => ListenOutcome::Drop,
                        };
                    }
                }
                self.counter = self.counter.wrapping_add(1);
                let (tag, tsn) =
                    random_pair(&self.key, now, self.counter, (h.dst_port, h.src_port));
                match build_init_ack(&self.cfg, now, tag, tsn, (0, 0), init, &h, addrs, out) {
                    Some(n) => ListenOutcome::Reply(n),
                    None => ListenOutcome::Drop,
                }
            }
            ChunkRepr::CookieEcho { cookie } => {
                let Some(c) = Cookie::decode(
                    cookie,
                    &self.cfg.secret,
                    addrs,
                    now,
                    self.cfg.cookie_lifetime,
                ) else {
                    return ListenOutcome::Drop;
                };
                // §5.1.5 / §8.5.1: tag and ports must be the cookie's.
                if h.verification_tag != c.local_tag
                    || h.dst_port != c.local_port
                    || h.src_port != c.peer_port
                {
                    return ListenOutcome::Drop;
                }
                let mut a = Association::from_cookie(self.cfg.clone(), &c, now);
                a.cookie_addrs = Some(owned_addrs(addrs));
                a.handle_packet(now, bytes);
                ListenOutcome::Accept(Box::new(a))
            }
            _ => match out_of_the_blue(bytes, self.cfg.trusted_link, out) {
                Some(n) => ListenOutcome::Reply(n),
                None => ListenOutcome::Drop,
            },
        }
    }
}

/// The answer to an out-of-the-blue packet (RFC 9260 §8.4), one that
/// belongs to no association (or to one already closed): SHUTDOWN COMPLETE
/// to a SHUTDOWN ACK (item 5), nothing to ABORT, SHUTDOWN COMPLETE, COOKIE
/// ACK (items 2, 6, 7) or COOKIE ECHO (left to a [`Listener`]), and ABORT
/// to anything else (item 8); both with the packet's tag reflected and the
/// T bit set. An INIT reaches here only when no [`Listener`] takes it (no
/// one listens on its port): it cannot be processed normally, so it gets
/// an ABORT whose Verification Tag is the INIT's Initiate Tag, T bit clear
/// (item 3, §5.1), and the initiator learns at once that nobody listens
/// (as from Linux) instead of retrying its INIT until Max.Init.Retransmits.
/// An INIT whose own tag is not 0 is discarded (§8.5.1 A). On a `trusted`
/// link ([`Config::trusted_link`]) the packet's CRC32c is not checked; the
/// reply's is always computed. Returns the reply's length in `out`.
pub fn out_of_the_blue(bytes: &[u8], trusted: bool, out: &mut [u8]) -> Option<usize> {
    let (h, chunks) = parse_all(bytes, trusted)?;
    if let Some(ChunkRepr::Init(init)) = chunks.first() {
        // §6.10: an INIT is bundled with nothing; a packet that bundles
        // one is not answered.
        if h.verification_tag != 0 || chunks.len() != 1 {
            return None;
        }
        let rh = HeaderRepr {
            src_port: h.dst_port,
            dst_port: h.src_port,
            verification_tag: init.initiate_tag,
        };
        return emit_one(
            rh,
            &ChunkRepr::Abort {
                t_bit: false,
                causes: &[],
            },
            out,
        );
    }
    let has = |t: u8| chunks.iter().any(|c| c.chunk_type() == t);
    if chunks.is_empty()
        || has(chunk_type::ABORT)
        || has(chunk_type::SHUTDOWN_COMPLETE)
        || has(chunk_type::COOKIE_ACK)
        || has(chunk_type::INIT)
        || has(chunk_type::COOKIE_ECHO)
    {
        return None;
    }
    let rh = HeaderRepr {
        src_port: h.dst_port,
        dst_port: h.src_port,
        verification_tag: h.verification_tag,
    };
    let reply = if has(chunk_type::SHUTDOWN_ACK) {
        ChunkRepr::ShutdownComplete { t_bit: true }
    } else {
        ChunkRepr::Abort {
            t_bit: true,
            causes: &[],
        }
    };
    emit_one(rh, &reply, out)
}
