//! Memory: protection domains ([`Pd`]), registered regions ([`Mr`]) and
//! memory windows ([`Mw`]).

use crate::router::keep_step;
#[cfg(doc)]
use crate::MemError;
use crate::{Access, Context, Error, PdId, Region, STag, Sge};

/// A protection domain: the regions, windows and queue pairs that may
/// touch each other. A queue pair uses only STags of its own domain, for
/// local buffers as for what the peer names (`ibv_alloc_pd`).
///
/// ```
/// use iwarp::{Access, Context, Error, MemError};
/// # fn main() -> Result<(), iwarp::Error> {
/// let (ctx, _peer) = Context::sim_pair();
/// let pd = ctx.alloc_pd()?;
/// // A receive buffer, and a target the peer may write and read.
/// let inbox = pd.register(vec![0; 4096], Access::LOCAL_WRITE)?;
/// let shared = pd.register(vec![0; 4096], Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ)?;
/// assert_ne!(inbox.stag(), shared.stag());
/// // Windows give the peer a part of a region registered with MW_BIND.
/// let mut mw = pd.alloc_mw()?;
/// assert!(matches!(
///     mw.bind(&inbox, 0, 64, Access::REMOTE_READ),
///     Err(Error::Memory(MemError::NoBindRight))
/// ));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Pd {
    pub(crate) ctx: Context,
    pub(crate) id: PdId,
}

impl Pd {
    /// The domain's id.
    pub fn id(&self) -> PdId {
        self.id
    }

    /// A memory window in this domain (unbound until [`Mw::bind`]).
    pub fn alloc_mw(&self) -> Result<Mw, Error> {
        let pd = self.id;
        // A window the loops do not agree on is freed again on each.
        let stag = self.ctx.inner.memory_or_undo(
            move |m| m.alloc_mw(pd),
            |m, r| match r {
                Ok(stag) => {
                    let _ = m.dealloc_mw(stag);
                }
                Err(_) => keep_step(m),
            },
        )??;
        Ok(Mw {
            ctx: self.ctx.clone(),
            stag,
        })
    }

    /// Register `buf` with `access` rights, in place: the vector's buffer
    /// does not move, the poll loop places into it and sends from it, and
    /// the application reads and writes it through the returned [`Mr`]
    /// (from any thread, no round trip to the loop). [`Mr::deregister`]
    /// gives the memory back.
    pub fn register(&self, buf: Vec<u8>, access: Access) -> Result<Mr, Error> {
        self.register_region(Region::from_vec(buf), access)
    }

    /// Register memory the caller already shares as a [`Region`]: a
    /// `&'static mut [u8]` ([`Region::from_static`]), hugepages or another
    /// mapping ([`Region::from_raw`]), or a region registered before (two
    /// MRs, e.g. with different rights, over the same memory). The caller
    /// may keep its own handle and use the memory through it.
    ///
    /// ```
    /// use iwarp::{Access, Context, Region};
    /// # fn main() -> Result<(), iwarp::Error> {
    /// let (ctx, _peer) = Context::sim_pair();
    /// let pd = ctx.alloc_pd()?;
    /// let mem = Region::from_static(Box::leak(vec![0u8; 4096].into_boxed_slice()));
    /// let mr = pd.register_region(mem.clone(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    /// mem.write(0, b"in place")?;
    /// assert_eq!(mr.read(0, 8)?, b"in place");
    /// # Ok(()) }
    /// ```
    pub fn register_region(&self, mem: Region, access: Access) -> Result<Mr, Error> {
        self.register_region_at(mem, access, 0)
    }

    /// [`register_region`](Self::register_region) at base tagged offset
    /// `base_to`: TOs `base_to .. base_to + len` address the region (octet
    /// `offset` is TO `base_to + offset`), in the peer's RDMA Writes and
    /// Reads and in local SGEs alike, as verbs registers memory with its
    /// virtual address as the TO (`ibv_reg_mr(pd, addr, len)`, then the
    /// peer writes to `remote_addr = addr`). [`Mr::sge`] adds the base
    /// ([`Mr::base_to`]); [`Mr::read`], [`Mr::write`], [`Mr::load`],
    /// [`Mr::store`] and [`Mw::bind`] take region offsets. A TO outside
    /// the range, below the base included, fails the access check (a
    /// peer's: remote access error). [`MemError::TooLarge`] if
    /// `base_to + len` overflows.
    ///
    /// ```
    /// use iwarp::{Access, Context, Region};
    /// # fn main() -> Result<(), iwarp::Error> {
    /// let (ctx, _peer) = Context::sim_pair();
    /// let pd = ctx.alloc_pd()?;
    /// let mem = Region::from_vec(vec![0; 4096]);
    /// let mr = pd.register_region_at(mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE, 0x7f00_1234_5000)?;
    /// assert_eq!(mr.base_to(), 0x7f00_1234_5000);
    /// assert_eq!(mr.sge(16, 8).to, 0x7f00_1234_5010);
    /// # Ok(()) }
    /// ```
    pub fn register_region_at(
        &self,
        mem: Region,
        access: Access,
        base_to: u64,
    ) -> Result<Mr, Error> {
        let pd = self.id;
        let shared = mem.clone();
        let stag = self.ctx.inner.memory_or_undo(
            move |m| m.register(pd, shared, access, base_to),
            // A region the loops do not agree on is deregistered
            // again on each.
            |m, r| match r {
                Ok(stag) => {
                    let _ = m.deregister(stag);
                }
                Err(_) => keep_step(m),
            },
        )??;
        Ok(Mr {
            ctx: self.ctx.clone(),
            stag,
            mem,
            base_to,
        })
    }
}

/// A memory window: remote access to part of a region, with its own rights,
/// revocable without touching the region.
#[derive(Debug)]
pub struct Mw {
    ctx: Context,
    stag: STag,
}

impl Mw {
    /// The window's current STag (changes with every bind).
    pub fn stag(&self) -> STag {
        self.stag
    }

    /// Bind the window to `len` octets at `offset` of `mr` (registered with
    /// [`Access::MW_BIND`]) with `access` (remote read and/or write); a
    /// previous binding ends. Returns the new STag to hand to the peer; the
    /// peer addresses the window with the region's TOs for those octets,
    /// `mr.base_to() + offset .. mr.base_to() + offset + len`
    /// (`offset..offset + len` for a region registered at base 0).
    pub fn bind(&mut self, mr: &Mr, offset: u64, len: u64, access: Access) -> Result<STag, Error> {
        let (mw, region) = (self.stag, mr.stag);
        self.stag = self
            .ctx
            .inner
            .memory(move |m| m.bind_mw(mw, region, offset, len, access))??;
        Ok(self.stag)
    }

    /// Invalidate the window locally: remote access with its STag fails.
    pub fn invalidate(&self) -> Result<(), Error> {
        let stag = self.stag;
        Ok(self.ctx.inner.memory(move |m| m.invalidate(stag))??)
    }

    /// Free the window.
    pub fn dealloc(self) -> Result<(), Error> {
        let stag = self.stag;
        Ok(self.ctx.inner.memory(move |m| m.dealloc_mw(stag))??)
    }
}

/// A registered memory region. Its STag serves as both lkey and rkey.
///
/// The memory is used in place by both the poll loop and the application:
/// [`read`](Self::read), [`write`](Self::write), [`load`](Self::load) and
/// [`store`](Self::store) go straight to it from the calling thread (also
/// from inside a loop hook), with no command to the loop. They are atomic
/// copies (see `iwarp-memreg`), so racing a peer's RDMA Write gives
/// unspecified octets, never undefined behaviour; order through completions,
/// or poll an octet with [`load`](Self::load), which acquires everything
/// placed before it.
///
/// Local read is implicit, as in verbs (`ibv_reg_mr`): any region of the
/// queue pair's domain may be the source of a Send or an RDMA Write, and
/// [`Access::LOCAL_WRITE`] and the remote rights add to that.
///
/// ```
/// use iwarp::{Access, Context};
/// # fn main() -> Result<(), iwarp::Error> {
/// let (ctx, _peer) = Context::sim_pair();
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.register(vec![0; 64], Access::LOCAL_WRITE)?;
/// mr.write(0, b"hello")?;
/// assert_eq!(mr.read(0, 5)?, b"hello");
/// // One piece of it for a work request (an `Sge` converts to a list).
/// let sge = mr.sge(0, 5);
/// assert_eq!((sge.stag, sge.to, sge.len), (mr.stag(), 0, 5));
/// // Out of bounds is an error, never a panic.
/// assert!(mr.read(60, 8).is_err());
/// // Deregistering gives the memory back.
/// let mem = mr.deregister()?;
/// assert_eq!(mem.to_vec(0, 5)?, b"hello");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Mr {
    ctx: Context,
    stag: STag,
    mem: Region,
    /// The TO of the first octet.
    base_to: u64,
}

impl Mr {
    /// The STag (send it to a peer for RDMA Write/Read; use it in local SGEs).
    pub fn stag(&self) -> STag {
        self.stag
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Zero-length region.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// The registered memory itself (a handle the application may keep).
    pub fn memory(&self) -> &Region {
        &self.mem
    }

    /// The tagged offset of the region's first octet: 0, or the base given
    /// to [`Pd::register_region_at`]. Octet `offset` is TO
    /// `base_to() + offset` (what a peer puts in `remote_to`).
    pub fn base_to(&self) -> u64 {
        self.base_to
    }

    /// A scatter/gather element over `len` octets at region offset
    /// `offset` (its TO is [`base_to`](Self::base_to) + `offset`).
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.stag,
            to: self.base_to.saturating_add(offset),
            len,
        }
    }

    /// Copy `len` octets at `offset` out of the region.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, Error> {
        Ok(self.mem.to_vec(offset, len)?)
    }

    /// Copy `dst.len()` octets at `offset` into `dst`.
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        Ok(self.mem.read(offset, dst)?)
    }

    /// Copy `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        Ok(self.mem.write(offset, data)?)
    }

    /// One octet, acquiring: poll it for the last octet of a peer's Write,
    /// then read the rest.
    pub fn load(&self, offset: usize) -> Result<u8, Error> {
        Ok(self.mem.load(offset)?)
    }

    /// Store one octet, releasing.
    pub fn store(&self, offset: usize, value: u8) -> Result<(), Error> {
        Ok(self.mem.store(offset, value)?)
    }

    /// Invalidate the STag locally (remote access with it fails from now on).
    pub fn invalidate(&self) -> Result<(), Error> {
        let stag = self.stag;
        Ok(self.ctx.inner.memory(move |m| m.invalidate(stag))??)
    }

    /// Deregister: the stack drops its handle (nothing is placed into or
    /// sent from the memory afterwards) and the memory comes back as its
    /// [`Region`]. [`Region::into_vec`] turns it back into the registered
    /// `Vec` once no other handle (a clone of this `Mr`, a second
    /// registration) is left.
    pub fn deregister(self) -> Result<Region, Error> {
        let stag = self.stag;
        self.ctx
            .inner
            .memory(move |m| m.deregister(stag).map(drop))??;
        Ok(self.mem)
    }
}
