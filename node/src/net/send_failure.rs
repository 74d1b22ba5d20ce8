//! How a failed libp2p request is classified into the protocol core's kinds of failed send
//! ([`overlay::detect::SendFailure`]; what each kind means and what the node does next is the
//! core's rule, `overlay::detect::failure`). This file is the wiring: which libp2p errors make
//! which kind.
//!
//! - A failed dial: the core's rule `overlay::detect::dial_failure`, from whether another
//!   connection to the peer is open and who refused the dial as the connection gate saw it
//!   (`node/src/net/gate.rs` tells the gate's rules which dial errors are which, with the two
//!   readers below).
//! - A dial the peer accepted and closed before the security handshake (multistream-select ends
//!   in EOF: "Protocol negotiation failed", [`closed_before_handshake`]): its gate or
//!   `connection_limits` refused us. A dead peer gives another error: no listener (memory
//!   transport), connection refused or a timeout (TCP).
//! - A dial that found nothing listening at every address ([`no_listener`]: `ECONNREFUSED`, or
//!   the memory transport's missing port).
//! - A peer that does not speak the protocol: [`SendFailure::Unreachable`].
//! - A timeout, or a stream or connection closed before the answer: [`SendFailure::Ambiguous`].

use libp2p::core::transport::TransportError;
use libp2p::core::upgrade::NegotiationError;
use libp2p::request_response::OutboundFailure;
pub use overlay::connections::DialRefusal;
pub use overlay::detect::SendFailure;
use std::error::Error;

/// Classifies `error` for a request to a peer; `connected` says whether a connection to it is
/// open now, `refusal` who refused the failed dial, if anyone (see the module doc).
pub fn classify(error: &OutboundFailure, connected: bool, refusal: DialRefusal) -> SendFailure {
    match error {
        OutboundFailure::DialFailure => overlay::detect::dial_failure(connected, refusal),
        OutboundFailure::UnsupportedProtocols => SendFailure::Unreachable,
        _ => SendFailure::Ambiguous,
    }
}

/// Whether a transport error of a dial says that the remote end accepted the connection and
/// closed it before the security protocol was agreed: the chain of causes holds a
/// multistream-select [`NegotiationError`] (EOF in the negotiation comes out as
/// `NegotiationError::Failed`). A peer without a listener, a refused or timed-out TCP
/// connection, or a bad address give other errors.
pub fn closed_before_handshake(error: &TransportError<std::io::Error>) -> bool {
    any_cause(error, |e| e.downcast_ref::<NegotiationError>().is_some())
}

/// Whether a transport error of a dial says that nothing listened at the address: the chain
/// of causes holds a refused TCP connection (an I/O error of kind `ConnectionRefused`,
/// `ECONNREFUSED`) or the memory transport's "no listener on the given port". A timeout, a
/// reset, a failed handshake or a refusal by the listener ([`closed_before_handshake`]) are
/// other errors.
///
/// libp2p joins transports with `either::Either`, whose `Error::source` forwards to the
/// inner error's source and so skips the inner error itself (a refused TCP dial arrives as
/// `Other(Left(Left(Os { code: 111, .. })))`, and walking the sources never meets the
/// `Os` error). `Either` forwards `Display` unchanged, though, so a level whose text is
/// exactly that of one of the two leaf errors counts as well.
pub fn no_listener(error: &TransportError<std::io::Error>) -> bool {
    use libp2p::core::transport::memory::MemoryTransportError;
    use std::io::ErrorKind;
    if let TransportError::Other(io) = error {
        if io.kind() == ErrorKind::ConnectionRefused {
            return true;
        }
    }
    let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED).to_string();
    let unlistened = MemoryTransportError::Unreachable.to_string();
    any_cause(error, |e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == ErrorKind::ConnectionRefused)
            || matches!(e.downcast_ref::<MemoryTransportError>(), Some(MemoryTransportError::Unreachable))
            || {
                let text = e.to_string();
                text == refused || text == unlistened
            }
    })
}

/// Whether `pred` holds for an error in the chain of causes inside a dial's transport error
/// (at most 16 deep).
fn any_cause(error: &TransportError<std::io::Error>, pred: impl Fn(&(dyn Error + 'static)) -> bool) -> bool {
    let TransportError::Other(io) = error else { return false };
    // `io::Error::source` skips the error it wraps; start from that error itself.
    let mut cur: Option<&(dyn Error + 'static)> = match io.get_ref() {
        Some(inner) => Some(inner),
        None => return false,
    };
    let mut depth = 0;
    while let Some(e) = cur {
        if pred(e) {
            return true;
        }
        depth += 1;
        if depth > 16 {
            return false;
        }
        cur = match e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner),
            None => e.source(),
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_dial_without_a_connection_is_unreachable() {
        use DialRefusal as R;
        use OutboundFailure::*;
        assert_eq!(classify(&DialFailure, false, R::None), SendFailure::Unreachable);
        assert_eq!(classify(&DialFailure, false, R::Local), SendFailure::RefusedLocally);
        assert_eq!(classify(&DialFailure, false, R::ByPeer), SendFailure::RefusedByPeer);
        assert_eq!(classify(&DialFailure, false, R::NoListener), SendFailure::NoListener);
        // Another connection is open: the peer is there.
        assert_eq!(classify(&DialFailure, true, R::None), SendFailure::Ambiguous);
        assert_eq!(classify(&DialFailure, true, R::ByPeer), SendFailure::Ambiguous);
        assert_eq!(classify(&DialFailure, true, R::NoListener), SendFailure::Ambiguous);
        assert_eq!(classify(&UnsupportedProtocols, true, R::None), SendFailure::Unreachable);
        for e in [Timeout, ConnectionClosed] {
            for r in [R::None, R::Local, R::ByPeer, R::NoListener] {
                assert_eq!(classify(&e, false, r), SendFailure::Ambiguous, "{e:?} {r:?}");
                assert_eq!(classify(&e, true, r), SendFailure::Ambiguous, "{e:?} {r:?}");
            }
        }
        let io = Io(std::io::Error::other("stream closed without an answer"));
        assert_eq!(classify(&io, true, R::None), SendFailure::Ambiguous);
        assert!(SendFailure::NoListener.unreachable() && SendFailure::Unreachable.unreachable());
        for c in [SendFailure::RefusedLocally, SendFailure::RefusedByPeer, SendFailure::Ambiguous] {
            assert!(!c.unreachable(), "{c:?}");
        }
    }

    /// Stands in for libp2p's upgrade error (crate-private there): displays "Multistream
    /// select failed" and has the negotiation error as its source.
    #[derive(Debug)]
    struct Select(NegotiationError);
    impl std::fmt::Display for Select {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Multistream select failed")
        }
    }
    impl Error for Select {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    /// The error a dial gets when the listener closes the new connection before the handshake
    /// (the upgrade's `Select` error inside an `io::Error`, maybe twice, as libp2p builds it),
    /// against a missing listener, a refused TCP connection and a bad address.
    #[test]
    fn a_connection_closed_before_the_handshake_is_told_from_a_missing_peer() {
        use libp2p::core::transport::memory::MemoryTransportError;
        use std::io;
        let once = TransportError::Other(io::Error::other(Select(NegotiationError::Failed)));
        assert!(closed_before_handshake(&once));
        let twice = TransportError::Other(io::Error::other(io::Error::other(Select(NegotiationError::Failed))));
        assert!(closed_before_handshake(&twice));
        let missing = TransportError::Other(io::Error::other(MemoryTransportError::Unreachable));
        assert!(!closed_before_handshake(&missing));
        let refused = TransportError::Other(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(!closed_before_handshake(&refused));
        let noise = TransportError::Other(io::Error::other(io::Error::other("noise handshake failed")));
        assert!(!closed_before_handshake(&noise), "a failed handshake is not a refusal");
        let addr: libp2p::Multiaddr = "/memory/1".parse().expect("a valid address literal");
        assert!(!closed_before_handshake(&TransportError::MultiaddrNotSupported(addr)));
    }

    /// A refused TCP connection and a memory port without a listener, however
    /// deeply wrapped, say that nothing listens; a timeout, a reset, a refusal by the
    /// listener, a failed handshake or a bad address do not.
    #[test]
    fn nothing_listening_is_told_from_other_dial_errors() {
        use libp2p::core::transport::memory::MemoryTransportError;
        use std::io::{self, ErrorKind};
        let gone = [
            TransportError::Other(io::Error::from(ErrorKind::ConnectionRefused)),
            TransportError::Other(io::Error::other(io::Error::from(ErrorKind::ConnectionRefused))),
            TransportError::Other(io::Error::other(MemoryTransportError::Unreachable)),
            TransportError::Other(io::Error::other(io::Error::other(MemoryTransportError::Unreachable))),
        ];
        for e in &gone {
            assert!(no_listener(e), "{e:?}");
            assert!(!closed_before_handshake(e), "{e:?}");
        }
        let other = [
            TransportError::Other(io::Error::from(ErrorKind::TimedOut)),
            TransportError::Other(io::Error::other(io::Error::from(ErrorKind::ConnectionReset))),
            TransportError::Other(io::Error::other(MemoryTransportError::AlreadyInUse)),
            TransportError::Other(io::Error::other(Select(NegotiationError::Failed))),
            TransportError::Other(io::Error::other("noise handshake failed")),
            TransportError::MultiaddrNotSupported("/memory/1".parse().expect("a valid address literal")),
        ];
        for e in &other {
            assert!(!no_listener(e), "{e:?}");
        }
        // Behind a wrapper that skips its inner error in `source` but shows its text (as
        // `either::Either` does): an OS error "connection refused" still counts, another not.
        let hidden = |inner: io::Error| TransportError::Other(io::Error::other(Hiding(inner)));
        assert!(no_listener(&hidden(io::Error::from_raw_os_error(libc::ECONNREFUSED))));
        assert!(!no_listener(&hidden(io::Error::from_raw_os_error(libc::ETIMEDOUT))));
        assert!(!no_listener(&hidden(io::Error::from_raw_os_error(libc::ECONNRESET))));
    }

    /// Shows its inner error's text and skips it in `source`, as `either::Either` does.
    #[derive(Debug)]
    struct Hiding(std::io::Error);
    impl std::fmt::Display for Hiding {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    impl Error for Hiding {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.0.source()
        }
    }
}
