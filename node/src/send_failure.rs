//! What a failed request says about its peer: one classifier for every driver that turns a
//! libp2p `request_response` failure into a protocol input.
//!
//! The protocol core assumes crash-stop (`overlay::driver`): a `SendFailed` means "not
//! delivered, and the peer is down". A real network does not give that for free
//! (*ours*, issue 4, session 6: a 100-node tokens swarm on a loaded machine reported request
//! timeouts as failed sends; `Handover`s that had arrived counted as failed, both ends held the
//! token, and 2 tokens ended up at up to 42 holders). So:
//! - [`SendFailure::Unreachable`]: the dial failed with no connection to the peer, or the peer
//!   does not speak the protocol. Nothing was delivered and the peer cannot be reached now (a
//!   crashed node, or a live one refusing us; the caller decides whether that is "down").
//! - [`SendFailure::RefusedLocally`]: our own connection gate refused the dial at its hard
//!   cap (`Gate::refused_locally`). Nothing was sent, and nothing is known about the peer.
//! - [`SendFailure::Ambiguous`]: a timeout, or the connection or stream closed before the
//!   answer. The request may well have been delivered and acted on; the peer may be alive and
//!   slow. Callers must not take it for a crash, nor for a message that surely got lost.

use libp2p::request_response::OutboundFailure;

/// See the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendFailure {
    Unreachable,
    RefusedLocally,
    Ambiguous,
}

/// Classifies `error` for a request to a peer; `connected` says whether a connection to it is
/// open now, `refused_locally` whether our gate refused a dial to it (see the module doc).
pub fn classify(error: &OutboundFailure, connected: bool, refused_locally: bool) -> SendFailure {
    match error {
        OutboundFailure::DialFailure if refused_locally => SendFailure::RefusedLocally,
        OutboundFailure::DialFailure if !connected => SendFailure::Unreachable,
        OutboundFailure::UnsupportedProtocols => SendFailure::Unreachable,
        _ => SendFailure::Ambiguous,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_dial_without_a_connection_is_unreachable() {
        use OutboundFailure::*;
        assert_eq!(classify(&DialFailure, false, false), SendFailure::Unreachable);
        assert_eq!(classify(&DialFailure, false, true), SendFailure::RefusedLocally);
        // Another connection is open: the peer is there.
        assert_eq!(classify(&DialFailure, true, false), SendFailure::Ambiguous);
        assert_eq!(classify(&UnsupportedProtocols, true, false), SendFailure::Unreachable);
        for e in [Timeout, ConnectionClosed] {
            assert_eq!(classify(&e, false, false), SendFailure::Ambiguous, "{e:?}");
            assert_eq!(classify(&e, true, false), SendFailure::Ambiguous, "{e:?}");
        }
        let io = Io(std::io::Error::other("stream closed without an answer"));
        assert_eq!(classify(&io, true, false), SendFailure::Ambiguous);
    }
}
