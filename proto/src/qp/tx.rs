//! The transmit path of a [`Qp`]: posting work requests, choosing the next
//! message, segmenting it into FPDUs or DDP Segments and building them.

use super::*;

impl Qp {
    /// Post a receive buffer: an [`Sge`] or an [`SgList`] that an incoming
    /// Send fills in order. Every non-empty entry needs local write; a Send
    /// longer than the list's total completes it with
    /// [`WcStatus::LocalLength`].
    pub fn post_recv(
        &mut self,
        mem: &MemoryTable,
        wr_id: u64,
        sgl: impl Into<SgList>,
    ) -> Result<(), PostError> {
        let sgl = sgl.into();
        if self.srq.is_some() {
            return Err(PostError::UsesSrq);
        }
        if self.state != QpState::Rts {
            return Err(self.not_ready());
        }
        if self.posted_recvs() >= self.cfg.rq_depth {
            return Err(PostError::QueueFull);
        }
        check_sgl(mem, self.cfg.pd, Access::LOCAL_WRITE, &sgl).map_err(PostError::Local)?;
        self.rx.rq.push_back(RecvWr { wr_id, sgl });
        Ok(())
    }

    /// Post a send-queue request. Every local entry is checked now (local
    /// read for Send and Write, local write for a Read sink) and again for
    /// each segment when the message is built.
    pub fn post_send(&mut self, mem: &MemoryTable, wr: WorkRequest) -> Result<(), PostError> {
        self.post_send_tagged(mem, wr, 0)
    }

    /// [`post_send`](Self::post_send) with a tag the queue pair keeps with
    /// the request and hands back with its completion
    /// ([`poll_completion_tagged`](Self::poll_completion_tagged)); it means
    /// nothing to the queue pair. The stack tags each request with the
    /// time of its post on the loop's clock, and so learns the request's
    /// latency when it completes without a table of its own.
    pub fn post_send_tagged(
        &mut self,
        mem: &MemoryTable,
        wr: WorkRequest,
        tag: u64,
    ) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(self.not_ready());
        }
        if self.tx.sq.len() >= self.cfg.sq_depth {
            return Err(PostError::QueueFull);
        }
        let local = wr.local();
        let need = match wr {
            WorkRequest::Read { .. } => {
                if self.cfg.ord == 0 {
                    return Err(PostError::NoOrd);
                }
                Access::LOCAL_WRITE
            }
            WorkRequest::WriteImm { .. }
            | WorkRequest::FetchAdd { .. }
            | WorkRequest::CmpSwap { .. }
            | WorkRequest::Atomic { .. } => return self.post_rfc7306(mem, wr, tag),
            WorkRequest::SendInline { data, .. } | WorkRequest::WriteInline { data, .. } => {
                // One FPDU: header + payload within the MULPDU.
                if UNTAGGED_HEADER_LEN + data.as_slice().len() > usize::from(self.cfg.mulpdu) {
                    return Err(PostError::InlineTooLong);
                }
                Access::LOCAL_READ
            }
            _ => Access::LOCAL_READ,
        };
        check_sgl(mem, self.cfg.pd, need, &local).map_err(PostError::Local)?;
        self.tx.sq.push_back(SqEntry::new(SqWork::Wr(wr), tag));
        Ok(())
    }

    /// [`post_send_tagged`](Self::post_send_tagged) for the RFC 7306
    /// requests, out of line: the Send/Write/Read post path stays as it was.
    #[cold]
    #[inline(never)]
    fn post_rfc7306(
        &mut self,
        mem: &MemoryTable,
        wr: WorkRequest,
        tag: u64,
    ) -> Result<(), PostError> {
        match wr {
            WorkRequest::FetchAdd { local, .. }
            | WorkRequest::CmpSwap { local, .. }
            | WorkRequest::Atomic { local, .. } => {
                // RFC 7306 §5: requests count against ORD, as Reads do.
                if self.cfg.ord == 0 {
                    return Err(PostError::NoOrd);
                }
                if local.len != 8 {
                    return Err(PostError::AtomicLength);
                }
                check_sgl(mem, self.cfg.pd, Access::LOCAL_WRITE, &SgList::from(local))
                    .map_err(PostError::Local)?;
            }
            WorkRequest::WriteImm {
                wr_id,
                local,
                remote_stag,
                remote_to,
                ..
            } if local.total_len() > 0 => {
                // The RDMA Write goes first, as an unsignaled entry of its
                // own (a failure still completes it, with this wr_id); the
                // Immediate Data entry after it completes the request.
                if self.tx.sq.len() + 2 > self.cfg.sq_depth {
                    return Err(PostError::QueueFull);
                }
                check_sgl(mem, self.cfg.pd, Access::LOCAL_READ, &local)
                    .map_err(PostError::Local)?;
                let write = WorkRequest::Write {
                    wr_id,
                    signaled: false,
                    local,
                    remote_stag,
                    remote_to,
                };
                self.tx.sq.push_back(SqEntry::new(SqWork::Wr(write), tag));
            }
            _ => {}
        }
        self.tx.sq.push_back(SqEntry::new(SqWork::Wr(wr), tag));
        Ok(())
    }

    /// Queue the RFC 6581 ready-to-receive message (peer-to-peer mode initiator).
    /// It produces no completion.
    pub fn post_rtr(&mut self, kind: RtrKind) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(self.not_ready());
        }
        self.tx.sq.push_back(SqEntry::new(SqWork::Rtr(kind), 0));
        Ok(())
    }

    /// The next DDP Segment to send, appended whole to `out` (no MPA
    /// framing): at most MULPDU octets (RFC 5043 §9, RFC 5041 §5.2). Returns
    /// its length, or `None` when there is nothing to send. Only for a QP
    /// over [`LowerLayer::Segments`] (`None` over MPA).
    pub fn poll_segment(&mut self, mem: &MemoryTable, out: &mut dyn TxBuf) -> Option<usize> {
        if !matches!(self.llp, Lower::Segments(_)) {
            return None;
        }
        // Nothing queued (most polls): no plan to build.
        if self.tx_idle() {
            self.drain_sq();
            return None;
        }
        // The common small message: written straight into `out`.
        if let Some(small) = self.small_next(mem, usize::MAX, u64::MAX) {
            let dst = out.append(small.wire);
            if dst.len() == small.wire {
                dst.fill(0);
                self.small_emit(mem, &small, dst);
                return Some(small.wire);
            }
            debug_assert!(false, "TxBuf ran out inside a segment");
            return None;
        }
        match self.poll_transmit(mem, out, usize::MAX, 1) {
            0 => None,
            n => Some(n),
        }
    }

    fn sq_entry(&mut self, seq: u64) -> Option<&mut SqEntry> {
        let i = seq.checked_sub(self.tx.head_seq)?;
        self.tx.sq.get_mut(i as usize)
    }

    /// Pick the next message: Terminate first, then Read Responses (in request
    /// order, RFC 5040 §5.2.2), then the send queue in order (rule 13), holding
    /// Read Requests back while ORD are outstanding (RFC 5040 §6.1). The
    /// job is built where it is kept (`tx.job`; `None`: none is ready): a
    /// job returned by value was copied twice more on its way there, 160
    /// octets each time.
    fn next_job(&mut self) -> Option<()> {
        let blank = Job {
            origin: JobOrigin::Terminate,
            opcode: Opcode::Terminate,
            stag: 0,
            to: 0,
            qn: 0,
            msn: 0,
            inval: 0,
            inline_len: 0,
            src: None,
            len: 0,
            off: 0,
            zero_fpdu: false,
        };
        if let Some(t) = self.tx.terminate {
            let (body, n) = t.to_array();
            self.tx.job_inline[..n].copy_from_slice(&body[..n]);
            let msn = self.tx.msn[2];
            self.tx.msn[2] = msn.wrapping_add(1);
            self.tx.job = Some(Job {
                qn: queue::TERMINATE,
                msn,
                inline_len: n,
                ..blank
            });
            return Some(());
        }
        if self.state != QpState::Rts {
            return None;
        }
        if let Some(r) = self.tx.resp.front() {
            let req = r.req;
            if let Some(a) = r.atomic {
                // RFC 7306 §4: Atomic Responses go on QN 3, one MSN each.
                let msn = self.tx.msn[3];
                self.tx.msn[3] = msn.wrapping_add(1);
                let _ = a.emit(&mut self.tx.job_inline);
                self.tx.job = Some(Job {
                    origin: JobOrigin::ReadResp,
                    opcode: Opcode::AtomicResponse,
                    qn: queue::ATOMIC_RESPONSE,
                    msn,
                    inline_len: ATOMIC_RESPONSE_LEN,
                    ..blank
                });
                return Some(());
            }
            self.tx.job = Some(Job {
                origin: JobOrigin::ReadResp,
                opcode: Opcode::ReadResponse,
                stag: req.sink_stag,
                to: req.sink_to,
                src: (req.size > 0).then_some((
                    SgList::from(Sge {
                        stag: STag(req.src_stag),
                        to: req.src_to,
                        len: req.size,
                    }),
                    Access::REMOTE_READ,
                )),
                len: req.size as u64,
                ..blank
            });
            return Some(());
        }
        let seq = self.tx.next_seq;
        // The entry is read where it lies (it is 176 octets: a copy of it
        // cost more than the fields a job takes from it); the queues'
        // fields it does not touch stay free to change.
        let idx = usize::try_from(seq.checked_sub(self.tx.head_seq)?).ok()?;
        let tx = &mut self.tx;
        let job = match &tx.sq.get(idx)?.work {
            SqWork::Wr(WorkRequest::Send {
                local,
                solicited,
                invalidate,
                ..
            }) => {
                let opcode = send_opcode(*solicited, invalidate.is_some());
                let msn = tx.msn[0];
                tx.msn[0] = msn.wrapping_add(1);
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode,
                    qn: queue::SEND,
                    msn,
                    inval: invalidate.map_or(0, |s| s.0),
                    src: Some((*local, Access::LOCAL_READ)),
                    len: local.total_len() as u64,
                    ..blank
                }
            }
            SqWork::Wr(WorkRequest::SendInline {
                data,
                solicited,
                invalidate,
                ..
            }) => {
                let opcode = send_opcode(*solicited, invalidate.is_some());
                let msn = tx.msn[0];
                tx.msn[0] = msn.wrapping_add(1);
                tx.job_inline[..data.as_slice().len()].copy_from_slice(data.as_slice());
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode,
                    qn: queue::SEND,
                    msn,
                    inval: invalidate.map_or(0, |s| s.0),
                    inline_len: data.as_slice().len(),
                    ..blank
                }
            }
            SqWork::Wr(WorkRequest::WriteInline {
                data,
                remote_stag,
                remote_to,
                ..
            }) => {
                tx.job_inline[..data.as_slice().len()].copy_from_slice(data.as_slice());
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode: Opcode::Write,
                    stag: remote_stag.0,
                    to: *remote_to,
                    inline_len: data.as_slice().len(),
                    ..blank
                }
            }
            SqWork::Wr(WorkRequest::Write {
                local,
                remote_stag,
                remote_to,
                ..
            }) => Job {
                origin: JobOrigin::Sq(seq),
                opcode: Opcode::Write,
                stag: remote_stag.0,
                to: *remote_to,
                src: Some((*local, Access::LOCAL_READ)),
                len: local.total_len() as u64,
                ..blank
            },
            SqWork::Wr(WorkRequest::Read {
                local,
                remote_stag,
                remote_to,
                ..
            }) => {
                let (local, remote_stag, remote_to) = (*local, *remote_stag, *remote_to);
                if self.ord_full() {
                    return None;
                }
                self.read_request_job(seq, local, remote_stag, remote_to, blank)
            }
            SqWork::Wr(
                wr @ (WorkRequest::WriteImm { .. }
                | WorkRequest::FetchAdd { .. }
                | WorkRequest::CmpSwap { .. }
                | WorkRequest::Atomic { .. }),
            ) => {
                let wr = *wr;
                self.rfc7306_job(seq, wr, blank)?
            }
            SqWork::Rtr(RtrKind::ZeroLengthFpdu) => Job {
                origin: JobOrigin::Sq(seq),
                zero_fpdu: true,
                ..blank
            },
            SqWork::Rtr(RtrKind::Write) => {
                // wire-facts.md: Linux uses STag 1 because Chelsio rejects STag 0.
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode: Opcode::Write,
                    stag: 1,
                    ..blank
                }
            }
            SqWork::Rtr(RtrKind::Read) => {
                if tx.reads.len() >= self.cfg.ord.max(1) as usize {
                    return None;
                }
                self.read_request_job(
                    seq,
                    SgList::from(Sge {
                        stag: STag(1),
                        to: 0,
                        len: 0,
                    }),
                    STag(1),
                    0,
                    blank,
                )
            }
        };
        self.tx.next_seq += 1;
        if let Some(e) = self.sq_entry(seq) {
            e.state = SqState::Sending;
            if job.opcode.tagged() == Some(false) && !job.zero_fpdu {
                e.untagged = Some((job.qn, job.msn));
            }
        }
        self.tx.job = Some(job);
        Some(())
    }

    /// [`next_job`](Self::next_job) for the RFC 7306 requests, out of
    /// line (`None`: an atomic held back by ORD).
    #[cold]
    #[inline(never)]
    fn rfc7306_job(&mut self, seq: u64, wr: WorkRequest, blank: Job) -> Option<Job> {
        Some(match wr {
            WorkRequest::WriteImm { imm, solicited, .. } => {
                // RFC 7306 §6: Immediate Data, untagged on QN 0 (after the
                // RDMA Write entry, if any, which went first).
                let msn = self.tx.msn[0];
                self.tx.msn[0] = msn.wrapping_add(1);
                let _ = ImmediateData::from_imm32(imm).emit(&mut self.tx.job_inline);
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode: if solicited {
                        Opcode::ImmediateDataSe
                    } else {
                        Opcode::ImmediateData
                    },
                    qn: queue::SEND,
                    msn,
                    inline_len: IMMEDIATE_DATA_LEN,
                    ..blank
                }
            }
            WorkRequest::FetchAdd {
                local,
                remote_stag,
                remote_to,
                add,
                ..
            } => {
                if self.ord_full() {
                    return None;
                }
                let req = AtomicRequest {
                    op: AtomicOp::FetchAdd,
                    req_id: 0,
                    stag: remote_stag.0,
                    to: remote_to,
                    add_swap: add,
                    add_swap_mask: 0,
                    compare: 0,
                    compare_mask: 0,
                };
                self.atomic_request_job(seq, local, req, blank)
            }
            WorkRequest::CmpSwap {
                local,
                remote_stag,
                remote_to,
                compare,
                swap,
                ..
            } => {
                if self.ord_full() {
                    return None;
                }
                let req = AtomicRequest {
                    op: AtomicOp::CmpSwap,
                    req_id: 0,
                    stag: remote_stag.0,
                    to: remote_to,
                    add_swap: swap,
                    add_swap_mask: u64::MAX,
                    compare,
                    compare_mask: u64::MAX,
                };
                self.atomic_request_job(seq, local, req, blank)
            }
            WorkRequest::Atomic {
                local,
                remote_stag,
                remote_to,
                op,
                ..
            } => {
                if self.ord_full() {
                    return None;
                }
                let (op, add_swap, add_swap_mask, compare, compare_mask) = match op {
                    Atomic::FetchAdd { add, field_mask } => {
                        (AtomicOp::FetchAdd, add, field_mask, 0, 0)
                    }
                    Atomic::Swap { swap, swap_mask } => (AtomicOp::Swap, swap, swap_mask, 0, 0),
                    Atomic::CmpSwap {
                        compare,
                        compare_mask,
                        swap,
                        swap_mask,
                    } => (AtomicOp::CmpSwap, swap, swap_mask, compare, compare_mask),
                };
                let req = AtomicRequest {
                    op,
                    req_id: 0,
                    stag: remote_stag.0,
                    to: remote_to,
                    add_swap,
                    add_swap_mask,
                    compare,
                    compare_mask,
                };
                self.atomic_request_job(seq, local, req, blank)
            }
            _ => return None,
        })
    }

    /// Every ORD slot is taken by an outstanding Read or atomic (RFC 5040
    /// §6.1, RFC 7306 §4): the next one waits.
    fn ord_full(&self) -> bool {
        self.tx.reads.len() + self.tx.atomics.len() >= self.cfg.ord as usize
    }

    /// An Atomic Request on QN 1 (RFC 7306 §4), counted against ORD from
    /// the moment it is sent, as a Read Request is (RFC 5040 §6.1).
    fn atomic_request_job(&mut self, seq: u64, local: Sge, req: AtomicRequest, blank: Job) -> Job {
        let req_id = self.tx.next_atomic_id;
        self.tx.next_atomic_id = req_id.wrapping_add(1);
        let req = AtomicRequest { req_id, ..req };
        let msn = self.tx.msn[1];
        self.tx.msn[1] = msn.wrapping_add(1);
        let _ = req.emit(&mut self.tx.job_inline);
        self.tx
            .atomics
            .push_back(PendingAtomic { seq, req_id, local });
        Job {
            origin: JobOrigin::Sq(seq),
            opcode: Opcode::AtomicRequest,
            qn: queue::READ_REQUEST,
            msn,
            inline_len: ATOMIC_REQUEST_LEN,
            ..blank
        }
    }

    fn read_request_job(
        &mut self,
        seq: u64,
        local: SgList,
        remote_stag: STag,
        remote_to: u64,
        blank: Job,
    ) -> Job {
        let sink = local.advertised();
        let req = ReadRequest {
            sink_stag: sink.stag.0,
            sink_to: sink.to,
            size: local.total_len(),
            src_stag: remote_stag.0,
            src_to: remote_to,
        };
        let msn = self.tx.msn[1];
        self.tx.msn[1] = msn.wrapping_add(1);
        let _ = req.emit(&mut self.tx.job_inline);
        // RFC 5040 §6.1: counted against ORD from the moment it is sent.
        self.tx.reads.push_back(PendingRead {
            seq,
            sink: Sge {
                len: req.size,
                ..sink
            },
            sgl: local,
            received: 0,
        });
        Job {
            origin: JobOrigin::Sq(seq),
            opcode: Opcode::ReadRequest,
            qn: queue::READ_REQUEST,
            msn,
            inline_len: READ_REQUEST_LEN,
            ..blank
        }
    }

    /// Append FPDUs to `out`: at most `max_fpdus`, and at most `max_bytes`
    /// octets (callers pass the EMSS to get one TCP segment's worth; every
    /// FPDU fits in one EMSS by construction of MULPDU). Returns the octets added.
    /// Over [`LowerLayer::Segments`] it appends bare DDP Segments whose
    /// boundaries the caller cannot see: use [`poll_segment`](Self::poll_segment).
    #[inline]
    pub fn poll_transmit(
        &mut self,
        mem: &MemoryTable,
        out: &mut dyn TxBuf,
        max_bytes: usize,
        max_fpdus: usize,
    ) -> usize {
        let start = out.len();
        let mut fpdus = 0;
        while fpdus < max_fpdus {
            let mut plan = Plan::EMPTY;
            if !self.plan_fpdu(mem, max_bytes - (out.len() - start), &mut plan) {
                break;
            }
            match self.emit_plan(mem, &plan, out) {
                Some(true) => {}
                Some(false) => continue,
                None => break,
            }
            fpdus += 1;
            self.finish_fpdu(&plan, false);
        }
        let n = out.len() - start;
        self.stats.stream_tx += n as u64;
        self.drain_sq();
        n
    }

    /// Frame a planned FPDU into `out`, its payload copied from registered
    /// memory. `Some(false)`: a source is no longer readable (the job
    /// completed in error); `None`: the framer refused (cannot happen).
    fn emit_plan(&mut self, mem: &MemoryTable, plan: &Plan, out: &mut dyn TxBuf) -> Option<bool> {
        let job = self.tx.job.as_ref()?;
        // Source bytes, re-checked now, gathered from as many entries as
        // the segment spans.
        let mut payload: [Part<'_>; MAX_SGE] = [Part::Bytes(&[]); MAX_SGE];
        for (p, r) in payload.iter_mut().zip(plan.src.as_slice()) {
            match mem.read(r, 0, r.len) {
                Some(slice) => *p = Part::Region(slice),
                None => {
                    let job = *job;
                    self.local_build_error(job, AccessError::InvalidStag);
                    return Some(false);
                }
            }
        }
        let n = plan.src.n;
        let mut parts: [Part<'_>; 2 + MAX_SGE] = [Part::Bytes(&[]); 2 + MAX_SGE];
        parts[0] = Part::Bytes(&plan.hdr[..plan.hdr_len]);
        parts[1] = Part::Bytes(&self.tx.job_inline[..job.inline_len]);
        parts[2..2 + n].copy_from_slice(&payload[..n]);
        // Cannot fail: ulpdu_len <= mulpdu <= u16::MAX.
        self.llp.emit_parts(&parts[..2 + n], out).ok()?;
        Some(true)
    }

    /// Whether [`poll_record`](Self::poll_record) can describe this QP's
    /// FPDUs: over MPA without markers (markers depend on the stream
    /// position, so those FPDUs are framed as octets by
    /// [`poll_transmit`](Self::poll_transmit)), and always over DDP/SCTP,
    /// whose records are bare DDP Segments.
    pub fn can_describe(&self) -> bool {
        match &self.llp {
            Lower::Mpa { framer, .. } => !framer.markers(),
            // Bare DDP Segments (DDP over SCTP): nothing depends on a
            // stream position.
            Lower::Segments(_) => true,
        }
    }

    /// The next FPDU, if one fits in `max_bytes`, as a record for a
    /// transport that asks for each segment's octets when it builds the
    /// frame ([`crate::txq`]): one-copy transmit.
    ///
    /// An FPDU of a Send or Write shorter than `copy_below` octets is
    /// framed as octets ([`TxRecord::Bytes`], one copy more) and the
    /// request completes once handed over, as with
    /// [`poll_transmit`](Self::poll_transmit): a small message costs
    /// little to copy, and its completion then waits for no ACK. So is an
    /// FPDU whose inline body passes what a descriptor holds (inline data
    /// above 44 octets). Every other FPDU is a descriptor of registered
    /// memory ([`TxRecord::Fpdu`]), and the Send or Write it ends completes
    /// when the caller reports it acknowledged
    /// ([`fpdu_acked`](Self::fpdu_acked)). The record goes on `txq`;
    /// returns whether one did (false when nothing is ready, it does not
    /// fit, or [`can_describe`](Self::can_describe) is false).
    pub fn poll_record(
        &mut self,
        mem: &MemoryTable,
        max_bytes: usize,
        copy_below: u64,
        txq: &mut TxQueue,
    ) -> bool {
        // Nothing queued (most polls of a connection): no plan to build.
        if !self.can_describe() || self.tx_idle() {
            return false;
        }
        if let Some(sent) = self.poll_small(mem, max_bytes, copy_below, txq) {
            return sent;
        }
        let crc_on = match &self.llp {
            Lower::Mpa { framer, .. } => framer.crc(),
            Lower::Segments(_) => false,
        };
        // Planned in place and described straight into the queue: a plan
        // and a descriptor are a few hundred octets, and moving them
        // through return values cost more than the copy of the payload
        // that one-copy transmit saves.
        let mut plan = Plan::EMPTY;
        let completes = loop {
            if !self.plan_fpdu(mem, max_bytes, &mut plan) {
                return false;
            }
            let Some(job) = self.tx.job.as_ref() else {
                return false;
            };
            let message = matches!(job.origin, JobOrigin::Sq(_))
                && job.opcode != Opcode::ReadRequest
                && job.opcode != Opcode::AtomicRequest;
            let copy = (message && job.len < copy_below)
                || 2 + plan.hdr_len + job.inline_len > crate::txq::HEAD_MAX;
            if !copy {
                break match job.origin {
                    JobOrigin::Sq(seq) if plan.last && message => Some(seq),
                    _ => None,
                };
            }
            // Sized for the whole FPDU (header, payload, pad, CRC) up front:
            // growing it piece by piece reallocated two or three times per
            // small message.
            let wire = self
                .llp
                .wire_len(plan.hdr_len + job.inline_len + plan.chunk as usize);
            // A buffer an acknowledged record left, when one fits.
            let mut v = txq.buffer(wire);
            match self.emit_plan(mem, &plan, &mut v) {
                Some(true) => {
                    self.stats.stream_tx += v.len() as u64;
                    self.finish_fpdu(&plan, false);
                    self.drain_sq();
                    txq.push(TxRecord::Bytes(v));
                    return true;
                }
                Some(false) => continue,
                None => return false,
            }
        };
        let Some(job) = self.tx.job.as_ref() else {
            return false;
        };
        // Cannot fail: the ULPDU is within MULPDU and the head was checked.
        let mpa = matches!(self.llp, Lower::Mpa { .. });
        let Some(wire) = txq.push_fpdu(
            &plan.hdr[..plan.hdr_len],
            &self.tx.job_inline[..job.inline_len],
            plan.src.as_slice(),
            crc_on,
            completes,
            mpa,
        ) else {
            return false;
        };
        if let Lower::Mpa { framer, .. } = &mut self.llp {
            framer.skip(wire);
        }
        self.stats.stream_tx += wire as u64;
        self.finish_fpdu(&plan, true);
        self.drain_sq();
        true
    }

    /// [`poll_record`](Self::poll_record)'s path for the common small
    /// message (see [`small_next`](Self::small_next)): its FPDU written
    /// straight into one record's buffer. `None`: the general path runs.
    #[inline]
    fn poll_small(
        &mut self,
        mem: &MemoryTable,
        max_bytes: usize,
        copy_below: u64,
        txq: &mut TxQueue,
    ) -> Option<bool> {
        let small = self.small_next(mem, max_bytes, copy_below)?;
        let mut v = txq.buffer(small.wire);
        v.resize(small.wire, 0);
        self.small_emit(mem, &small, &mut v);
        txq.push(TxRecord::Bytes(v));
        Some(true)
    }

    /// The next send queue entry, if it is the common small message: a
    /// Send or Write (inline or from registered memory) of fewer than
    /// `copy_below` octets from at most one piece of memory that fits one
    /// FPDU within `max_bytes`, with nothing else (a Terminate, a Read Response, a
    /// message under way) to go first and its source passing its checks.
    /// Its header is built and its source checked, as the general path's
    /// plan would; `None` leaves everything else, and every
    /// error, to that path, which decides alike.
    #[inline]
    fn small_next(&self, mem: &MemoryTable, max_bytes: usize, copy_below: u64) -> Option<Small> {
        if self.tx.job.is_some()
            || self.tx.terminate.is_some()
            || !self.tx.resp.is_empty()
            || self.state != QpState::Rts
        {
            return None;
        }
        let idx = usize::try_from(self.tx.next_seq.checked_sub(self.tx.head_seq)?).ok()?;
        let msn = self.tx.msn[0];
        let untagged = |solicited: bool, inval: Option<STag>| {
            DdpHeader::Untagged(UntaggedHeader {
                ddp: DdpControl::new(false, true),
                rdmap: RdmapControl::new(send_opcode(solicited, inval.is_some())),
                inval_stag: inval.map_or(0, |s| s.0),
                qn: queue::SEND,
                msn,
                mo: 0,
            })
        };
        let tagged = |stag: STag, to: u64| {
            DdpHeader::Tagged(TaggedHeader {
                ddp: DdpControl::new(true, true),
                rdmap: RdmapControl::new(Opcode::Write),
                stag: stag.0,
                to,
            })
        };
        let (h, inline_len, local) = match &self.tx.sq.get(idx)?.work {
            SqWork::Wr(WorkRequest::Write {
                local,
                remote_stag,
                remote_to,
                ..
            }) => (tagged(*remote_stag, *remote_to), 0, Some(local)),
            SqWork::Wr(WorkRequest::WriteInline {
                data,
                remote_stag,
                remote_to,
                ..
            }) => (
                tagged(*remote_stag, *remote_to),
                data.as_slice().len(),
                None,
            ),
            SqWork::Wr(WorkRequest::Send {
                local,
                solicited,
                invalidate,
                ..
            }) => (untagged(*solicited, *invalidate), 0, Some(local)),
            SqWork::Wr(WorkRequest::SendInline {
                data,
                solicited,
                invalidate,
                ..
            }) => (
                untagged(*solicited, *invalidate),
                data.as_slice().len(),
                None,
            ),
            _ => return None,
        };
        let mut hdr = [0u8; UNTAGGED_HEADER_LEN];
        let hdr_len = h.emit(&mut hdr).ok()?;
        let from_mem = local.map_or(0, |l| l.total_len() as u64);
        let ulpdu_len = hdr_len + inline_len + from_mem as usize;
        if from_mem >= copy_below || ulpdu_len > usize::from(self.cfg.mulpdu) {
            return None;
        }
        let wire = self.llp.wire_len(ulpdu_len);
        if wire > max_bytes {
            return None;
        }
        // One piece at most (a gather of several goes the general way).
        let mut src = Range::EMPTY;
        for sge in local.map_or(&[][..], |l| l.as_slice()) {
            if sge.len == 0 {
                continue;
            }
            if src.len > 0 {
                return None;
            }
            src = mem
                .check(
                    sge.stag,
                    self.cfg.pd,
                    Access::LOCAL_READ,
                    sge.to,
                    sge.len as u64,
                )
                .ok()?;
        }
        Some(Small {
            idx,
            hdr,
            hdr_len,
            inline_len,
            ulpdu_len,
            wire,
            send: matches!(h, DdpHeader::Untagged(_)),
            msn,
            src,
        })
    }

    /// Write the FPDU (MPA) or bare DDP Segment [`small_next`](Self::small_next)
    /// planned into `dst` (`small.wire` octets, zeroed), and complete its
    /// request: handed to the LLP (RFC 5040 §5.5 rule 14).
    fn small_emit(&mut self, mem: &MemoryTable, small: &Small, dst: &mut [u8]) {
        // MPA's length field is written by `Framer::seal` below.
        let mut at = if matches!(self.llp, Lower::Mpa { .. }) {
            crate::wire::fpdu::LEN_FIELD
        } else {
            0
        };
        dst[at..at + small.hdr_len].copy_from_slice(&small.hdr[..small.hdr_len]);
        at += small.hdr_len;
        if small.inline_len > 0 {
            if let Some(SqEntry {
                work:
                    SqWork::Wr(
                        WorkRequest::WriteInline { data, .. }
                        | WorkRequest::SendInline { data, .. },
                    ),
                ..
            }) = self.tx.sq.get(small.idx)
            {
                dst[at..at + small.inline_len].copy_from_slice(data.as_slice());
            }
            at += small.inline_len;
        }
        let r = &small.src;
        if r.len > 0 {
            // Cannot fail: checked by `small_next`, nothing ran between.
            let ok = mem
                .read(r, 0, r.len)
                .is_some_and(|s| s.copy_to(0, &mut dst[at..at + r.len]));
            debug_assert!(ok, "a checked source is readable");
        }
        if let Lower::Mpa { framer, .. } = &mut self.llp {
            // PAD is already zero (`dst` came zeroed).
            framer.seal(&mut dst[..small.wire], small.ulpdu_len);
        }
        if small.send {
            self.tx.msn[0] = small.msn.wrapping_add(1);
        }
        if let Some(e) = self.tx.sq.get_mut(small.idx) {
            e.state = SqState::Done(WcStatus::Success);
            if small.send {
                e.untagged = Some((queue::SEND, small.msn));
            }
        }
        self.tx.next_seq += 1;
        self.stats.stream_tx += small.wire as u64;
        self.stats.fpdus_tx += 1;
        self.drain_sq();
    }

    /// The FPDU that ended send queue entry `seq` ([`FpduDesc::completes`](crate::txq::FpduDesc::completes))
    /// was acknowledged by the LLP: the request completes (in order, RFC
    /// 5040 §5.5 rule 15).
    pub fn fpdu_acked(&mut self, seq: u64) {
        if let Some(e) = self.sq_entry(seq) {
            if e.state == SqState::AwaitAck {
                e.state = SqState::Done(WcStatus::Success);
            }
        }
        self.drain_sq();
    }

    /// Plan the next FPDU of the current job (`tx.job`, taken from the
    /// queues if none) that fits in `room_left` octets on the wire: its
    /// header and source ranges. A job whose source fails its checks
    /// completes in error here (and the next one is tried).
    fn plan_fpdu(&mut self, mem: &MemoryTable, room_left: usize, plan: &mut Plan) -> bool {
        loop {
            if self.tx.job.is_none() {
                self.next_job();
            }
            let Some(job) = self.tx.job.as_ref() else {
                return false;
            };
            let tagged = job.opcode.tagged() == Some(true);
            let hdr_len = if job.zero_fpdu {
                0
            } else if tagged {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            let room = (self.cfg.mulpdu as usize).saturating_sub(hdr_len + job.inline_len) as u64;
            let chunk = (job.len - job.off).min(room);
            let ulpdu_len = hdr_len + job.inline_len + chunk as usize;
            if self.llp.wire_len(ulpdu_len) > room_left {
                return false;
            }
            let last = job.off + chunk == job.len;
            plan.src.n = 0;
            if let Some((sgl, need)) = &job.src {
                if chunk > 0 {
                    match sgl.locate_into(mem, self.cfg.pd, *need, job.off, chunk, &mut plan.src) {
                        Ok(()) => {}
                        Err(e) => {
                            let job = *job;
                            self.local_build_error(job, e);
                            continue;
                        }
                    }
                }
            }
            let hdr = &mut plan.hdr;
            if !job.zero_fpdu {
                let h = if tagged {
                    DdpHeader::Tagged(TaggedHeader {
                        ddp: DdpControl::new(true, last),
                        rdmap: RdmapControl::new(job.opcode),
                        stag: job.stag,
                        to: job.to.wrapping_add(job.off),
                    })
                } else {
                    DdpHeader::Untagged(UntaggedHeader {
                        ddp: DdpControl::new(false, last),
                        rdmap: RdmapControl::new(job.opcode),
                        inval_stag: job.inval,
                        qn: job.qn,
                        msn: job.msn,
                        mo: job.off as u32,
                    })
                };
                let _ = h.emit(hdr);
            }
            plan.hdr_len = hdr_len;
            plan.chunk = chunk;
            plan.last = last;
            return true;
        }
    }

    /// The planned FPDU is on its way: advance the current job, and finish
    /// it after its last FPDU (`by_ref`: handed over as a descriptor, so a
    /// Send or Write completes on acknowledgement).
    fn finish_fpdu(&mut self, plan: &Plan, by_ref: bool) {
        self.stats.fpdus_tx += 1;
        if let Some(job) = &mut self.tx.job {
            job.off += plan.chunk;
        }
        if plan.last {
            if let Some(job) = self.tx.job.take() {
                self.job_done(job, by_ref);
            }
        }
    }

    fn job_done(&mut self, job: Job, by_ref: bool) {
        match job.origin {
            JobOrigin::Terminate => {
                let t = self.tx.terminate.take();
                self.state = QpState::Error;
                self.flush();
                if let Some(t) = t {
                    self.ended_by
                        .get_or_insert(DisconnectCause::TerminateSent(t.code));
                    self.events.push_back(QpEvent::TerminateSent(t));
                }
            }
            JobOrigin::ReadResp => {
                self.tx.resp.pop_front();
            }
            JobOrigin::Sq(seq) => {
                let is_read =
                    job.opcode == Opcode::ReadRequest || job.opcode == Opcode::AtomicRequest;
                if let Some(e) = self.sq_entry(seq) {
                    // RFC 5040 §5.5 rule 14: a Send or Write completes once DDP
                    // has handed it to the LLP; a Read waits for its response (rule 19).
                    // Handed over by reference, the LLP still reads the
                    // application's memory until it is acknowledged (rule 9
                    // allows the later completion).
                    e.state = if is_read {
                        SqState::AwaitResponse
                    } else if by_ref {
                        SqState::AwaitAck
                    } else {
                        SqState::Done(WcStatus::Success)
                    };
                }
            }
        }
    }

    /// RFC 5040 §7.1 case 1: an error while building a message: the request
    /// completes in error and a Terminate goes out instead.
    fn local_build_error(&mut self, job: Job, e: AccessError) {
        self.tx.job = None;
        match job.origin {
            JobOrigin::Sq(seq) => {
                if let Some(entry) = self.sq_entry(seq) {
                    entry.state = SqState::Done(WcStatus::LocalProtection(e));
                }
                self.raise(TermInfo {
                    code: TermCode::RDMAP_LOCAL_CATASTROPHIC,
                    hdr: None,
                    seg_len: 0,
                    rdma: None,
                });
            }
            JobOrigin::ReadResp => {
                // The source went away mid-response: report where we stopped
                // (RFC 5040 §4.8, Terminated RDMA Header updated to the current position).
                let Some(r) = self.tx.resp.front().copied() else {
                    return;
                };
                let mut req = r.req;
                req.sink_to = req.sink_to.wrapping_add(job.off);
                req.src_to = req.src_to.wrapping_add(job.off);
                req.size = req.size.saturating_sub(job.off as u32);
                self.raise(TermInfo {
                    code: rdmap_protection_code(e),
                    hdr: Some(DdpHeader::Untagged(r.hdr)),
                    seg_len: (UNTAGGED_HEADER_LEN + READ_REQUEST_LEN) as u16,
                    rdma: Some(req),
                });
            }
            JobOrigin::Terminate => {}
        }
    }
}

/// The opcode of a Send: solicited or not, invalidating or not (RFC 5040
/// §4.3).
fn send_opcode(solicited: bool, invalidate: bool) -> Opcode {
    match (solicited, invalidate) {
        (false, false) => Opcode::Send,
        (true, false) => Opcode::SendSe,
        (false, true) => Opcode::SendInvalidate,
        (true, true) => Opcode::SendSeInvalidate,
    }
}
