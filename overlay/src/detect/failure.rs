//! What a failed send says about its peer, and what the node does next.
//!
//! The transport classifies each failed request into a [`SendFailure`] (the libp2p error to
//! kind mapping is the node's wiring, `node/src/net/send_failure.rs`). The kinds:
//! - [`SendFailure::Unreachable`]: the dial failed with no connection to the peer, or the peer
//!   does not speak the protocol. Nothing was delivered and the peer cannot be reached now.
//! - [`SendFailure::NoListener`]: nothing listens at any of the peer's addresses (TCP refused
//!   the connection; the memory transport has no listener on the port). A live node keeps its
//!   listener, and a loaded one delays or drops connections rather than refuse them, so this is
//!   the strongest sign of a crash a dialler gets.
//! - [`SendFailure::RefusedLocally`]: our own connection gate refused the dial. Nothing was
//!   sent, and nothing is known about the peer.
//! - [`SendFailure::RefusedByPeer`]: the peer accepted the connection and closed it before the
//!   security handshake (its gate was full). Nothing was delivered, but the peer is alive.
//! - [`SendFailure::Ambiguous`]: a timeout, or the stream closed before the answer. The message
//!   may have been delivered and acted on; the peer may be alive and slow.
//!
//! The protocol core's `SendFailed` means crash-stop's "not delivered, peer down", so only an
//! unreachable peer becomes one. The rest ([`after_failure`]), for a super-peer message:
//! - a message to the node's own head is never given up on one failure: its head watch probes
//!   the head ([`super::head_watch`]) and decides;
//! - a refused message of a re-election that still runs is sent again, up to [`MAX_RESENDS`]
//!   times with growing waits (0.2 + 0.4 + 0.6 + 0.8 s = 2 s, about the cluster election's
//!   answer timeout): the peer is alive, and the election's answer timeout would take its
//!   silence for a crash (Garcia-Molina's bound T = 2 T_trans + T_proc assumes a message is
//!   carried in bounded time);
//! - the first attempt of a refused token `Handover` is reported as refused by its target
//!   (`SpInput::Refused`): it surely did not arrive, and the holder passes the target over;
//! - an ambiguous failure is sent once more (every super-peer message is safe to receive
//!   twice); if that fails ambiguously too, the node asks the peer whether it is there
//!   ([`Next::Check`]), and only an unreachable answer reports it down ([`after_check`]);
//! - anything else is dropped: the protocols' own timers ask again.
//!
//! The elections' answer timers also wait while a message of their election is still on its
//! way ([`holds_timer`]): a message to a member not yet connected first waits for a dial and
//! two handshakes, which on a loaded machine took longer than the answer timeout itself.
//!
//! For the leader election ([`after_election_failure`]), a failed send is fed to the algorithm
//! (the ring algorithms skip a dead successor), and the peer is reported down only when
//! unreachable ([`SendFailure::unreachable`]); an ambiguous failure of a peer that was not
//! silent is first sent again for up to 2 s, when the algorithm takes copies.

use crate::connections::DialRefusal;
use crate::driver::Timer;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a send failed (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SendFailure {
    Unreachable,
    NoListener,
    RefusedLocally,
    RefusedByPeer,
    Ambiguous,
}

impl SendFailure {
    pub const ALL: [SendFailure; 5] = [
        SendFailure::Unreachable,
        SendFailure::NoListener,
        SendFailure::RefusedLocally,
        SendFailure::RefusedByPeer,
        SendFailure::Ambiguous,
    ];

    /// Nothing was delivered and the peer cannot be reached now: the crash-stop report.
    pub fn unreachable(self) -> bool {
        matches!(self, SendFailure::Unreachable | SendFailure::NoListener)
    }

    /// The connection was refused before anything was sent (by us or by the live peer).
    pub fn refused(self) -> bool {
        matches!(self, SendFailure::RefusedByPeer | SendFailure::RefusedLocally)
    }
}

/// What a failed dial says: `connected` whether another connection to the peer is open now
/// (then the peer is there, and whether the message got through is unknown), `refusal` who
/// refused the dial, as the connection gate saw it
/// ([`crate::connections::Admission::dial_refusal`]).
pub fn dial_failure(connected: bool, refusal: DialRefusal) -> SendFailure {
    match refusal {
        DialRefusal::Local => SendFailure::RefusedLocally,
        _ if connected => SendFailure::Ambiguous,
        DialRefusal::ByPeer => SendFailure::RefusedByPeer,
        DialRefusal::NoListener => SendFailure::NoListener,
        DialRefusal::None => SendFailure::Unreachable,
    }
}

/// How often a message was sent before: `retried` once more after an ambiguous failure,
/// `refusals` times refused and sent again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempt {
    pub retried: bool,
    pub refusals: u8,
}

impl Attempt {
    /// The first send of a message.
    pub const FIRST: Attempt = Attempt { retried: false, refusals: 0 };

    pub fn is_first(self) -> bool {
        !self.retried && self.refusals == 0
    }
}

/// What the node does about a failed super-peer message (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The message was to our head: let the head watch probe it.
    ProbeHead,
    /// The peer is down: tell the state machine `SendFailed`.
    Report,
    /// It was never sent: tell the state machine `Refused` (a first `Handover` attempt).
    Refused,
    /// Send it again after this wait, as attempt `Attempt { refusals: + 1, .. }`.
    ResendAfter(Duration),
    /// Send it once more now, as a retried attempt.
    SendAgain,
    /// Ask the peer whether it is there; [`after_check`] decides on the answer.
    Check,
    /// Forget it: the protocols' own timers ask again.
    Drop,
}

/// Times a refused election message is sent again, [`RESEND_STEP`] x its refusals after the
/// refusal (module doc).
pub const MAX_RESENDS: u8 = 4;
pub const RESEND_STEP: Duration = Duration::from_millis(200);

/// What the message that failed was, as far as the rule needs to know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// It went to the head this node is attached to.
    pub to_head: bool,
    /// It belongs to the cluster re-election this node takes part in now.
    pub election_runs: bool,
    /// It is a token `Handover`.
    pub handover: bool,
}

/// The rule for a super-peer message that failed as `kind` on attempt `attempt`.
pub fn after_failure(kind: SendFailure, attempt: Attempt, sent: Sent) -> Next {
    if sent.to_head {
        return Next::ProbeHead;
    }
    match kind {
        SendFailure::Unreachable | SendFailure::NoListener => Next::Report,
        SendFailure::RefusedLocally | SendFailure::RefusedByPeer => {
            if sent.election_runs && attempt.refusals < MAX_RESENDS {
                Next::ResendAfter(RESEND_STEP * (u32::from(attempt.refusals) + 1))
            } else if !attempt.retried && sent.handover {
                // Not our own retry of a send that may have arrived: surely never delivered.
                Next::Refused
            } else {
                Next::Drop
            }
        }
        SendFailure::Ambiguous if !attempt.retried => Next::SendAgain,
        SendFailure::Ambiguous => Next::Check,
    }
}

/// The rule for the check after an ambiguous message ([`Next::Check`]) that failed as `kind`
/// while our own loop was `stalled` beyond the head watch's limit: report the peer down
/// (`true`) only when it is unreachable, and not on a failed dial while we stalled (a stall
/// excuses a timeout, not a missing listener, which involves none).
pub fn after_check(kind: SendFailure, stalled: bool) -> bool {
    match kind {
        SendFailure::Unreachable => !stalled,
        SendFailure::NoListener => true,
        _ => false,
    }
}

/// An election message still on its way holds its election's answer timer for this long at
/// most after it was sent, looked at again every [`DEFER_STEP`].
pub const MAX_DEFER: Duration = Duration::from_secs(4);
pub const DEFER_STEP: Duration = Duration::from_millis(50);

/// Whether `timer` waits for an answer (bully's T2 and T3, fast bully's T4, a ring's lap, an
/// algorithm's own) and so is held while a message of its election is on its way. The timers
/// of the coordinator's liveness (T1, the heartbeat) are not held.
pub fn waits_for_delivery(timer: Timer) -> bool {
    !matches!(timer, Timer::T1 | Timer::Heartbeat)
}

/// How long to hold `timer`, due now, given the age of the youngest message of the running
/// election that is neither delivered nor failed (`youngest`), and whether a refused one waits
/// to be sent again (`resend_waiting`): `Some(DEFER_STEP)` to look again then, `None` to fire
/// it.
pub fn holds_timer(timer: Timer, youngest: Option<Duration>, resend_waiting: bool) -> Option<Duration> {
    let in_flight = resend_waiting || youngest.is_some_and(|age| age < MAX_DEFER);
    (in_flight && waits_for_delivery(timer)).then_some(DEFER_STEP)
}

/// What the node does about a failed leader-election message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionNext {
    /// Send it again after this wait, as resend `ElectionSent::resends + 1`.
    SendAgainAfter(Duration),
    /// Feed `SendFailed` to the algorithm, and report the peer down when `report_down`.
    Feed { report_down: bool },
}

/// How a failed leader-election message failed, beyond its [`SendFailure`] kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ElectionSent {
    /// How often it was sent again before.
    pub resends: u8,
    /// The peer was silent: the request timed out, or the node closed the connection for a
    /// request left unanswered. A resend would only wait for it again.
    pub silent: bool,
    /// The algorithm takes a copy of a message that was delivered after all
    /// ([`crate::election::Assumptions::no_duplicates`] is false).
    pub copies_safe: bool,
}

/// The rule for a leader-election message that failed as `kind`.
///
/// An ambiguous failure of a peer that was not silent (the connection closed under the
/// request) is sent again on a fresh connection, when the algorithm takes copies, up to
/// [`MAX_RESENDS`] times after [`RESEND_STEP`] x its resends (2 s in all). This is what a healed
/// partition looks like for a few seconds: the first packet on a connection the peer dropped
/// during the cut resets it, and the peer denies new connections while its side of the old
/// ones still counts against its per-peer limit. Fed to the algorithm at once, such a failure
/// reads as "not delivered, peer down" and a ring skips the peer: a Villadangos `Message1` on
/// its way back to the highest candidate, or its `VillLeader`, skipped so, leaves processes
/// undecided until the stall timer (3 lap timeouts).
///
/// Anything else is fed to the algorithm (the ring algorithms skip a dead successor), and
/// the peer is reported down only when unreachable ([`SendFailure::unreachable`]).
pub fn after_election_failure(kind: SendFailure, sent: ElectionSent) -> ElectionNext {
    if kind == SendFailure::Ambiguous && sent.resends < MAX_RESENDS && !sent.silent && sent.copies_safe {
        ElectionNext::SendAgainAfter(RESEND_STEP * (u32::from(sent.resends) + 1))
    } else {
        ElectionNext::Feed { report_down: kind.unreachable() }
    }
}

/// The rule for a leader-election message that a live peer received and rejected: its
/// content did not fit the peer's view, typically in the first second of a start-up, when the
/// peer's directory or election group does not yet hold the sender or a process the message
/// names. It is sent again after [`RESEND_STEP`] x its resends, up to [`MAX_RESENDS`] times (2
/// s in all); then dropped. The peer lives, so nothing is fed to the algorithm, whose own
/// timers cover the loss. A rejected message was not taken, so a resend is no copy. Without
/// the resend a Chang-Roberts lap rejected so was lost until the 10 s lap timer: five real
/// processes named their leader in 12 s instead of 2.
pub fn after_election_rejected(resends: u8) -> Option<Duration> {
    (resends < MAX_RESENDS).then(|| RESEND_STEP * (u32::from(resends) + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_election_messages_are_sent_again_four_times_then_dropped() {
        let waits: Vec<Option<u64>> =
            (0..=MAX_RESENDS).map(|r| after_election_rejected(r).map(|d| d.as_millis() as u64)).collect();
        assert_eq!(waits, vec![Some(200), Some(400), Some(600), Some(800), None]);
    }

    const ELECTION: Sent = Sent { to_head: false, election_runs: true, handover: false };

    #[test]
    fn only_a_failed_dial_without_a_connection_or_refusal_is_unreachable() {
        use DialRefusal as R;
        assert_eq!(dial_failure(false, R::None), SendFailure::Unreachable);
        assert_eq!(dial_failure(false, R::Local), SendFailure::RefusedLocally);
        assert_eq!(
            dial_failure(true, R::Local),
            SendFailure::RefusedLocally,
            "our own refusal says nothing of the peer"
        );
        assert_eq!(dial_failure(false, R::ByPeer), SendFailure::RefusedByPeer);
        assert_eq!(dial_failure(false, R::NoListener), SendFailure::NoListener);
        for r in [R::None, R::ByPeer, R::NoListener] {
            assert_eq!(dial_failure(true, r), SendFailure::Ambiguous, "another connection is open: {r:?}");
        }
    }

    #[test]
    fn refused_election_messages_are_sent_again_four_times_with_growing_waits() {
        let mut waits = Vec::new();
        for refusals in 0..=MAX_RESENDS {
            let a = Attempt { retried: false, refusals };
            waits.push(match after_failure(SendFailure::RefusedByPeer, a, ELECTION) {
                Next::ResendAfter(d) => Some(d),
                _ => None,
            });
        }
        let ms = |m: u64| Some(Duration::from_millis(m));
        assert_eq!(waits, vec![ms(200), ms(400), ms(600), ms(800), None]);
        let total: Duration = waits.iter().flatten().sum();
        assert_eq!(total, Duration::from_secs(2), "about the cluster election's answer timeout");
        assert_eq!(
            after_failure(SendFailure::RefusedLocally, Attempt::FIRST, ELECTION),
            Next::ResendAfter(ms(200).unwrap())
        );
        for kind in [SendFailure::Unreachable, SendFailure::NoListener] {
            assert_eq!(after_failure(kind, Attempt::FIRST, ELECTION), Next::Report, "{kind:?}");
        }
        assert_eq!(after_failure(SendFailure::Ambiguous, Attempt::FIRST, ELECTION), Next::SendAgain);
    }

    #[test]
    fn a_refused_handover_is_reported_only_on_its_first_attempt() {
        let h = Sent { handover: true, ..Sent::default() };
        assert_eq!(after_failure(SendFailure::RefusedByPeer, Attempt::FIRST, h), Next::Refused);
        let again = Attempt { retried: true, refusals: 0 };
        assert_eq!(after_failure(SendFailure::RefusedByPeer, again, h), Next::Drop, "a copy may have arrived");
        assert_eq!(after_failure(SendFailure::RefusedByPeer, Attempt::FIRST, Sent::default()), Next::Drop);
        // Ambiguous: once more, then a check that reports only an unreachable peer.
        assert_eq!(after_failure(SendFailure::Ambiguous, Attempt::FIRST, h), Next::SendAgain);
        assert_eq!(after_failure(SendFailure::Ambiguous, again, h), Next::Check);
        assert!(after_check(SendFailure::Unreachable, false));
        assert!(!after_check(SendFailure::Unreachable, true), "a stall excuses a failed dial");
        assert!(after_check(SendFailure::NoListener, true), "but not a missing listener");
        for k in [SendFailure::Ambiguous, SendFailure::RefusedByPeer, SendFailure::RefusedLocally] {
            assert!(!after_check(k, false), "{k:?}");
        }
        // The head is never given up on one failure.
        let head = Sent { to_head: true, ..Sent::default() };
        for k in SendFailure::ALL {
            assert_eq!(after_failure(k, Attempt::FIRST, head), Next::ProbeHead);
        }
    }

    #[test]
    fn answer_timers_wait_for_delivery_liveness_timers_do_not() {
        for t in [Timer::T2, Timer::T3, Timer::T4, Timer::Lap, Timer::Custom(1)] {
            assert!(waits_for_delivery(t), "{t:?} waits for an answer");
            assert_eq!(holds_timer(t, Some(Duration::from_secs(1)), false), Some(DEFER_STEP));
            assert_eq!(holds_timer(t, None, true), Some(DEFER_STEP));
            assert_eq!(holds_timer(t, Some(MAX_DEFER), false), None, "not for longer than MAX_DEFER");
            assert_eq!(holds_timer(t, None, false), None);
        }
        for t in [Timer::T1, Timer::Heartbeat] {
            assert!(!waits_for_delivery(t), "{t:?} watches the coordinator or paces it");
            assert_eq!(holds_timer(t, Some(Duration::ZERO), true), None);
        }
        assert!(SendFailure::NoListener.unreachable() && SendFailure::Unreachable.unreachable());
        for c in [SendFailure::RefusedLocally, SendFailure::RefusedByPeer, SendFailure::Ambiguous] {
            assert!(!c.unreachable(), "{c:?}");
        }
    }

    #[test]
    fn an_election_message_is_sent_again_only_after_a_closed_connection_and_for_2_s_at_most() {
        let first = ElectionSent { resends: 0, silent: false, copies_safe: true };
        let fed = ElectionNext::Feed { report_down: false };
        let mut waits = Duration::ZERO;
        for resends in 0..=MAX_RESENDS {
            match after_election_failure(SendFailure::Ambiguous, ElectionSent { resends, ..first }) {
                ElectionNext::SendAgainAfter(w) => {
                    assert_eq!(w, RESEND_STEP * (u32::from(resends) + 1));
                    waits += w;
                }
                next => {
                    assert_eq!(next, fed);
                    assert_eq!(resends, MAX_RESENDS, "fed only after the last resend");
                }
            }
        }
        assert_eq!(waits, Duration::from_secs(2));
        let silent = ElectionSent { silent: true, ..first };
        assert_eq!(
            after_election_failure(SendFailure::Ambiguous, silent),
            fed,
            "a silent peer is not waited for twice"
        );
        let no_copies = ElectionSent { copies_safe: false, ..first };
        assert_eq!(after_election_failure(SendFailure::Ambiguous, no_copies), fed, "a copy would run a second lap");
        for k in [SendFailure::Unreachable, SendFailure::NoListener] {
            assert_eq!(after_election_failure(k, first), ElectionNext::Feed { report_down: true }, "{k:?}");
        }
        for k in [SendFailure::RefusedLocally, SendFailure::RefusedByPeer] {
            assert_eq!(after_election_failure(k, first), fed, "{k:?}: alive or unknown, never down");
        }
    }
}
