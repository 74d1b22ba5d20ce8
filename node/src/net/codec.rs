//! A request-response codec that moves one raw, size-limited frame each way.
//!
//! Both Peerage request-response protocols (`/peerage/election/1.0.0` for election messages,
//! `/peerage/members/1.0.0` for membership sync) use it. The codec does *not* decode the
//! frame: it only enforces the size limit, so that a malformed frame reaches the node, which
//! logs the decode error (`overlay::wire::decode` never panics) and keeps serving. A frame
//! larger than the limit is refused while reading (at most `limit + 1` bytes are read) and the
//! request fails with an I/O error that the node logs.
//!
//! Framing: the writer writes the frame and closes its write side (request-response does the
//! close), the reader reads to end of stream. Responses are short acknowledgements.
//!
//! Assumption: one request per stream (request-response's model).

use futures::prelude::*;
use libp2p::StreamProtocol;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The largest response accepted: responses are acknowledgements.
pub const MAX_RESPONSE_BYTES: u64 = 1024;

/// Acknowledgement codes sent back for every request.
pub const ACK_OK: u8 = 0;
/// The request's frame was refused (malformed, wrong version, wrong scope).
pub const ACK_REJECTED: u8 = 1;

/// Raw-frame codec with a request size limit chosen per protocol.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_request_bytes: u64,
    /// Requests that could not be read (oversized or cut off). libp2p does not report these
    /// to the behaviour (the request has no id yet), so the codec logs and counts them.
    unreadable: Arc<AtomicU64>,
}

impl FrameCodec {
    pub fn new(max_request_bytes: usize) -> Self {
        Self::with_counter(max_request_bytes, Arc::new(AtomicU64::new(0)))
    }
    pub fn with_counter(max_request_bytes: usize, unreadable: Arc<AtomicU64>) -> Self {
        FrameCodec { max_request_bytes: max_request_bytes as u64, unreadable }
    }
}

async fn read_limited<T: AsyncRead + Unpin + Send>(io: &mut T, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    io.take(limit + 1).read_to_end(&mut buf).await?;
    if buf.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("frame exceeds the limit of {limit} bytes")));
    }
    Ok(buf)
}

impl libp2p::request_response::Codec for FrameCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, protocol: &Self::Protocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        match read_limited(io, self.max_request_bytes).await {
            Ok(frame) => Ok(frame),
            Err(e) => {
                self.unreadable.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(protocol = protocol.as_ref(), "refused an inbound request: {e}");
                Err(e)
            }
        }
    }

    async fn read_response<T>(&mut self, _: &Self::Protocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        let res = read_limited(io, MAX_RESPONSE_BYTES).await?;
        if res.is_empty() {
            // Every request is acknowledged; an empty answer means the peer dropped the stream.
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the stream without an answer"));
        }
        Ok(res)
    }

    async fn write_request<T>(&mut self, _: &Self::Protocol, io: &mut T, req: Vec<u8>) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        if req.len() as u64 > self.max_request_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("refusing to send a {} byte frame (limit {})", req.len(), self.max_request_bytes),
            ));
        }
        io.write_all(&req).await?;
        io.flush().await
    }

    async fn write_response<T>(&mut self, _: &Self::Protocol, io: &mut T, res: Vec<u8>) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        io.write_all(&res).await?;
        io.flush().await
    }
}
