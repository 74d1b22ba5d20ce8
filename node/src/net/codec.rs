//! A request-response codec that moves one length-prefixed, size-limited frame per request,
//! and the inbound memory budget every frame is read under.
//!
//! All four Peerage request-response protocols (`/peerage/{election,members,coords,superpeer}
//! /2.0.0`) use it. The codec does not decode the frame: it bounds it, so that a malformed
//! frame reaches the node, which decodes it (decoders never panic), refuses it and reports the
//! sender to its reputation (`node/src/net/guard.rs`).
//!
//! Framing: an unsigned varint length, then that many bytes, then the end of the writer's
//! side of the stream. Knowing the length first lets the reader
//! - refuse a frame above the protocol's limit before reading its body ([`ErrorKind::InvalidData`]);
//! - reserve exactly its size from the process-wide [`InboundBudget`] before allocating it,
//!   and refuse it when the budget is spent ([`ErrorKind::OutOfMemory`]), or when the
//!   sender's own share of it is ([`ShareSpent`] inside that error);
//! - tell a stream that a closing connection cut (or a sender that gave up before writing)
//!   from a malformed frame: the end of the stream before the announced length is
//!   [`ErrorKind::UnexpectedEof`], and counts as nobody's fault.
//!
//! **Per peer.** A reservation is charged to the sending peer too, and a peer holds at most
//! its share (`max_inbound_bytes_per_peer`) whatever its connections and protocols: without
//! it, two hostile peers with two connections each (17 MiB of frames per connection,
//! `node/src/net/behaviour.rs`) spend the whole process budget, and every honest frame is
//! refused until they are banned. A frame beyond the share is its sender's fault
//! (`Offence::OverBudget`); one beyond the process budget, while the sender is within its
//! share, is not. The codec learns its peer at its connection's birth: request-response
//! clones the behaviour's codec once per connection (on the swarm's task, inside
//! `handle_established_*_connection`) and that clone once per stream. The behaviour's own
//! codec names no peer; a clone of it takes the peer [`InboundBudget::connecting`] names,
//! which [`super::accounted::Accounted`] sets around exactly those two calls. A codec that
//! names no peer (clients, tests) is charged to the process budget only.
//!
//! **Reports.** request-response drops a failed `read_request` with a debug line and tells
//! the behaviour nothing (0.30: the request was never registered), so the codec itself
//! queues what a failed read says about its peer: a malformed frame (oversized, trailing
//! bytes, a bad length) or a spent share. The node drains the queue
//! ([`InboundBudget::take_reports`]) and reports to its reputation; the queue holds at most
//! [`MAX_REPORTS`], and beyond that counts what it dropped.
//!
//! Responses are short acknowledgements, read raw up to [`MAX_RESPONSE_BYTES`].

use futures::prelude::*;
use libp2p::{PeerId, StreamProtocol};
use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The largest response accepted: responses are acknowledgements.
pub const MAX_RESPONSE_BYTES: u64 = 1024;

/// Read failures queued for the node at most (module doc, "Reports").
pub const MAX_REPORTS: usize = 1024;

/// The request's frame was accepted: it decoded and its claims passed.
pub const ACK_OK: u8 = 0;
/// The request's frame was refused (malformed, wrong version, a claim the directory
/// contradicts, or a message the state machine rejected).
pub const ACK_REJECTED: u8 = 1;

/// Bytes of inbound frames being read or held, for the whole process and per sending peer,
/// each with a cap.
#[derive(Debug)]
pub struct InboundBudget {
    cap: u64,
    peer_cap: u64,
    in_flight: AtomicU64,
    /// Bytes in flight per peer; a peer is listed only while it has some, so the map is
    /// bounded by the connections (`connection_limits`).
    per_peer: Mutex<HashMap<PeerId, u64>>,
    /// The peer whose connection is being set up ([`Self::connecting`]).
    connecting: Mutex<Option<PeerId>>,
    /// Failed reads that say something about their peer (module doc, "Reports").
    reports: Mutex<Vec<(PeerId, ReadFailure)>>,
    has_reports: std::sync::atomic::AtomicBool,
    reports_dropped: AtomicU64,
    peak: AtomicU64,
    refused: AtomicU64,
    over_share: AtomicU64,
    cut: AtomicU64,
    oversized: AtomicU64,
}

/// Which cap a reservation would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// The process's budget: nobody's fault alone.
    Process,
    /// The sender's own share: its fault.
    Share,
}

/// The payload of the [`ErrorKind::OutOfMemory`] error of a frame beyond its sender's share
/// (found by [`classify_read`]).
#[derive(Debug, thiserror::Error)]
#[error("the peer's inbound share is spent ({held} bytes in flight, share {share})")]
pub struct ShareSpent {
    pub held: u64,
    pub share: u64,
}

/// Names the peer of the connection being set up until dropped ([`InboundBudget::connecting`]).
pub struct Connecting<'a>(&'a InboundBudget);

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        *lock(&self.0.connecting) = None;
    }
}

/// A poisoned lock still holds consistent counters: every update is one insert or subtract.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl InboundBudget {
    /// A budget of `cap` bytes, each peer's share the whole of it.
    pub fn new(cap: u64) -> Arc<InboundBudget> {
        InboundBudget::with_share(cap, cap)
    }

    /// A budget of `cap` bytes, of which one peer holds at most `peer_cap`.
    pub fn with_share(cap: u64, peer_cap: u64) -> Arc<InboundBudget> {
        Arc::new(InboundBudget {
            cap,
            peer_cap: peer_cap.min(cap),
            in_flight: AtomicU64::new(0),
            per_peer: Mutex::new(HashMap::new()),
            connecting: Mutex::new(None),
            reports: Mutex::new(Vec::new()),
            has_reports: std::sync::atomic::AtomicBool::new(false),
            reports_dropped: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            over_share: AtomicU64::new(0),
            cut: AtomicU64::new(0),
            oversized: AtomicU64::new(0),
        })
    }

    /// Codecs cloned while the returned guard lives are charged to `peer` (module doc).
    pub fn connecting(&self, peer: PeerId) -> Connecting<'_> {
        *lock(&self.connecting) = Some(peer);
        Connecting(self)
    }

    fn connecting_peer(&self) -> Option<PeerId> {
        *lock(&self.connecting)
    }

    /// Reserve `n` bytes for a frame of `peer` (or of nobody in particular), or say which cap
    /// it would pass.
    pub fn reserve(self: &Arc<Self>, peer: Option<PeerId>, n: u64) -> Result<Reservation, (Spent, u64)> {
        let mut shares = peer.map(|_| lock(&self.per_peer));
        if let (Some(p), Some(map)) = (peer, shares.as_mut()) {
            let held = map.get(&p).copied().unwrap_or(0);
            if held.saturating_add(n) > self.peer_cap {
                self.over_share.fetch_add(1, Ordering::Relaxed);
                return Err((Spent::Share, held));
            }
        }
        let mut cur = self.in_flight.load(Ordering::Relaxed);
        loop {
            let next = cur.checked_add(n).filter(|next| *next <= self.cap);
            let Some(next) = next else {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err((Spent::Process, cur));
            };
            match self.in_flight.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    if let (Some(p), Some(map)) = (peer, shares.as_mut()) {
                        *map.entry(p).or_insert(0) += n;
                    }
                    return Ok(Reservation { budget: self.clone(), peer, n });
                }
                Err(now) => cur = now,
            }
        }
    }

    fn report(&self, peer: PeerId, failure: ReadFailure) {
        let mut q = lock(&self.reports);
        if q.len() >= MAX_REPORTS {
            self.reports_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push((peer, failure));
        self.has_reports.store(true, Ordering::Release);
    }

    /// The failed reads queued since the last call: a peer's malformed frames and frames
    /// beyond its share.
    pub fn take_reports(&self) -> Vec<(PeerId, ReadFailure)> {
        if !self.has_reports.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.reports))
    }

    /// Reports dropped because the queue was full.
    pub fn reports_dropped(&self) -> u64 {
        self.reports_dropped.load(Ordering::Relaxed)
    }

    /// Bytes `peer` holds now.
    pub fn held_by(&self, peer: &PeerId) -> u64 {
        lock(&self.per_peer).get(peer).copied().unwrap_or(0)
    }

    /// Peers holding bytes now.
    pub fn peers_holding(&self) -> usize {
        lock(&self.per_peer).len()
    }

    /// Bytes in flight now, the most ever, and the cap.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
    pub fn cap(&self) -> u64 {
        self.cap
    }
    /// The most one peer holds.
    pub fn peer_cap(&self) -> u64 {
        self.peer_cap
    }
    /// Frames refused because their sender's share was spent.
    pub fn over_share(&self) -> u64 {
        self.over_share.load(Ordering::Relaxed)
    }
    /// Frames refused because the budget was spent.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
    /// Streams that ended before their frame did (cut by a closing connection).
    pub fn cut(&self) -> u64 {
        self.cut.load(Ordering::Relaxed)
    }
    /// Frames refused for announcing more than the protocol's limit.
    pub fn oversized(&self) -> u64 {
        self.oversized.load(Ordering::Relaxed)
    }
}

/// Bytes reserved from an [`InboundBudget`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<InboundBudget>,
    peer: Option<PeerId>,
    n: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.peer {
            let mut map = lock(&self.budget.per_peer);
            if let Some(held) = map.get_mut(&p) {
                *held = held.saturating_sub(self.n);
                if *held == 0 {
                    map.remove(&p);
                }
            }
        }
        self.budget.in_flight.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// A request as read: the frame, and its share of the inbound budget, held until the node
/// has handled it.
#[derive(Debug)]
pub struct Frame {
    pub bytes: Vec<u8>,
    _held: Option<Reservation>,
}

impl Frame {
    /// A frame that holds no budget (what a sender builds).
    pub fn new(bytes: Vec<u8>) -> Frame {
        Frame { bytes, _held: None }
    }
}

impl std::ops::Deref for Frame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl From<Vec<u8>> for Frame {
    fn from(bytes: Vec<u8>) -> Frame {
        Frame::new(bytes)
    }
}

/// Length-prefixed frame codec with a request size limit chosen per protocol, charging the
/// frames it reads to its connection's peer (module doc).
#[derive(Debug)]
pub struct FrameCodec {
    max_request_bytes: u64,
    budget: Arc<InboundBudget>,
    /// The behaviour's own codec: its clones are its connections' codecs.
    prototype: bool,
    peer: Option<PeerId>,
}

impl Clone for FrameCodec {
    /// A connection's codec takes the peer being connected; a stream's, its connection's.
    fn clone(&self) -> Self {
        FrameCodec {
            max_request_bytes: self.max_request_bytes,
            budget: self.budget.clone(),
            prototype: false,
            peer: if self.prototype { self.budget.connecting_peer() } else { self.peer },
        }
    }
}

impl FrameCodec {
    /// A codec with a budget of its own (clients and tests).
    pub fn new(max_request_bytes: usize) -> Self {
        Self::with_budget(max_request_bytes, InboundBudget::new(u64::MAX / 2))
    }
    pub fn with_budget(max_request_bytes: usize, budget: Arc<InboundBudget>) -> Self {
        FrameCodec { max_request_bytes: max_request_bytes as u64, budget, prototype: true, peer: None }
    }
    /// The peer its frames are charged to.
    pub fn peer(&self) -> Option<PeerId> {
        self.peer
    }
}

/// Read an unsigned varint (at most 10 bytes); `Ok(None)` at a clean end of stream before it.
async fn read_varint<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Option<u64>> {
    let mut value = 0u64;
    for i in 0..10 {
        let mut b = [0u8; 1];
        if io.read(&mut b).await? == 0 {
            return if i == 0 { Ok(None) } else { Err(io::Error::new(ErrorKind::UnexpectedEof, "cut in a length")) };
        }
        value |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err(io::Error::new(ErrorKind::InvalidData, "length prefix longer than 10 bytes"))
}

/// Appends `n` as an unsigned varint: a frame's length prefix.
pub fn varint(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(unsigned_varint::encode::u64(n, &mut unsigned_varint::encode::u64_buffer()));
}

/// Read one frame of at most `limit` bytes from `peer` under `budget`.
pub async fn read_frame<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    limit: u64,
    budget: &Arc<InboundBudget>,
    peer: Option<PeerId>,
) -> io::Result<Frame> {
    let Some(len) = read_varint(io).await? else {
        budget.cut.fetch_add(1, Ordering::Relaxed);
        return Err(io::Error::new(ErrorKind::UnexpectedEof, "the stream ended before a frame"));
    };
    if len > limit {
        budget.oversized.fetch_add(1, Ordering::Relaxed);
        return Err(io::Error::new(
            ErrorKind::InvalidData,
            format!("a frame of {len} bytes exceeds the limit of {limit}"),
        ));
    }
    let held = match budget.reserve(peer, len) {
        Ok(held) => held,
        Err((Spent::Process, in_flight)) => {
            return Err(io::Error::new(
                ErrorKind::OutOfMemory,
                format!("inbound budget spent ({in_flight} bytes in flight)"),
            ))
        }
        Err((Spent::Share, held)) => {
            return Err(io::Error::new(ErrorKind::OutOfMemory, ShareSpent { held, share: budget.peer_cap }))
        }
    };
    let mut bytes = Vec::new();
    let got = io.take(len).read_to_end(&mut bytes).await?;
    if (got as u64) < len {
        budget.cut.fetch_add(1, Ordering::Relaxed);
        return Err(io::Error::new(ErrorKind::UnexpectedEof, format!("the stream ended after {got} of {len} bytes")));
    }
    let mut extra = [0u8; 1];
    if io.read(&mut extra).await? != 0 {
        return Err(io::Error::new(ErrorKind::InvalidData, "bytes after the frame"));
    }
    Ok(Frame { bytes, _held: Some(held) })
}

/// Write one frame.
pub async fn write_frame<T: AsyncWrite + Unpin + Send>(io: &mut T, frame: &[u8]) -> io::Result<()> {
    let mut head = Vec::with_capacity(10);
    varint(frame.len() as u64, &mut head);
    io.write_all(&head).await?;
    io.write_all(frame).await?;
    io.flush().await
}

impl libp2p::request_response::Codec for FrameCodec {
    type Protocol = StreamProtocol;
    type Request = Frame;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &Self::Protocol, io: &mut T) -> io::Result<Frame>
    where
        T: AsyncRead + Unpin + Send,
    {
        let read = read_frame(io, self.max_request_bytes, &self.budget, self.peer).await;
        if let (Err(e), Some(peer)) = (&read, self.peer) {
            let failure = classify_read(e);
            if matches!(failure, ReadFailure::Malformed | ReadFailure::OverShare) {
                self.budget.report(peer, failure);
            }
        }
        read
    }

    async fn read_response<T>(&mut self, _: &Self::Protocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        let mut res = Vec::new();
        io.take(MAX_RESPONSE_BYTES + 1).read_to_end(&mut res).await?;
        if res.len() as u64 > MAX_RESPONSE_BYTES {
            return Err(io::Error::new(ErrorKind::InvalidData, "an acknowledgement longer than the limit"));
        }
        if res.is_empty() {
            // Every request is acknowledged; an empty answer means the peer dropped the stream.
            return Err(io::Error::new(ErrorKind::UnexpectedEof, "the peer closed the stream without an answer"));
        }
        Ok(res)
    }

    async fn write_request<T>(&mut self, _: &Self::Protocol, io: &mut T, req: Frame) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        if req.len() as u64 > self.max_request_bytes {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!("refusing to send a {} byte frame (limit {})", req.len(), self.max_request_bytes),
            ));
        }
        write_frame(io, &req).await
    }

    async fn write_response<T>(&mut self, _: &Self::Protocol, io: &mut T, res: Vec<u8>) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        io.write_all(&res).await?;
        io.flush().await
    }
}

/// What an inbound read failure says about the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFailure {
    /// The stream ended early: a closing connection, or a sender that gave up. Nobody's fault.
    Cut,
    /// Oversized or badly framed: the sender's fault.
    Malformed,
    /// The process-wide budget was spent.
    Busy,
    /// The sender's own share of the budget was spent: its fault.
    OverShare,
    /// Anything else (timeouts, resets).
    Other,
}

/// Classify the I/O error of an inbound request.
pub fn classify_read(e: &io::Error) -> ReadFailure {
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => ReadFailure::Cut,
        ErrorKind::InvalidData => ReadFailure::Malformed,
        ErrorKind::OutOfMemory if e.get_ref().is_some_and(|inner| inner.is::<ShareSpent>()) => ReadFailure::OverShare,
        ErrorKind::OutOfMemory => ReadFailure::Busy,
        _ => ReadFailure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::Cursor;

    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        varint(payload.len() as u64, &mut v);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn frames_cuts_and_oversized_frames_are_told_apart() {
        futures::executor::block_on(async {
            let budget = InboundBudget::new(1000);
            let ok = read_frame(&mut Cursor::new(framed(b"hello")), 100, &budget, None).await.unwrap();
            assert_eq!(&ok[..], b"hello");
            assert_eq!(budget.in_flight(), 5, "held while the node handles it");
            drop(ok);
            assert_eq!(budget.in_flight(), 0);
            // The phantom malformed frame: a stream cut before or inside its frame.
            for cut in [vec![], framed(&[7; 50])[..20].to_vec()] {
                let e = read_frame(&mut Cursor::new(cut), 100, &budget, None).await.unwrap_err();
                assert_eq!(classify_read(&e), ReadFailure::Cut, "{e}");
            }
            assert_eq!(budget.cut(), 2);
            let e = read_frame(&mut Cursor::new(framed(&[1; 101])), 100, &budget, None).await.unwrap_err();
            assert_eq!(classify_read(&e), ReadFailure::Malformed);
            let mut trailing = framed(b"x");
            trailing.push(9);
            assert_eq!(
                classify_read(&read_frame(&mut Cursor::new(trailing), 100, &budget, None).await.unwrap_err()),
                ReadFailure::Malformed
            );
            // The budget: two frames of 600 bytes do not fit in 1,000 at once.
            let a = read_frame(&mut Cursor::new(framed(&[1; 600])), 1000, &budget, None).await.unwrap();
            let e = read_frame(&mut Cursor::new(framed(&[2; 600])), 1000, &budget, None).await.unwrap_err();
            assert_eq!(classify_read(&e), ReadFailure::Busy);
            assert_eq!((budget.peak(), budget.refused()), (600, 1));
            drop(a);
            assert!(read_frame(&mut Cursor::new(framed(&[2; 600])), 1000, &budget, None).await.is_ok());
            assert_eq!(budget.in_flight(), 0);
        });
    }

    /// A peer holds at most its share, whatever it sends over; another peer still reads, and
    /// the share comes back as its frames are handled.
    #[test]
    fn a_peer_holds_at_most_its_share() {
        futures::executor::block_on(async {
            let budget = InboundBudget::with_share(1000, 400);
            let (a, b) = (PeerId::random(), PeerId::random());
            let first = read_frame(&mut Cursor::new(framed(&[1; 300])), 1000, &budget, Some(a)).await.unwrap();
            let e = read_frame(&mut Cursor::new(framed(&[1; 200])), 1000, &budget, Some(a)).await.unwrap_err();
            assert_eq!(classify_read(&e), ReadFailure::OverShare, "{e}");
            assert_eq!((budget.held_by(&a), budget.over_share(), budget.refused()), (300, 1, 0));
            let other = read_frame(&mut Cursor::new(framed(&[2; 400])), 1000, &budget, Some(b)).await.unwrap();
            // The process cap is nobody's fault: 300 + 400 + 400 > 1,000.
            let c = PeerId::random();
            let e = read_frame(&mut Cursor::new(framed(&[3; 400])), 1000, &budget, Some(c)).await.unwrap_err();
            assert_eq!(classify_read(&e), ReadFailure::Busy, "{e}");
            assert_eq!(budget.held_by(&c), 0, "a refused frame holds nothing");
            drop(first);
            assert_eq!((budget.held_by(&a), budget.peers_holding()), (0, 1), "an empty share leaves the map");
            assert!(read_frame(&mut Cursor::new(framed(&[1; 400])), 1000, &budget, Some(a)).await.is_ok());
            drop(other);
            assert_eq!((budget.in_flight(), budget.peers_holding()), (0, 0));
        });
    }

    /// The behaviour's codec names no peer; its clone made while a connection is set up
    /// names that connection's peer, and so do that clone's own clones (its streams), even
    /// while the next connection is set up.
    #[test]
    fn a_connections_codec_names_its_peer() {
        let budget = InboundBudget::with_share(1000, 400);
        let proto = FrameCodec::with_budget(100, budget.clone());
        let (a, b) = (PeerId::random(), PeerId::random());
        let conn_a = {
            let _g = budget.connecting(a);
            proto.clone()
        };
        assert_eq!((proto.peer(), conn_a.peer()), (None, Some(a)));
        let _g = budget.connecting(b);
        let conn_b = proto.clone();
        let stream_a = conn_a.clone();
        assert_eq!((conn_b.peer(), stream_a.peer()), (Some(b), Some(a)));
        drop(_g);
        assert_eq!(proto.clone().peer(), None, "outside a connection's set-up nobody is charged");
    }

    #[test]
    fn varints_round_trip() {
        futures::executor::block_on(async {
            for n in [0u64, 1, 127, 128, 300, 1 << 20, u64::MAX] {
                let mut v = Vec::new();
                varint(n, &mut v);
                assert_eq!(read_varint(&mut Cursor::new(v)).await.unwrap(), Some(n));
            }
            let long = vec![0x80u8; 11];
            assert!(read_varint(&mut Cursor::new(long)).await.is_err());
        });
    }
}
