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
}

impl FrameCodec {
    pub fn new(max_request_bytes: usize) -> Self {
        FrameCodec { max_request_bytes: max_request_bytes as u64 }
    }
}

async fn read_limited<T: AsyncRead + Unpin + Send>(io: &mut T, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    io.take(limit + 1).read_to_end(&mut buf).await?;
    if buf.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame exceeds the limit of {limit} bytes"),
        ));
    }
    Ok(buf)
}


impl libp2p::request_response::Codec for FrameCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &Self::Protocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_limited(io, self.max_request_bytes).await
    }

    async fn read_response<T>(&mut self, _: &Self::Protocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_limited(io, MAX_RESPONSE_BYTES).await
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
