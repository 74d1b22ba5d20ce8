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
//!   and refuse it when the budget is spent ([`ErrorKind::OutOfMemory`]);
//! - tell a stream that a closing connection cut (or a sender that gave up before writing)
//!   from a malformed frame: the end of the stream before the announced length is
//!   [`ErrorKind::UnexpectedEof`], and counts as nobody's fault.
//!
//! Per connection the memory in flight is bounded by the protocols' concurrent-stream limits
//! times their frame limits (`node/src/net/behaviour.rs`); for the process by the budget.
//! Responses are short acknowledgements, read raw up to [`MAX_RESPONSE_BYTES`].

use futures::prelude::*;
use libp2p::StreamProtocol;
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The largest response accepted: responses are acknowledgements.
pub const MAX_RESPONSE_BYTES: u64 = 1024;

/// The request's frame was accepted: it decoded and its claims passed.
pub const ACK_OK: u8 = 0;
/// The request's frame was refused (malformed, wrong version, a claim the directory
/// contradicts, or a message the state machine rejected).
pub const ACK_REJECTED: u8 = 1;

/// Bytes of inbound frames being read or held, for the whole process, with a cap.
#[derive(Debug)]
pub struct InboundBudget {
    cap: u64,
    in_flight: AtomicU64,
    peak: AtomicU64,
    refused: AtomicU64,
    cut: AtomicU64,
    oversized: AtomicU64,
}

impl InboundBudget {
    pub fn new(cap: u64) -> Arc<InboundBudget> {
        Arc::new(InboundBudget {
            cap,
            in_flight: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            cut: AtomicU64::new(0),
            oversized: AtomicU64::new(0),
        })
    }

    /// Reserve `n` bytes, or `None` when that would pass the cap.
    pub fn reserve(self: &Arc<Self>, n: u64) -> Option<Reservation> {
        let mut cur = self.in_flight.load(Ordering::Relaxed);
        loop {
            let next = cur.checked_add(n)?;
            if next > self.cap {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match self.in_flight.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return Some(Reservation { budget: self.clone(), n });
                }
                Err(now) => cur = now,
            }
        }
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
    n: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
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

/// Length-prefixed frame codec with a request size limit chosen per protocol.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_request_bytes: u64,
    budget: Arc<InboundBudget>,
}

impl FrameCodec {
    /// A codec with a budget of its own (clients and tests).
    pub fn new(max_request_bytes: usize) -> Self {
        Self::with_budget(max_request_bytes, InboundBudget::new(u64::MAX / 2))
    }
    pub fn with_budget(max_request_bytes: usize, budget: Arc<InboundBudget>) -> Self {
        FrameCodec { max_request_bytes: max_request_bytes as u64, budget }
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

fn varint(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(unsigned_varint::encode::u64(n, &mut unsigned_varint::encode::u64_buffer()));
}

/// Read one frame of at most `limit` bytes under `budget`.
pub async fn read_frame<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    limit: u64,
    budget: &Arc<InboundBudget>,
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
    let Some(held) = budget.reserve(len) else {
        return Err(io::Error::new(
            ErrorKind::OutOfMemory,
            format!("inbound budget spent ({} bytes in flight)", budget.in_flight()),
        ));
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
        read_frame(io, self.max_request_bytes, &self.budget).await
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
    /// Anything else (timeouts, resets).
    Other,
}

/// Classify the I/O error of an inbound request.
pub fn classify_read(e: &io::Error) -> ReadFailure {
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => ReadFailure::Cut,
        ErrorKind::InvalidData => ReadFailure::Malformed,
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
            let ok = read_frame(&mut Cursor::new(framed(b"hello")), 100, &budget).await.unwrap();
            assert_eq!(&ok[..], b"hello");
            assert_eq!(budget.in_flight(), 5, "held while the node handles it");
            drop(ok);
            assert_eq!(budget.in_flight(), 0);
            // The phantom malformed frame: a stream cut before or inside its frame.
            for cut in [vec![], framed(&[7; 50])[..20].to_vec()] {
                let e = read_frame(&mut Cursor::new(cut), 100, &budget).await.unwrap_err();
                assert_eq!(classify_read(&e), ReadFailure::Cut, "{e}");
            }
            assert_eq!(budget.cut(), 2);
            let e = read_frame(&mut Cursor::new(framed(&[1; 101])), 100, &budget).await.unwrap_err();
            assert_eq!(classify_read(&e), ReadFailure::Malformed);
            let mut trailing = framed(b"x");
            trailing.push(9);
            assert_eq!(
                classify_read(&read_frame(&mut Cursor::new(trailing), 100, &budget).await.unwrap_err()),
                ReadFailure::Malformed
            );
            // The budget: two frames of 600 bytes do not fit in 1,000 at once.
            let a = read_frame(&mut Cursor::new(framed(&[1; 600])), 1000, &budget).await.unwrap();
            let e = read_frame(&mut Cursor::new(framed(&[2; 600])), 1000, &budget).await.unwrap_err();
            assert_eq!(classify_read(&e), ReadFailure::Busy);
            assert_eq!((budget.peak(), budget.refused()), (600, 1));
            drop(a);
            assert!(read_frame(&mut Cursor::new(framed(&[2; 600])), 1000, &budget).await.is_ok());
            assert_eq!(budget.in_flight(), 0);
        });
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
