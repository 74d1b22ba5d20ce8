//! A member's failure detector for its head: when to probe the head, and when failed probes
//! are enough to report it down (the super-peer state machine then re-elects inside the
//! cluster) or to leave it (it is alive but no longer serves us).
//!
//! The super-peer protocol assumes crash-stop with a perfect detector. A member only sees
//! silence and failed requests, and on a loaded machine a live head is often slow, refuses a
//! dial for a moment or loses a stream; every false report starts a re-election next to a
//! live head. The rules (ours; the seeds leave failure detection open):
//! - **Probe on silence**: a member probes its head (a `Hello`) when it has heard nothing from
//!   it for `probe_after`, or at once when its connection to the head broke.
//! - **Probes are spaced**: after a failed probe the next waits `spacing` (one round), so a
//!   burst of failures within milliseconds counts as one moment of trouble.
//! - **Scored failures**: an unreachable head scores 2, an ambiguous failure (timeout, closed
//!   stream) 1, a dial our own gate refused 0.
//! - **Down only after silence**: the head is reported down once the score reaches
//!   `down_score` *and* nothing was heard from it for `min_silence`.
//! - **Nothing listening is down**: `gone_after` probes in a row that found no listener at the
//!   head's addresses report it down without waiting for `min_silence` (a live node keeps its
//!   listener; no timeout is involved, so our own stalls do not matter). Any other outcome in
//!   between starts the count again; 0 turns the rule off.
//! - **A stalled loop judges nobody** (after the "local pause" rule of Cassandra's gossiper): a
//!   failed probe during which our own loop ran later than `max_stall` counts nothing. A
//!   crashed head is still found once the loop runs on time again. Zero turns the rule off.
//! - **A refusal is a sign of life**: a head that closed our connection before the handshake
//!   (its gate is full) counts as heard from.
//! - **Refusing is not serving**: the watch also keeps when the head last *served* us (a
//!   request or reply; refusals do not count). A refused probe after `min_silence` without
//!   service says [`Verdict::NotServing`]: a node that handed its token on and whose `Moved`
//!   never reached us is no head any more, and its gate refuses us for good. The member leaves
//!   it and looks again, without a re-election.
//! - Anything heard from the head clears the score.
//!
//! Sans-IO: the caller passes the time ([`Time`]) and the failure's kind.

use super::failure::SendFailure;
use crate::id::NodeId;
use crate::time::Time;
use std::time::Duration;

/// The detector's settings (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    pub probe_after: Duration,
    pub spacing: Duration,
    pub min_silence: Duration,
    pub down_score: u32,
    /// Our loop's lateness beyond which a failed probe counts nothing (zero: no limit).
    pub max_stall: Duration,
    /// Probes in a row that found no listener and report the head down at once (zero: off).
    pub gone_after: u32,
}

/// The score at which failed probes report the head down (with the silence): two
/// unreachable probes, or four ambiguous ones.
pub const DOWN_SCORE: u32 = 4;

/// Rounds of silence after which a member probes its head: a head sends its view every few
/// rounds and answers its members' requests, so two silent rounds are unusual.
pub const PROBE_AFTER_ROUNDS: u32 = 2;

/// Probes in a row that find nothing listening and report the head down at once: one could
/// be a listener being replaced, two are a crashed process.
pub const GONE_AFTER: u32 = 2;

impl WatchConfig {
    /// A member's detector when the protocol runs rounds of `round` and a head is given
    /// `min_silence`: a probe after [`PROBE_AFTER_ROUNDS`] silent rounds, then one a round; a
    /// failed probe counts nothing if the member's own loop ran more than a round late.
    pub fn member(round: Duration, min_silence: Duration) -> WatchConfig {
        WatchConfig {
            probe_after: round * PROBE_AFTER_ROUNDS,
            spacing: round,
            min_silence,
            down_score: DOWN_SCORE,
            max_stall: round,
            gone_after: GONE_AFTER,
        }
    }
}

/// What a failed probe means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not about our head, or our own node refused the dial: nothing learned.
    Uncounted,
    /// Counted; probe again after `spacing`.
    Again,
    /// Report the head down (failed probes and `min_silence`).
    Down,
    /// Report the head down: `gone_after` probes in a row found nothing listening.
    Gone,
    /// The head refused the connection: it is alive (counted as heard from it).
    Alive,
    /// The head refused the connection and has served us nothing for `min_silence`: leave it.
    NotServing,
    /// Our own loop stalled beyond `max_stall` during the probe: nothing learned.
    Stalled,
}

/// One member's watch over its head.
#[derive(Debug, Clone)]
pub struct HeadWatch {
    cfg: WatchConfig,
    head: Option<NodeId>,
    last_heard: Option<Time>,
    /// When the head last served us: a request or a reply from it (a refusal does not count).
    last_served: Option<Time>,
    score: u32,
    /// Probes in a row that found no listener at the head's addresses.
    gone: u32,
    probing: bool,
    /// When the probe in flight went out.
    probe_at: Option<Time>,
    last_failure: Option<Time>,
    urgent: bool,
}

impl HeadWatch {
    pub fn new(cfg: WatchConfig) -> HeadWatch {
        HeadWatch {
            cfg,
            head: None,
            last_heard: None,
            last_served: None,
            score: 0,
            gone: 0,
            probing: false,
            probe_at: None,
            last_failure: None,
            urgent: false,
        }
    }

    pub fn config(&self) -> &WatchConfig {
        &self.cfg
    }

    /// Follows the state machine's current head; a new head starts with a clean slate.
    pub fn follow(&mut self, head: Option<NodeId>, now: Time) {
        if head != self.head {
            self.head = head;
            self.last_heard = head.map(|_| now);
            self.last_served = self.last_heard;
            self.score = 0;
            self.gone = 0;
            self.probing = false;
            self.probe_at = None;
            self.last_failure = None;
            self.urgent = false;
        }
    }

    /// The head being watched.
    pub fn head(&self) -> Option<NodeId> {
        self.head
    }

    /// `from` sent us something (a request or a reply).
    pub fn heard(&mut self, from: NodeId, now: Time) {
        if Some(from) == self.head {
            self.last_served = Some(now);
            self.alive(now);
        }
    }

    /// The head showed it is alive (served us, or refused us): the failure count starts again.
    fn alive(&mut self, now: Time) {
        self.last_heard = Some(now);
        self.score = 0;
        self.gone = 0;
        self.last_failure = None;
        self.urgent = false;
    }

    /// Our connection to `peer` closed with an error, or a message to it failed: if it is our
    /// head, probe it at once.
    pub fn broke(&mut self, head: Option<NodeId>, peer: NodeId, now: Time) {
        self.follow(head, now);
        if Some(peer) == self.head {
            self.urgent = true;
        }
    }

    /// Whether to send the head a probe now (`head`: the state machine's current head).
    pub fn due(&mut self, head: Option<NodeId>, now: Time) -> bool {
        self.follow(head, now);
        if self.head.is_none() || self.probing {
            return false;
        }
        if let Some(f) = self.last_failure {
            return now.since(f) >= self.cfg.spacing;
        }
        self.urgent || self.silence(now) >= self.cfg.probe_after
    }

    fn silence(&self, now: Time) -> Duration {
        self.last_heard.map_or(Duration::ZERO, |t| now.since(t))
    }

    /// A probe to the head went out at `now`.
    pub fn probe_sent(&mut self, now: Time) {
        self.probing = true;
        self.probe_at = Some(now);
    }

    /// When the probe in flight went out (to look up our loop's stalls since then).
    pub fn probe_started(&self) -> Option<Time> {
        self.probe_at.filter(|_| self.probing)
    }

    /// The probe to `to` was answered.
    pub fn answered(&mut self, to: NodeId, now: Time) {
        if Some(to) == self.head {
            self.probing = false;
        }
        self.heard(to, now);
    }

    /// The probe to `to` failed as `class`; `stall` is the worst lateness of our own loop while
    /// it was out ([`super::stall::StallMeter::worst_during`] its start).
    pub fn failed(&mut self, to: NodeId, class: SendFailure, now: Time, stall: Duration) -> Verdict {
        if Some(to) != self.head {
            return Verdict::Uncounted;
        }
        self.probing = false;
        self.probe_at = None;
        if class == SendFailure::RefusedByPeer {
            let unserved = self.last_served.map_or(Duration::ZERO, |t| now.since(t));
            self.alive(now);
            if unserved >= self.cfg.min_silence {
                // The next head (or this one, found again) starts a fresh count.
                self.last_served = Some(now);
                return Verdict::NotServing;
            }
            return Verdict::Alive;
        }
        self.urgent = false;
        self.last_failure = Some(now);
        let gone = class == SendFailure::NoListener && self.cfg.gone_after > 0;
        if class != SendFailure::RefusedLocally {
            self.gone = if gone { self.gone + 1 } else { 0 };
        }
        if !gone && class != SendFailure::RefusedLocally && self.stalled(stall) {
            return Verdict::Stalled;
        }
        self.score += match class {
            SendFailure::RefusedLocally => return Verdict::Uncounted,
            SendFailure::RefusedByPeer => 0,
            SendFailure::Unreachable | SendFailure::NoListener => 2,
            SendFailure::Ambiguous => 1,
        };
        let verdict = if gone && self.gone >= self.cfg.gone_after {
            Verdict::Gone
        } else if self.score >= self.cfg.down_score && self.silence(now) >= self.cfg.min_silence {
            Verdict::Down
        } else {
            return Verdict::Again;
        };
        self.score = 0;
        self.gone = 0;
        self.last_failure = None;
        verdict
    }

    /// Whether a lateness of our own loop of `stall` is beyond the limit: a failure seen
    /// meanwhile judges nobody.
    pub fn stalled(&self, stall: Duration) -> bool {
        !self.cfg.max_stall.is_zero() && stall > self.cfg.max_stall
    }

    /// Whether a probe is in flight.
    pub fn probing(&self) -> bool {
        self.probing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> WatchConfig {
        WatchConfig {
            probe_after: Duration::from_secs(2),
            spacing: Duration::from_secs(1),
            min_silence: Duration::from_secs(10),
            down_score: DOWN_SCORE,
            max_stall: Duration::from_secs(1),
            gone_after: 2,
        }
    }

    const ON_TIME: Duration = Duration::ZERO;
    const T0: Time = Time(5_000_000);

    fn id(b: u8) -> NodeId {
        NodeId::from_u64(b as u64 + 1)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Probes head `id(1)` every second after `from`, each failing as `class`, until one says
    /// `Down`; returns when (fails the test if that takes over 30 s).
    fn probed_until_down(w: &mut HeadWatch, from: Time, class: SendFailure) -> Time {
        let mut t = from;
        loop {
            t = t + secs(1);
            assert!(t - from <= secs(30), "a dead head must be reported");
            if w.due(Some(id(1)), t) {
                w.probe_sent(t);
                if w.failed(id(1), class, t, ON_TIME) == Verdict::Down {
                    return t;
                }
            }
        }
    }

    #[test]
    fn a_burst_of_failed_dials_does_not_report_an_alive_head_down() {
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        assert!(!w.due(head, T0), "just attached: nothing to probe");
        let t = T0 + secs(2);
        assert!(w.due(head, t), "silent for probe_after: probe");
        w.probe_sent(t);
        assert!(!w.due(head, t), "one probe at a time");
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t, ON_TIME), Verdict::Again);
        assert!(!w.due(head, t + Duration::from_millis(10)), "the next probe waits a round");
        let t = t + secs(1);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(
            w.failed(id(1), SendFailure::Unreachable, t, ON_TIME),
            Verdict::Again,
            "score 4 but only 3 s of silence: not down yet"
        );
        let t = t + secs(1);
        assert!(w.due(head, t));
        w.probe_sent(t);
        w.answered(id(1), t);
        assert!(!w.due(head, t + secs(1)), "heard a second ago");
        let t = t + secs(3);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t, ON_TIME), Verdict::Again, "the score started again");
    }

    #[test]
    fn a_dead_head_is_reported_once_the_silence_is_long_enough() {
        let mut w = HeadWatch::new(cfg());
        w.due(Some(id(1)), T0);
        let down_at = probed_until_down(&mut w, T0, SendFailure::Unreachable);
        assert_eq!(down_at - T0, secs(10), "after min_silence, not before");
    }

    #[test]
    fn refusals_of_our_own_and_other_peers_count_nothing() {
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let mut t = T0 + secs(20);
        for _ in 0..10 {
            assert!(w.due(head, t));
            w.probe_sent(t);
            assert_eq!(w.failed(id(1), SendFailure::RefusedLocally, t, ON_TIME), Verdict::Uncounted);
            t = t + secs(1);
        }
        assert_eq!(w.failed(id(2), SendFailure::Unreachable, t, ON_TIME), Verdict::Uncounted, "not our head");
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::Ambiguous, t, ON_TIME), Verdict::Again, "score 1 of 4");
        for k in 0..3 {
            t = t + secs(1);
            assert!(w.due(head, t));
            w.probe_sent(t);
            let v = w.failed(id(1), SendFailure::Ambiguous, t, ON_TIME);
            assert_eq!(v, if k == 2 { Verdict::Down } else { Verdict::Again }, "ambiguous probe {}", k + 2);
        }
    }

    /// A head that refuses our dials before the handshake is alive: probes that alternate
    /// refusals and unreachable dials never report it down (after `min_silence` without
    /// service the refusal says `NotServing` instead); a head that dies after its last refusal
    /// is reported `min_silence` after that refusal.
    #[test]
    fn a_refusal_by_the_head_is_a_sign_of_life() {
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let mut t = T0;
        let mut served = T0;
        let mut left = Vec::new();
        for k in 0..40 {
            t = t + secs(1);
            if w.due(head, t) {
                w.probe_sent(t);
                let class = if k % 4 == 3 { SendFailure::RefusedByPeer } else { SendFailure::Unreachable };
                let v = w.failed(id(1), class, t, ON_TIME);
                assert_ne!(v, Verdict::Down, "probe {k} at {:?}: a head that refuses us is alive", t - T0);
                if class == SendFailure::RefusedByPeer {
                    let expected = if t - served >= cfg().min_silence { Verdict::NotServing } else { Verdict::Alive };
                    assert_eq!(v, expected, "refusal at {:?}", t - T0);
                    if v == Verdict::NotServing {
                        served = t;
                        left.push((t - T0).as_secs());
                    }
                }
            }
        }
        assert_eq!(left, [12, 24, 36], "left every min_silence (rounded up to a refusal)");
        w.heard(id(1), t);
        assert!(w.due(head, t + secs(2)));
        w.probe_sent(t);
        let refused_at = t + secs(2);
        assert_eq!(w.failed(id(1), SendFailure::RefusedByPeer, refused_at, ON_TIME), Verdict::Alive);
        let down_at = probed_until_down(&mut w, refused_at, SendFailure::Unreachable);
        assert_eq!(down_at - refused_at, secs(10));
    }

    /// A member whose head handed its token on without telling it is refused by the former
    /// head's gate on every probe: refusals for `min_silence` with nothing served say
    /// `NotServing`, once; anything the head sends meanwhile starts the wait again.
    #[test]
    fn a_head_that_only_refuses_us_is_left_after_the_silence() {
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let refused_every_second = |w: &mut HeadWatch, from: Time, n: u64| {
            let mut verdicts = Vec::new();
            for s in 1..=n {
                let t = from + secs(s);
                if w.due(head, t) {
                    w.probe_sent(t);
                    verdicts.push((s, w.failed(id(1), SendFailure::RefusedByPeer, t, ON_TIME)));
                }
            }
            verdicts
        };
        let v = refused_every_second(&mut w, T0, 12);
        let not_serving: Vec<u64> = v.iter().filter(|(_, v)| *v == Verdict::NotServing).map(|(s, _)| *s).collect();
        assert_eq!(not_serving, [10], "left once, at min_silence: {v:?}");
        assert!(v.iter().all(|(_, v)| matches!(v, Verdict::Alive | Verdict::NotServing)), "{v:?}");
        assert_eq!(v.first().map(|(s, _)| *s), Some(2), "the first probe after probe_after");

        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let _ = refused_every_second(&mut w, T0, 8);
        w.heard(id(1), T0 + secs(8) + Duration::from_millis(500));
        let v = refused_every_second(&mut w, T0 + secs(8), 10);
        assert!(v.iter().all(|(_, v)| *v == Verdict::Alive), "served at 8.5 s: {v:?}");
        let v = refused_every_second(&mut w, T0 + secs(18), 1);
        assert_eq!(v, [(1, Verdict::NotServing)], "19 s: 10.5 s after it last served us");
    }

    #[test]
    fn a_broken_connection_is_probed_at_once_and_a_new_head_starts_clean() {
        let mut w = HeadWatch::new(cfg());
        w.due(Some(id(1)), T0);
        w.broke(Some(id(1)), id(1), T0);
        assert!(w.due(Some(id(1)), T0), "a broken connection to the head: probe now");
        w.probe_sent(T0);
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, T0, ON_TIME), Verdict::Again);
        assert!(!w.due(Some(id(3)), T0 + secs(1)));
        assert!(!w.probing());
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, T0, ON_TIME), Verdict::Uncounted);
        assert!(!w.due(None, T0 + secs(60)), "no head, no probe");
    }

    /// Probes that fail while our own loop runs seconds late count nothing; once the loop is
    /// on time again a dead head is reported after `down_score`.
    #[test]
    fn probes_failed_while_our_loop_stalled_count_nothing() {
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let mut t = T0;
        let mut probes = 0;
        for _ in 0..60 {
            t = t + secs(1);
            if w.due(head, t) {
                w.probe_sent(t);
                assert_eq!(w.probe_started(), Some(t));
                probes += 1;
                let v = w.failed(id(1), SendFailure::Unreachable, t, Duration::from_millis(1500));
                assert_eq!(v, Verdict::Stalled, "probe {probes} at {:?}", t - T0);
                assert_eq!(w.probe_started(), None);
            }
        }
        assert!(probes >= 50, "still probed every round: {probes}");
        let mut verdicts = Vec::new();
        for _ in 0..3 {
            t = t + secs(1);
            assert!(w.due(head, t));
            w.probe_sent(t);
            verdicts.push(w.failed(id(1), SendFailure::Unreachable, t, secs(1)));
        }
        assert_eq!(verdicts, [Verdict::Again, Verdict::Down, Verdict::Again], "down at score 4 once on time");
        let mut w = HeadWatch::new(WatchConfig { max_stall: Duration::ZERO, ..cfg() });
        w.due(head, T0);
        let t = T0 + secs(20);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t, secs(30)), Verdict::Again, "zero: no limit");
    }

    /// A head with nothing listening at its addresses is reported down after `gone_after` such
    /// probes in a row, long before `min_silence`, even while our loop stalls; any other
    /// outcome in between starts the count again, and with the rule off such probes count as
    /// unreachable ones.
    #[test]
    fn nothing_listening_twice_in_a_row_is_down_at_once() {
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let mut t = T0 + Duration::from_millis(300);
        w.broke(head, id(1), t);
        assert!(w.due(head, t), "the connection broke: probe at once");
        w.probe_sent(t);
        let stalled = secs(5);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, stalled), Verdict::Again, "one is not enough");
        assert!(!w.due(head, t + Duration::from_millis(500)), "spaced like any failed probe");
        t = t + secs(1);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, stalled), Verdict::Gone, "1.3 s of silence, not 10");

        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let mut t = T0 + secs(2);
        let mut verdicts = Vec::new();
        for class in [
            SendFailure::NoListener,
            SendFailure::Ambiguous,
            SendFailure::NoListener,
            SendFailure::RefusedLocally,
            SendFailure::NoListener,
        ] {
            assert!(w.due(head, t));
            w.probe_sent(t);
            verdicts.push(w.failed(id(1), class, t, ON_TIME));
            t = t + secs(1);
        }
        assert_eq!(
            verdicts,
            [Verdict::Again, Verdict::Again, Verdict::Again, Verdict::Uncounted, Verdict::Gone],
            "a timeout broke the first pair; our own refusal did not break the second"
        );
        let mut w = HeadWatch::new(cfg());
        w.due(head, T0);
        let t = T0 + secs(2);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, ON_TIME), Verdict::Again);
        w.heard(id(1), t + Duration::from_millis(100));
        let t = t + secs(3);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, ON_TIME), Verdict::Again, "heard from in between");

        let mut w = HeadWatch::new(WatchConfig { gone_after: 0, ..cfg() });
        w.due(head, T0);
        let down_at = probed_until_down(&mut w, T0, SendFailure::NoListener);
        assert_eq!(down_at - T0, secs(10), "the rule off: min_silence");
    }
}
