//! The receive path of a [`Qp`]: inbound octets and DDP Segments, DDP
//! placement, RDMAP delivery, the Read and Atomic responder's side of
//! inbound requests, and the Terminate raised for an inbound error.

use super::*;

/// Everything the receive path needs, borrowed apart from the deframer.
struct RxCtx<'a> {
    cfg: &'a QpConfig,
    srq: Option<&'a Srq>,
    rx: &'a mut Rx,
    tx: &'a mut Tx,
    mem: &'a mut MemoryTable,
    completions: &'a mut VecDeque<(Completion, u64)>,
    events: &'a mut VecDeque<QpEvent>,
    stats: &'a mut QpStats,
    /// The first error raised while processing this call.
    raised: Option<TermInfo>,
    /// The peer's Terminate was delivered during this call.
    peer_terminated: bool,
    /// Its decoded contents, if it decoded.
    peer_terminate: Option<TerminateRepr>,
}

impl Qp {
    /// Feed octets received on the stream (any cut). Only for a QP over
    /// [`LowerLayer::Mpa`]; on one over segments this is a local error
    /// (RDMAP local catastrophic Terminate).
    pub fn receive(&mut self, data: &[u8], mem: &mut MemoryTable) {
        self.stats.stream_rx += data.len() as u64;
        if self.rx.dead || self.state == QpState::Error {
            // RFC 5041 §7.1: after an error DDP silently drops what follows.
            return;
        }
        let Lower::Mpa { deframer, .. } = &mut self.llp else {
            self.terminate(TermCode::RDMAP_LOCAL_CATASTROPHIC);
            return;
        };
        let mut ctx = RxCtx {
            cfg: &self.cfg,
            srq: self.srq.as_ref(),
            rx: &mut self.rx,
            tx: &mut self.tx,
            mem,
            completions: &mut self.completions,
            events: &mut self.events,
            stats: &mut self.stats,
            raised: None,
            peer_terminated: false,
            peer_terminate: None,
        };
        let r = deframer.feed(data, &mut ctx);
        if r.is_ok() && ctx.raised.is_none() && !ctx.peer_terminated {
            // The common case, kept short (it runs per segment): nothing
            // raised, no Terminate; only a Read this placed may complete.
            if !self.tx.sq.is_empty() {
                self.drain_sq();
            }
            return;
        }
        let raised = ctx.raised;
        let term_rx = ctx.peer_terminated;
        let peer_terminate = ctx.peer_terminate;
        if let Err(e) = r {
            self.rx.dead = true;
            if raised.is_none() {
                self.raise(TermInfo {
                    code: e.term_code(),
                    hdr: None,
                    seg_len: 0,
                    rdma: None,
                });
            }
        }
        self.after_receive(raised, term_rx, peer_terminate);
    }

    /// Feed one whole DDP Segment with its DDP-SSN, as DDP over SCTP
    /// delivers it (RFC 5043 §5.2.2, §10: unordered). Segments are
    /// processed in DDP-SSN order: one ahead of the next expected is held
    /// until the gap fills (see [`llp`]). Only for a QP over
    /// [`LowerLayer::Segments`]; on one over MPA this is a local error
    /// (RDMAP local catastrophic Terminate).
    pub fn receive_segment(&mut self, ddp_ssn: u16, segment: &[u8], mem: &mut MemoryTable) {
        self.stats.stream_rx += segment.len() as u64;
        if self.rx.dead || self.state == QpState::Error {
            // RFC 5041 §7.1: after an error DDP silently drops what follows.
            return;
        }
        let Lower::Segments(order) = &mut self.llp else {
            self.terminate(TermCode::RDMAP_LOCAL_CATASTROPHIC);
            return;
        };
        let mut ctx = RxCtx {
            cfg: &self.cfg,
            srq: self.srq.as_ref(),
            rx: &mut self.rx,
            tx: &mut self.tx,
            mem,
            completions: &mut self.completions,
            events: &mut self.events,
            stats: &mut self.stats,
            raised: None,
            peer_terminated: false,
            peer_terminate: None,
        };
        match order.arrive(ddp_ssn, segment) {
            Ok(Arrival::InOrder) => {
                ctx.whole_segment(segment);
                order.advance();
                while !ctx.rx.dead {
                    let Some(s) = order.pop_ready() else { break };
                    ctx.whole_segment(&s);
                    order.advance();
                }
            }
            Ok(Arrival::Held) => {}
            // RFC 5043 §10: an invalid DDP-SSN MAY terminate the DDP stream;
            // so do a duplicate, too much held and a length no DDP Segment
            // can have. RFC 5043 has no LLP error codes: RDMAP catastrophic,
            // localized to the stream (RFC 5040 §4.8).
            Err(OrderError::OutOfWindow { .. })
            | Err(OrderError::Duplicate(_))
            | Err(OrderError::TooMuchHeld)
            | Err(OrderError::BadLength(_)) => ctx.raise(TermInfo {
                code: TermCode::RDMAP_CATASTROPHIC_STREAM,
                hdr: None,
                seg_len: 0,
                rdma: None,
            }),
        }
        let raised = ctx.raised;
        let term_rx = ctx.peer_terminated;
        let peer_terminate = ctx.peer_terminate;
        if self.rx.dead {
            order.clear();
        }
        self.after_receive(raised, term_rx, peer_terminate);
    }

    /// Counters of the segment lower layer (`None` over MPA).
    pub fn segment_stats(&self) -> Option<SegmentStats> {
        match &self.llp {
            Lower::Segments(o) => Some(o.stats()),
            Lower::Mpa { .. } => None,
        }
    }

    /// Segments and octets held waiting for an earlier DDP-SSN (zero over MPA).
    pub fn segments_held(&self) -> (usize, usize) {
        match &self.llp {
            Lower::Segments(o) => o.held(),
            Lower::Mpa { .. } => (0, 0),
        }
    }

    /// Common end of [`receive`](Self::receive) and
    /// [`receive_segment`](Self::receive_segment).
    fn after_receive(
        &mut self,
        raised: Option<TermInfo>,
        term_rx: bool,
        peer_terminate: Option<TerminateRepr>,
    ) {
        if let Some(t) = raised {
            self.raise(t);
        } else if term_rx && self.state != QpState::Error {
            if let Some(t) = peer_terminate {
                self.attribute_terminate(&t);
                self.ended_by
                    .get_or_insert(DisconnectCause::TerminateReceived(t.code));
            }
            // RFC 5040 §5.4: after a Terminate the stream is done; we stop sending.
            self.state = QpState::Error;
            self.tx.terminate = None;
            self.flush();
        }
        self.drain_sq();
    }

    /// Give the send-queue request whose untagged message the peer's
    /// Terminate quotes the matching status (table at [`WcStatus`]).
    fn attribute_terminate(&mut self, t: &TerminateRepr) {
        let Some(DdpHeader::Untagged(u)) = t.ddp_header else {
            return;
        };
        let Some(status) = WcStatus::from_peer_terminate(t.code) else {
            return;
        };
        let Some(i) = self
            .tx
            .sq
            .iter()
            .position(|e| matches!(e.work, SqWork::Wr(_)) && e.untagged == Some((u.qn, u.msn)))
        else {
            return;
        };
        self.tx.sq[i].state = SqState::Done(status);
        // RFC 5041 §7.1: the peer dropped every segment after the one in error,
        // so what we handed to the LLP after it did not arrive either.
        for e in self.tx.sq.iter_mut().skip(i + 1) {
            if e.state == SqState::Done(WcStatus::Success) {
                e.state = SqState::Done(WcStatus::Flushed);
            }
        }
    }

    /// The MPA error that stopped reception, if any.
    pub fn mpa_error(&self) -> Option<MpaError> {
        match &self.llp {
            Lower::Mpa { deframer, .. } => deframer.error(),
            Lower::Segments(_) => None,
        }
    }
}

impl RxCtx<'_> {
    fn error(&mut self, code: TermCode, rdma: Option<ReadRequest>) {
        if self.rx.pending.is_none() {
            self.rx.pending = Some(TermInfo {
                code,
                hdr: self.rx.hdr,
                seg_len: self.rx.seg_len,
                rdma,
            });
        }
        self.rx.target = Target::Discard;
    }

    /// An error that also decides how the receive buffer being filled
    /// completes (once the error is raised).
    fn recv_error(&mut self, code: TermCode, status: WcStatus) {
        if self.rx.pending.is_none() {
            self.rx.pending_status = Some(status);
        }
        self.error(code, None);
    }

    /// An error that also decides how the outstanding RDMA Read whose
    /// response is arriving completes (once the error is raised).
    fn read_error(&mut self, code: TermCode, status: WcStatus) {
        if self.rx.pending.is_none() {
            self.rx.pending_read = Some(status);
        }
        self.error(code, None);
    }

    /// Complete the RDMA Read at the head of the outstanding list with
    /// `status`: `Success` when its response is delivered (RFC 5040 §5.5
    /// rule 19), else the stream is going to error and nothing more
    /// arrives for it.
    fn retire_read(&mut self, status: WcStatus) {
        let Some(p) = self.tx.reads.pop_front() else {
            return;
        };
        if let Some(i) = p.seq.checked_sub(self.tx.head_seq) {
            if let Some(e) = self.tx.sq.get_mut(i as usize) {
                e.state = SqState::Done(status);
            }
        }
    }

    /// The local buffer that the current segment's payload goes to (a
    /// receive buffer, or the sink of our RDMA Read) was deregistered or
    /// invalidated by the application after the segment's header was
    /// checked. Place nothing more (RFC 5041 §7.1: cease placing the rest of
    /// the segment; RFC 5040 §8.1.1 item 6). The buffer is ours, not the
    /// peer's, so this is a DDP local catastrophic error (RFC 5041 §7.2
    /// 0x0/0x00), as for a buffer found gone when a segment begins.
    fn local_sink_revoked(&mut self) {
        let status = WcStatus::LocalProtection(AccessError::InvalidStag);
        match self.rx.hdr {
            Some(DdpHeader::Tagged(_)) => self.read_error(TermCode::DDP_LOCAL_CATASTROPHIC, status),
            _ => self.recv_error(TermCode::DDP_LOCAL_CATASTROPHIC, status),
        }
    }

    /// The buffer for the next QN 0 message: the head of our receive queue,
    /// or one from the SRQ, checked now against the memory table (its post
    /// could not be: an SRQ has no PD of its own).
    fn take_recv(&mut self) -> Option<Result<RecvWr, (RecvWr, AccessError)>> {
        let Some(srq) = self.srq else {
            return self.rx.rq.pop_front().map(Ok);
        };
        let (wr, limit) = srq.take();
        if limit {
            self.events.push_back(QpEvent::SrqLimitReached);
        }
        let wr = wr?;
        Some(
            match check_sgl(self.mem, self.cfg.pd, Access::LOCAL_WRITE, &wr.sgl) {
                Ok(()) => Ok(wr),
                Err(e) => Err((wr, e)),
            },
        )
    }

    fn raise(&mut self, t: TermInfo) {
        if self.raised.is_none() {
            self.raised = Some(t);
        }
        self.rx.dead = true;
    }

    /// One whole DDP Segment (the segment lower layer): the same three
    /// steps the MPA deframer drives, with the header taken in place.
    fn whole_segment(&mut self, seg: &[u8]) {
        // `SegmentOrder::arrive` refused empty and over-long segments.
        let Ok(len) = u16::try_from(seg.len()) else {
            return;
        };
        // RFC 5041 §4.2, §4.3: the T bit of the first octet selects the
        // header length; a shorter segment gets what there is, and `begin`
        // reports it as malformed.
        let hlen = if seg.first().is_some_and(|c| c & DdpControl::T != 0) {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
        .min(seg.len());
        self.begin(len, &seg[..hlen]);
        self.data(&seg[hlen..]);
        self.end();
    }

    fn begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        self.rx.hdr = None;
        self.rx.seg_len = ulpdu_len;
        self.rx.placed = 0;
        self.rx.pending = None;
        self.rx.pending_status = None;
        self.rx.pending_read = None;
        self.rx.target = Target::Discard;
        if self.rx.dead {
            return;
        }
        if ulpdu_len == 0 {
            // A zero-length ULPDU is legal MPA (RFC 6581 uses it as an RTR).
            self.rx.target = Target::None;
            return;
        }
        let (hdr, hlen) = match DdpHeader::parse(header) {
            Ok(h) => h,
            Err(_) => {
                // Shorter than the header its control octet announces.
                self.error(TermCode::RDMAP_CATASTROPHIC_STREAM, None);
                return;
            }
        };
        self.rx.hdr = Some(hdr);
        let payload = ulpdu_len as usize - hlen;
        self.rx.payload_len = payload;
        let pd = self.cfg.pd;
        match hdr {
            DdpHeader::Tagged(t) => {
                // RFC 5041 §4.1: DV MUST be one.
                if t.ddp.version() != DDP_VERSION {
                    return self.error(TermCode::DDP_T_INVALID_VERSION, None);
                }
                // RFC 5040 §4.1 / §7.2 item 3.
                if t.rdmap.version() != RDMAP_VERSION {
                    return self.error(TermCode::RDMAP_INVALID_VERSION, None);
                }
                match t.rdmap.opcode() {
                    Opcode::Write => {
                        // RFC 5041 §5.2: STag and TO of a zero-length segment MUST NOT be checked.
                        if payload == 0 {
                            self.rx.target = Target::None;
                            return;
                        }
                        // RFC 5041 §7.1 tagged checks 1-5.
                        match self.mem.check(
                            STag(t.stag),
                            pd,
                            Access::REMOTE_WRITE,
                            t.to,
                            payload as u64,
                        ) {
                            Ok(range) => self.rx.target = Target::Tagged { range },
                            Err(e) => self.error(ddp_tagged_code(e), None),
                        }
                    }
                    Opcode::ReadResponse => {
                        let Some(pending) = self.tx.reads.front().copied() else {
                            // No RDMA Read outstanding.
                            return self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None);
                        };
                        if payload == 0 {
                            self.rx.target = Target::None;
                            return;
                        }
                        // RFC 5040 §5.2.2: the sink MAY check STag/TO/length against the request.
                        let sink = pending.sink;
                        if t.stag != sink.stag.0 {
                            return self.error(TermCode::DDP_T_INVALID_STAG, None);
                        }
                        let Some(end) = t.to.checked_add(payload as u64) else {
                            return self.error(TermCode::DDP_T_TO_WRAP, None);
                        };
                        if t.to < sink.to || end > sink.to.saturating_add(sink.len as u64) {
                            return self.error(TermCode::DDP_T_BASE_BOUNDS, None);
                        }
                        // RFC 5041 §5.2: each segment's TO is the message's first
                        // TO plus the segment's offset in the message, and MPA/TCP
                        // delivers the segments in order; so the next segment
                        // must start where the previous one ended. Anything else
                        // (a gap, or octets written twice) would let a response
                        // reach the requested length without filling the sink.
                        // The response does not match its request (RFC 5040
                        // §5.2.2): RDMAP remote operation error, and the Read
                        // fails.
                        if t.to - sink.to != pending.received {
                            return self
                                .read_error(TermCode::RDMAP_OP_UNSPECIFIED, WcStatus::BadResponse);
                        }
                        // Message offset t.to - sink.to, scattered over the sink list.
                        match pending.sgl.locate(
                            self.mem,
                            pd,
                            Access::LOCAL_WRITE,
                            t.to - sink.to,
                            payload as u64,
                        ) {
                            Ok(p) => self.rx.target = Target::Scatter(p),
                            // The sink was checked at post time and the peer named
                            // it correctly: the application revoked it since. Our
                            // fault, so DDP local catastrophic (RFC 5041 §7.2
                            // 0x0/0x00), as for a receive buffer that went away.
                            Err(e) => self.read_error(
                                TermCode::DDP_LOCAL_CATASTROPHIC,
                                WcStatus::LocalProtection(e),
                            ),
                        }
                    }
                    _ => self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None),
                }
            }
            DdpHeader::Untagged(u) => {
                if u.ddp.version() != DDP_VERSION {
                    return self.error(TermCode::DDP_U_INVALID_VERSION, None);
                }
                if u.qn > queue::ATOMIC_RESPONSE {
                    return self.error(TermCode::DDP_U_INVALID_QN, None);
                }
                if u.rdmap.version() != RDMAP_VERSION {
                    return self.error(TermCode::RDMAP_INVALID_VERSION, None);
                }
                let op = u.rdmap.opcode();
                if op.queue() != Some(u.qn) {
                    return self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None);
                }
                let q = u.qn as usize;
                // RFC 5041 §7.1 untagged check 5: MSN within the legal range.
                if u.msn != self.rx.expected_msn[q] {
                    return self.error(TermCode::DDP_U_MSN_RANGE, None);
                }
                let mo = u.mo as usize;
                if matches!(op, Opcode::ImmediateData | Opcode::ImmediateDataSe) {
                    return self.begin_immediate(mo, payload);
                }
                let capacity = match u.qn {
                    queue::SEND => {
                        if self.rx.cur.is_none() {
                            // RFC 5041 §7.1 check 2 (and RFC 5040 §5.3: even a
                            // zero-length Send consumes a buffer).
                            match self.take_recv() {
                                Some(Ok(r)) => self.rx.cur = Some(r),
                                None => return self.error(TermCode::DDP_U_NO_BUFFER, None),
                                Some(Err((r, e))) => {
                                    // An SRQ buffer that fails the post checks: our
                                    // fault, not the peer's, so DDP local catastrophic
                                    // (RFC 5041 §7.2 0x0/0x00), as for a posted buffer
                                    // that went away underneath us (below).
                                    self.rx.cur = Some(r);
                                    return self.recv_error(
                                        TermCode::DDP_LOCAL_CATASTROPHIC,
                                        WcStatus::LocalProtection(e),
                                    );
                                }
                            }
                        }
                        self.rx.cur.map_or(0, |r| r.sgl.total_len() as usize)
                    }
                    queue::READ_REQUEST => {
                        // The QN 1 buffers are the IRD we advertised (RFC 5040
                        // §5.2.2, §6.1: inbound Read Requests MUST NOT exceed
                        // it). Every QN 1 segment starts a Read Request (MO 0,
                        // below), so each one is counted, whatever else is
                        // wrong with it (RFC 5041 §7.1 check 2 before 3-4).
                        if self.tx.resp.len() >= self.cfg.ird as usize {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        }
                        // RFC 5040 §4.4, §5.2.1: a Read Request is one
                        // untagged message whose only content is the 28-octet
                        // Read Request Header, one QN 1 buffer each. We take
                        // it in one segment (MULPDU is never below 46 octets
                        // on a real stream), so the only legal MO is 0
                        // (RFC 5041 §7.1 check 3, §7.2 0x2/0x04).
                        if mo != 0 {
                            return self.error(TermCode::DDP_U_INVALID_MO, None);
                        }
                        // RFC 7306 §5: Atomic Requests share QN 1, its MSNs
                        // and its IRD-sized buffers with Read Requests.
                        if op == Opcode::AtomicRequest {
                            ATOMIC_REQUEST_LEN
                        } else {
                            READ_REQUEST_LEN
                        }
                    }
                    queue::ATOMIC_RESPONSE => {
                        // An Atomic Response answers our oldest outstanding
                        // Atomic Request; with none there is no QN 3 buffer
                        // (RFC 5041 §7.1 check 2).
                        if self.tx.atomics.is_empty() {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        }
                        if mo != 0 {
                            return self.error(TermCode::DDP_U_INVALID_MO, None);
                        }
                        ATOMIC_RESPONSE_LEN
                    }
                    _ => MAX_TERMINATE_LEN,
                };
                // RFC 5041 §7.1 checks 3 and 4 (`payload` < 2^16, so on any
                // target of 32 bits or more `mo + payload` cannot overflow;
                // checked anyway).
                if mo > capacity || mo.checked_add(payload).is_none_or(|end| end > capacity) {
                    let code = if mo > capacity {
                        TermCode::DDP_U_INVALID_MO
                    } else {
                        TermCode::DDP_U_TOO_LONG
                    };
                    if u.qn == queue::SEND {
                        return self.recv_error(code, WcStatus::LocalLength);
                    }
                    return self.error(code, None);
                }
                self.rx.target = match u.qn {
                    queue::SEND => {
                        let Some(r) = self.rx.cur else {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        };
                        if payload == 0 {
                            Target::None
                        } else {
                            match r.sgl.locate(
                                self.mem,
                                pd,
                                Access::LOCAL_WRITE,
                                mo as u64,
                                payload as u64,
                            ) {
                                Ok(p) => Target::Scatter(p),
                                // The posted buffer went away underneath us.
                                Err(e) => {
                                    return self.recv_error(
                                        TermCode::DDP_LOCAL_CATASTROPHIC,
                                        WcStatus::LocalProtection(e),
                                    )
                                }
                            }
                        }
                    }
                    queue::READ_REQUEST => Target::ReadReq { mo },
                    queue::ATOMIC_RESPONSE => Target::Small { mo },
                    _ => Target::Term { mo },
                };
            }
        }
    }

    /// The bulk cases in one step: a whole tagged FPDU with payload (DV
    /// and RV one), an RDMA Write that its STag lets us place, or an RDMA
    /// Read Response that continues the Read at the head of the
    /// outstanding list into a one-element sink list, is placed with one
    /// table lookup, without the per-segment state `begin`, `data` and
    /// `end` keep for FPDUs cut across segments. Anything else, and every
    /// FPDU that fails a check, returns false having changed nothing, and
    /// takes the general path, which raises the error its checks find
    /// (RFC 5041 §7.1, RFC 5040 §5.2.2, §7.2).
    fn whole_tagged(&mut self, header: &[u8], payload: &[u8]) -> bool {
        let &[ddp, rdmap, s0, s1, s2, s3, t0, t1, t2, t3, t4, t5, t6, t7] = header else {
            return false;
        };
        let (ddp, rdmap) = (DdpControl(ddp), RdmapControl(rdmap));
        if self.rx.dead
            || payload.is_empty()
            || !ddp.tagged()
            || ddp.version() != DDP_VERSION
            || rdmap.version() != RDMAP_VERSION
        {
            return false;
        }
        let stag = u32::from_be_bytes([s0, s1, s2, s3]);
        let to = u64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]);
        let placed = match rdmap.opcode() {
            Opcode::Write => self
                .mem
                .place(STag(stag), self.cfg.pd, Access::REMOTE_WRITE, to, payload)
                .is_ok(),
            Opcode::ReadResponse => self.whole_read_response(stag, to, ddp.last(), payload),
            _ => false,
        };
        if placed {
            self.stats.bytes_placed += payload.len() as u64;
            self.stats.fpdus_rx += 1;
        }
        placed
    }

    /// [`whole_tagged`](Self::whole_tagged)'s Read Response: the checks of
    /// `begin` (STag, TO and bounds against the request, contiguity) and of
    /// `end` (a last segment completes the requested length) first, then
    /// the placement, then what `end` does on success.
    fn whole_read_response(&mut self, stag: u32, to: u64, last: bool, payload: &[u8]) -> bool {
        let pd = self.cfg.pd;
        let Some(p) = self.tx.reads.front_mut() else {
            return false;
        };
        let &[sge] = p.sgl.as_slice() else {
            return false;
        };
        let (sink, len) = (p.sink, payload.len() as u64);
        let Some(end) = to.checked_add(len) else {
            return false;
        };
        if stag != sink.stag.0
            || to < sink.to
            || end > sink.to.saturating_add(u64::from(sink.len))
            || to - sink.to != p.received
        {
            return false;
        }
        let off = p.received;
        let received = off + len;
        if last && received != u64::from(sink.len) {
            return false;
        }
        if off + len > u64::from(sge.len) {
            return false;
        }
        let Some(at) = sge.to.checked_add(off) else {
            return false;
        };
        if self
            .mem
            .place(sge.stag, pd, Access::LOCAL_WRITE, at, payload)
            .is_err()
        {
            return false;
        }
        p.received = received;
        if last {
            self.retire_read(WcStatus::Success);
        }
        true
    }

    fn data(&mut self, data: &[u8]) {
        let at = self.rx.placed;
        self.rx.placed += data.len();
        match self.rx.target {
            Target::Tagged { range } => {
                // The range was validated when the segment began, possibly in
                // an earlier `receive` call: the application may have
                // deregistered or invalidated the STag since (RFC 5040 §8.1.1
                // item 6: no more placement once access is revoked). Stop
                // here and report the STag as invalid (RFC 5041 §7.1 tagged
                // check 1, §7.2 0x1/0x00) when the segment ends.
                // (`write` refuses a range that is no longer live: the
                // common case checks once.)
                if self.mem.write(&range, at, data) {
                    self.stats.bytes_placed += data.len() as u64;
                } else if !self.mem.is_live(&range) {
                    self.error(TermCode::DDP_T_INVALID_STAG, None);
                }
            }
            Target::Scatter(p) => {
                if !p.as_slice().iter().all(|r| self.mem.is_live(r)) {
                    return self.local_sink_revoked();
                }
                // `at` is the offset of `data` in this segment's payload.
                let (mut at, mut data) = (at, data);
                for r in p.as_slice() {
                    if data.is_empty() {
                        break;
                    }
                    if at >= r.len {
                        at -= r.len;
                        continue;
                    }
                    let n = (r.len - at).min(data.len());
                    if self.mem.write(r, at, &data[..n]) {
                        self.stats.bytes_placed += n as u64;
                    }
                    data = &data[n..];
                    at = 0;
                }
            }
            Target::ReadReq { mo } => {
                if let Some(dst) = self.rx.read_req.get_mut(mo + at..mo + at + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Target::Term { mo } => {
                if let Some(dst) = self.rx.term.get_mut(mo + at..mo + at + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Target::Small { mo } => {
                if let Some(dst) = self.rx.small.get_mut(mo + at..mo + at + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Target::None | Target::Discard => {}
        }
    }

    fn end(&mut self) {
        self.stats.fpdus_rx += 1;
        if self.rx.dead {
            return;
        }
        if let Some(p) = self.rx.pending.take() {
            if let Some(st) = self.rx.pending_status.take() {
                self.rx.cur_status = Some(st);
            }
            if let Some(st) = self.rx.pending_read.take() {
                self.retire_read(st);
            }
            return self.raise(p);
        }
        let Some(hdr) = self.rx.hdr else { return };
        let payload = self.rx.payload_len;
        match hdr {
            DdpHeader::Tagged(t) => {
                if t.rdmap.opcode() == Opcode::ReadResponse {
                    let Some(p) = self.tx.reads.front_mut() else {
                        return;
                    };
                    p.received += payload as u64;
                    if t.ddp.last() {
                        // RFC 5040 §5.2.2: the Data Sink may check that the
                        // response's length is the one requested; we do, so a
                        // Read succeeds only when every requested octet was
                        // placed (segments are contiguous, checked at begin, and
                        // never pass the end). A short or zero-length response
                        // to a non-zero Read is an invalid Read Response
                        // (RFC 5040 §7.1 case 2: Terminate with the DDP header,
                        // RDMAP remote operation error) and the Read fails.
                        if p.received != u64::from(p.sink.len) {
                            self.retire_read(WcStatus::BadResponse);
                            return self.raise(TermInfo {
                                code: TermCode::RDMAP_OP_UNSPECIFIED,
                                hdr: Some(hdr),
                                seg_len: self.rx.seg_len,
                                rdma: None,
                            });
                        }
                        // RFC 5040 §5.5 rule 19: the Read completes on delivery of its response.
                        self.retire_read(WcStatus::Success);
                    }
                }
                // RDMA Write: placed, never delivered (RFC 5040 §5.1).
            }
            DdpHeader::Untagged(u) => {
                let mo = u.mo as usize;
                match u.qn {
                    queue::SEND => {
                        let op = u.rdmap.opcode();
                        if matches!(op, Opcode::ImmediateData | Opcode::ImmediateDataSe) {
                            return self.immediate_data(hdr, u, mo + payload);
                        }
                        if !u.ddp.last() {
                            return;
                        }
                        let mut invalidated = None;
                        if op.invalidates() {
                            // RFC 5040 §5.3, §7.2 items 4-5: verify and invalidate before
                            // the completion becomes visible.
                            let stag = STag(u.inval_stag);
                            if let Err(e) = self.mem.invalidate_remote(stag, self.cfg.pd) {
                                // RFC 5040 §7.2 items 4-5, §4.8: an STag that is
                                // not valid is Invalid STag (0x00); one that is
                                // valid but not ours to invalidate -- another
                                // PD's, or a local-only buffer never enabled
                                // for remote access (§8.1.1 item 7) -- is "STag
                                // cannot be invalidated" (0x09).
                                let code = match e {
                                    AccessError::PdMismatch | AccessError::Access => {
                                        TermCode::RDMAP_CANNOT_INVALIDATE
                                    }
                                    _ => TermCode::RDMAP_INVALID_STAG,
                                };
                                return self.raise(TermInfo {
                                    code,
                                    hdr: Some(hdr),
                                    seg_len: self.rx.seg_len,
                                    rdma: None,
                                });
                            }
                            invalidated = Some(stag);
                        }
                        self.rx.expected_msn[0] = self.rx.expected_msn[0].wrapping_add(1);
                        let Some(r) = self.rx.cur.take() else {
                            return;
                        };
                        self.completions.push_back((
                            Completion {
                                wr_id: r.wr_id,
                                opcode: WcOpcode::Recv,
                                status: WcStatus::Success,
                                // RFC 5041 §5.4: length = MO + payload of the last segment.
                                byte_len: (mo + payload) as u32,
                                solicited: op.solicited(),
                                invalidated,
                                imm: None,
                            },
                            0,
                        ));
                    }
                    queue::READ_REQUEST => {
                        self.rx.read_req_len = self.rx.read_req_len.max(mo + payload);
                        if !u.ddp.last() {
                            return;
                        }
                        let len = core::mem::take(&mut self.rx.read_req_len);
                        self.rx.expected_msn[1] = self.rx.expected_msn[1].wrapping_add(1);
                        if u.rdmap.opcode() == Opcode::AtomicRequest {
                            return self.atomic_request(hdr, u, len);
                        }
                        let Ok(req) =
                            ReadRequest::parse(&self.rx.read_req[..len.min(READ_REQUEST_LEN)])
                        else {
                            // A Read Request without its 28-octet header.
                            return self.raise(TermInfo {
                                code: TermCode::RDMAP_OP_UNSPECIFIED,
                                hdr: Some(hdr),
                                seg_len: self.rx.seg_len,
                                rdma: None,
                            });
                        };
                        // RFC 5040 §5.2.1 / §7.2: validate the source only for non-zero sizes.
                        if req.size > 0 {
                            if let Err(e) = self.mem.check(
                                STag(req.src_stag),
                                self.cfg.pd,
                                Access::REMOTE_READ,
                                req.src_to,
                                req.size as u64,
                            ) {
                                return self.raise(TermInfo {
                                    code: rdmap_protection_code(e),
                                    hdr: Some(hdr),
                                    seg_len: self.rx.seg_len,
                                    rdma: Some(req),
                                });
                            }
                        }
                        // RFC 5040 §5.5 rule 12/17: processing starts only now, on delivery.
                        self.tx.resp.push_back(ReadResp {
                            req,
                            hdr: u,
                            atomic: None,
                        });
                    }
                    queue::ATOMIC_RESPONSE => self.atomic_response(hdr, u, mo + payload),
                    _ => {
                        self.rx.term_len = self.rx.term_len.max(mo + payload);
                        if !u.ddp.last() {
                            return;
                        }
                        let len = core::mem::take(&mut self.rx.term_len);
                        self.rx.expected_msn[2] = self.rx.expected_msn[2].wrapping_add(1);
                        // RFC 5040 §5.4: deliver the Terminate to the ULP, then stop.
                        match TerminateRepr::parse(&self.rx.term[..len.min(MAX_TERMINATE_LEN)]) {
                            Ok(t) => {
                                self.peer_terminate = Some(t);
                                self.events.push_back(QpEvent::TerminateReceived(t));
                            }
                            Err(e) => self.events.push_back(QpEvent::MalformedTerminate(e)),
                        }
                        self.rx.dead = true;
                        self.peer_terminated = true;
                    }
                }
            }
        }
    }
}

impl RxCtx<'_> {
    /// An error found when a QN 0, 1 or 3 message of RFC 7306 is delivered:
    /// Terminate with its DDP header.
    fn raise_with_header(&mut self, code: TermCode, hdr: DdpHeader) {
        self.raise(TermInfo {
            code,
            hdr: Some(hdr),
            seg_len: self.rx.seg_len,
            rdma: None,
        });
    }

    /// `begin` for an Immediate Data segment (RFC 7306 §6; QN 0 and its MSN
    /// already checked): it takes a receive buffer as a Send does (RFC 5041
    /// §7.1 check 2), and its 8-octet body goes to `Rx::small`, not into
    /// the buffer.
    #[cold]
    #[inline(never)]
    fn begin_immediate(&mut self, mo: usize, payload: usize) {
        if self.rx.cur.is_none() {
            match self.take_recv() {
                Some(Ok(r)) => self.rx.cur = Some(r),
                None => return self.error(TermCode::DDP_U_NO_BUFFER, None),
                Some(Err((r, e))) => {
                    self.rx.cur = Some(r);
                    return self.recv_error(
                        TermCode::DDP_LOCAL_CATASTROPHIC,
                        WcStatus::LocalProtection(e),
                    );
                }
            }
        }
        // RFC 5041 §7.1 checks 3 and 4 against the 8-octet body.
        if mo > IMMEDIATE_DATA_LEN {
            return self.recv_error(TermCode::DDP_U_INVALID_MO, WcStatus::LocalLength);
        }
        if mo + payload > IMMEDIATE_DATA_LEN {
            return self.recv_error(TermCode::DDP_U_TOO_LONG, WcStatus::LocalLength);
        }
        self.rx.target = Target::Small { mo };
    }

    /// The last segment of an Immediate Data message (RFC 7306 §6) whose
    /// body ends at `end` octets: it consumed the receive buffer `begin`
    /// took; the buffer completes with the immediate, nothing placed in it.
    #[cold]
    #[inline(never)]
    fn immediate_data(&mut self, hdr: DdpHeader, u: UntaggedHeader, end: usize) {
        self.rx.small_len = self.rx.small_len.max(end);
        if !u.ddp.last() {
            return;
        }
        let len = core::mem::take(&mut self.rx.small_len);
        self.rx.expected_msn[0] = self.rx.expected_msn[0].wrapping_add(1);
        // Exactly 8 octets: a shorter body is a malformed message (longer
        // ones were refused as too long when the segment began).
        let Ok(d) = ImmediateData::parse(&self.rx.small[..len.min(IMMEDIATE_DATA_LEN)]) else {
            self.rx.cur_status = Some(WcStatus::LocalLength);
            return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
        };
        let Some(r) = self.rx.cur.take() else {
            return;
        };
        self.completions.push_back((
            Completion {
                wr_id: r.wr_id,
                opcode: WcOpcode::RecvRdmaWithImm,
                status: WcStatus::Success,
                byte_len: 0,
                solicited: u.rdmap.opcode().solicited(),
                invalidated: None,
                imm: Some(d.imm32()),
            },
            0,
        ));
    }

    /// A whole Atomic Request of `len` octets (RFC 7306 §5) was delivered on
    /// QN 1: check it, run it on registered memory, and queue its Atomic
    /// Response behind the Read Responses already owed (the IRD bound of
    /// `begin` covers both).
    #[cold]
    #[inline(never)]
    fn atomic_request(&mut self, hdr: DdpHeader, u: UntaggedHeader, len: usize) {
        let Ok(req) = AtomicRequest::parse(&self.rx.read_req[..len.min(ATOMIC_REQUEST_LEN)]) else {
            // An Atomic Request without its 52-octet body.
            return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
        };
        if matches!(req.op, AtomicOp::Unknown(_)) {
            // An operation RFC 7306 does not define.
            return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
        }
        // The target: 8 octets the STag grants remote atomic access to
        // (RFC 7306 §5; RFC 5040 §7.2 protection errors as for a Read
        // Request's source).
        let range = match self.mem.check(
            STag(req.stag),
            self.cfg.pd,
            Access::REMOTE_ATOMIC,
            req.to,
            8,
        ) {
            Ok(r) => r,
            Err(e) => return self.raise_with_header(rdmap_protection_code(e), hdr),
        };
        // RFC 7306 §5: the Remote Tagged Offset is 8-octet aligned. A
        // misaligned one is refused as a bounds violation (the target is
        // not a location the operation may use).
        if req.to % 8 != 0 {
            return self.raise_with_header(TermCode::RDMAP_BASE_BOUNDS, hdr);
        }
        let mut b = [0u8; 8];
        let read = self
            .mem
            .read(&range, 0, 8)
            .is_some_and(|s| s.copy_to(0, &mut b));
        if !read {
            return self.raise_with_header(TermCode::RDMAP_INVALID_STAG, hdr);
        }
        // The target holds a 64-bit integer in this host's byte order (as
        // verbs atomics do); it is exchanged on the wire big-endian.
        let orig = u64::from_ne_bytes(b);
        if let Some(new) = req.apply(orig) {
            if !self.mem.write(&range, 0, &new.to_ne_bytes()) {
                return self.raise_with_header(TermCode::RDMAP_INVALID_STAG, hdr);
            }
        }
        self.tx.resp.push_back(ReadResp {
            req: ReadRequest::default(),
            hdr: u,
            atomic: Some(AtomicResponse {
                orig_req_id: req.req_id,
                orig_value: orig,
            }),
        });
    }

    /// The last segment of an Atomic Response (RFC 7306 §5), body `len`
    /// octets: place the original value and complete the oldest outstanding
    /// atomic (responses come in request order).
    #[cold]
    #[inline(never)]
    fn atomic_response(&mut self, hdr: DdpHeader, u: UntaggedHeader, len: usize) {
        self.rx.small_len = self.rx.small_len.max(len);
        if !u.ddp.last() {
            return;
        }
        let len = core::mem::take(&mut self.rx.small_len);
        self.rx.expected_msn[3] = self.rx.expected_msn[3].wrapping_add(1);
        let Some(p) = self.tx.atomics.front().copied() else {
            return;
        };
        let resp = AtomicResponse::parse(&self.rx.small[..len.min(ATOMIC_RESPONSE_LEN)]);
        let resp = match resp {
            Ok(r) if r.orig_req_id == p.req_id => r,
            // Short, or not the answer to the request it must answer: it
            // does not match its request (as a Read Response that does not,
            // RFC 5040 §7.1 case 2).
            _ => {
                self.retire_atomic(WcStatus::BadResponse);
                return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
            }
        };
        let placed = self
            .mem
            .check(
                p.local.stag,
                self.cfg.pd,
                Access::LOCAL_WRITE,
                p.local.to,
                8,
            )
            .map(|r| self.mem.write(&r, 0, &resp.orig_value.to_ne_bytes()));
        match placed {
            Ok(true) => self.retire_atomic(WcStatus::Success),
            // The application revoked the buffer since the post.
            Ok(false) | Err(_) => {
                let e = placed.err().unwrap_or(AccessError::InvalidStag);
                self.retire_atomic(WcStatus::LocalProtection(e));
                self.raise(TermInfo {
                    code: TermCode::DDP_LOCAL_CATASTROPHIC,
                    hdr: None,
                    seg_len: 0,
                    rdma: None,
                });
            }
        }
    }

    /// Complete the oldest outstanding atomic with `status`.
    fn retire_atomic(&mut self, status: WcStatus) {
        let Some(p) = self.tx.atomics.pop_front() else {
            return;
        };
        if let Some(i) = p.seq.checked_sub(self.tx.head_seq) {
            if let Some(e) = self.tx.sq.get_mut(i as usize) {
                e.state = SqState::Done(status);
            }
        }
    }
}

impl UlpduSink for RxCtx<'_> {
    fn segment_begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        self.begin(ulpdu_len, header);
    }
    fn segment_data(&mut self, data: &[u8]) {
        self.data(data);
    }
    fn segment_end(&mut self) {
        self.end();
    }
    fn segment_whole(&mut self, ulpdu_len: u16, header: &[u8], payload: &[u8]) {
        if self.whole_tagged(header, payload) {
            return;
        }
        self.begin(ulpdu_len, header);
        if !payload.is_empty() {
            self.data(payload);
        }
        self.end();
    }
}
