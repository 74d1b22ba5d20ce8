//! A member's failure detector for its super peer: when to probe the head, and when failed
//! probes are enough to report it down (the state machine then re-elects inside the cluster,
//! `overlay::superpeer::node`, step 5).
//!
//! The protocol core assumes crash-stop with a perfect detector (the simulator tells a member
//! at once that its head crashed). A real node only sees silence and failed requests, and on
//! a loaded machine an alive head is often slow, refuses a dial for a moment or loses a
//! stream. Every false report starts a cluster election over an alive head, and in issue 4's
//! 200-node tokens swarms (sessions 6 and 7) such elections fed a storm: no node was killed
//! before convergence, yet 76-251 heads were reported down per run. In session 7's run d200
//! most reports came from two failed dials 10 ms apart. So (*ours*, session 8):
//! - **Probe on silence**: a member probes its head (a `Hello`) when it has heard nothing from
//!   it for `probe_after`, or at once when its connection to the head broke.
//! - **Probes are spaced**: after a failed probe the next one waits `spacing` (one protocol
//!   round), so that a burst of failures within a few milliseconds counts as one moment of
//!   trouble, not as many.
//! - **Scored failures**: a probe that finds the head unreachable (the dial failed with no
//!   connection) scores 2, an ambiguous one (timeout, closed stream) 1; a probe our own node
//!   refused to dial (our gate or `connection_limits`, [`crate::net::send_failure`]) scores 0.
//! - **Down only after silence**: the head is reported down when the score reaches
//!   `down_score` *and* nothing was heard from it for `min_silence`. A crashed head is still
//!   found: its members keep probing every round until both hold (the failover then costs
//!   about `min_silence`; the swarm report measures it).
//! - **Nothing listening is down** (*ours*, session 22): a probe whose dial found nothing
//!   listening at any of the head's addresses ([`SendFailure::NoListener`]: TCP refused the
//!   connection, or the memory transport has no listener on the port) is an answer, not a
//!   silence: a live node keeps its listener, and a loaded one delays or drops connections
//!   but does not refuse them. `gone_after` such probes in a row (each `spacing` after the
//!   last) report the head down without waiting for `min_silence`, and our loop's stalls do
//!   not matter (no timeout is involved). Any other outcome in between starts the count
//!   again. In issue 4's 200-node swarms (session 21) every member of a killed head found
//!   no listener from the first probe on, yet waited out the silence: 7.4-9.9 s of each
//!   12-16 s failover.
//! - Anything heard from the head (a request, a reply, an answered probe) clears the score.
//! - **A stalled loop judges nobody** (*ours*, session 19, after the "local pause" rule of
//!   Cassandra's gossiper: a node that was paused does not convict the peers it could not
//!   hear meanwhile). A probe fails with a timeout or a closed stream just as well when our
//!   own event loop ran seconds late (a saturated machine: every task waits in the run queue)
//!   as when the head is gone. A failed probe during which our loop's tick ran later than
//!   `max_stall` ([`crate::runtime::stall::StallMeter`]) counts nothing; the next probe waits
//!   `spacing` as after any failure. In issue 4's 200-node prefix swarms (session 18) the
//!   emulated deliveries ran up to seconds late once the first slot heads were loaded, their
//!   members' probes failed, 15-57 alive heads per run were reported down, and each report's
//!   re-election made ten super peers at once, which loaded the machine further. A crashed
//!   head is still found once the loop runs on time again (a pause of the whole machine only
//!   postpones the verdict); `Duration::ZERO` turns the rule off.
//! - **A refusal is a sign of life** (*ours*, session 10): a probe whose dial reached the
//!   head and was closed by it before the handshake (its gate was full,
//!   [`SendFailure::RefusedByPeer`]) counts as hearing from the head. Session 9's 200-node
//!   tokens swarm reported alive heads down this way; each report started a re-election next
//!   to a live head. A head that dies after refusing us is still reported `min_silence`
//!   after that refusal.
//! - **Refusing is not serving** (*ours*, session 24): a refusal proves the head alive, not
//!   that it still serves us. A node that handed its token on and whose `Moved` never reached
//!   a member is no longer a head: its gate keeps only `inbound_gate` connections
//!   ([`crate::net::gate`]) and refuses that member's dials, and the member, taking every refusal
//!   for life, stayed attached to it for good (issue 4, session 23's run s23cd: three members
//!   for over 400 s, so the swarm never converged). So the watch also keeps when the head last
//!   *served* us (a request or reply from it; refusals do not count), and a refused probe
//!   after `min_silence` without one says [`Verdict::NotServing`]: the member leaves that head
//!   and looks for another one, as when a node that is no head answers `Refuse` (no
//!   re-election: the head is alive, and if it still is a head its `Announce` finds us again).
//!
//! Pure and clock-free (the caller passes `now`), so it is tested without a network.

use crate::net::send_failure::SendFailure;
use overlay::NodeId;
use std::time::{Duration, Instant};

/// The detector's settings (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    pub probe_after: Duration,
    pub spacing: Duration,
    pub min_silence: Duration,
    pub down_score: u32,
    /// Our loop's lateness beyond which a failed probe counts nothing (zero: no limit).
    pub max_stall: Duration,
    /// Probes in a row that found no listener and report the head down at once (zero: the
    /// rule is off, such probes count as unreachable).
    pub gone_after: u32,
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
    /// The head refused the connection, and has served us nothing (no request, no reply) for
    /// `min_silence`: alive but not our head any more in effect; leave it and look again.
    NotServing,
    /// Our own loop stalled beyond `max_stall` during the probe: nothing learned; probe again
    /// after `spacing`.
    Stalled,
}

/// One member's watch over its head.
#[derive(Debug)]
pub struct HeadWatch {
    cfg: WatchConfig,
    head: Option<NodeId>,
    last_heard: Option<Instant>,
    /// When the head last served us: a request or a reply from it (a refusal does not count).
    last_served: Option<Instant>,
    score: u32,
    /// Probes in a row that found no listener at the head's addresses.
    gone: u32,
    probing: bool,
    /// When the probe in flight went out.
    probe_at: Option<Instant>,
    last_failure: Option<Instant>,
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

    /// Follows the state machine's current head; a new head starts with a clean slate.
    pub fn follow(&mut self, head: Option<NodeId>, now: Instant) {
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

    /// `from` sent us something (a request or a reply).
    pub fn heard(&mut self, from: NodeId, now: Instant) {
        if Some(from) == self.head {
            self.last_served = Some(now);
            self.alive(now);
        }
    }

    /// The head showed it is alive (served us, or refused us): the failure count starts again.
    fn alive(&mut self, now: Instant) {
        self.last_heard = Some(now);
        self.score = 0;
        self.gone = 0;
        self.last_failure = None;
        self.urgent = false;
    }

    /// Our connection to `peer` closed with an error: if it is our head, probe it at once.
    pub fn broke(&mut self, head: Option<NodeId>, peer: NodeId, now: Instant) {
        self.follow(head, now);
        if Some(peer) == self.head {
            self.urgent = true;
        }
    }

    /// Whether to send the head a probe now (`head`: the state machine's current head).
    pub fn due(&mut self, head: Option<NodeId>, now: Instant) -> bool {
        self.follow(head, now);
        if self.head.is_none() || self.probing {
            return false;
        }
        if let Some(f) = self.last_failure {
            return now.saturating_duration_since(f) >= self.cfg.spacing;
        }
        self.urgent || self.silence(now) >= self.cfg.probe_after
    }

    fn silence(&self, now: Instant) -> Duration {
        self.last_heard.map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// A probe to the head went out at `now`.
    pub fn probe_sent(&mut self, now: Instant) {
        self.probing = true;
        self.probe_at = Some(now);
    }

    /// When the probe in flight went out (to look up our loop's stalls since then).
    pub fn probe_started(&self) -> Option<Instant> {
        self.probe_at.filter(|_| self.probing)
    }

    /// The probe to `to` was answered.
    pub fn answered(&mut self, to: NodeId, now: Instant) {
        if Some(to) == self.head {
            self.probing = false;
        }
        self.heard(to, now);
    }

    /// The probe to `to` failed with `class`; `stall` is the worst lateness of our own loop
    /// while it was out ([`crate::runtime::stall::StallMeter::worst_during`] its start).
    pub fn failed(&mut self, to: NodeId, class: SendFailure, now: Instant, stall: Duration) -> Verdict {
        if Some(to) != self.head {
            return Verdict::Uncounted;
        }
        self.probing = false;
        self.probe_at = None;
        if class == SendFailure::RefusedByPeer {
            let unserved = self.last_served.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
            self.alive(now);
            if unserved >= self.cfg.min_silence {
                // "Refusing is not serving": the next head (or this one, found again) starts
                // a fresh count.
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
    /// meanwhile judges nobody ("A stalled loop judges nobody").
    pub fn stalled(&self, stall: Duration) -> bool {
        !self.cfg.max_stall.is_zero() && stall > self.cfg.max_stall
    }

    /// Whether a probe is in flight (for tests and status).
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
            down_score: 4,
            max_stall: Duration::from_secs(1),
            gone_after: 2,
        }
    }

    const ON_TIME: Duration = Duration::ZERO;

    fn id(b: u8) -> NodeId {
        NodeId::from_u64(b as u64 + 1)
    }

    /// Probes head `id(1)` every second after `from`, each failing as `class`, until one says
    /// `Down`; returns when (fails the test if that takes over 30 s).
    fn probed_until_down(w: &mut HeadWatch, from: Instant, class: SendFailure) -> Instant {
        let mut t = from;
        loop {
            t += Duration::from_secs(1);
            assert!(t - from <= Duration::from_secs(30), "a dead head must be reported");
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
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        assert!(!w.due(head, t0), "just attached: nothing to probe");
        let t = t0 + Duration::from_secs(2);
        assert!(w.due(head, t), "silent for probe_after: probe");
        w.probe_sent(t);
        assert!(!w.due(head, t), "one probe at a time");
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t, ON_TIME), Verdict::Again);
        assert!(!w.due(head, t + Duration::from_millis(10)), "the next probe waits a round");
        let t = t + Duration::from_secs(1);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(
            w.failed(id(1), SendFailure::Unreachable, t, ON_TIME),
            Verdict::Again,
            "score 4 but only 3 s of silence: not down yet"
        );
        // The head answers at last: everything is forgiven.
        let t = t + Duration::from_secs(1);
        assert!(w.due(head, t));
        w.probe_sent(t);
        w.answered(id(1), t);
        assert!(!w.due(head, t + Duration::from_secs(1)), "heard a second ago");
        let t = t + Duration::from_secs(3);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t, ON_TIME), Verdict::Again, "the score started again");
    }

    #[test]
    fn a_dead_head_is_reported_once_the_silence_is_long_enough() {
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let down_at = probed_until_down(&mut w, t0, SendFailure::Unreachable);
        assert_eq!(down_at.duration_since(t0), Duration::from_secs(10), "after min_silence, not before");
    }

    #[test]
    fn refusals_of_our_own_and_other_peers_count_nothing() {
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let mut t = t0 + Duration::from_secs(20);
        for _ in 0..10 {
            assert!(w.due(head, t));
            w.probe_sent(t);
            assert_eq!(w.failed(id(1), SendFailure::RefusedLocally, t, ON_TIME), Verdict::Uncounted);
            t += Duration::from_secs(1);
        }
        assert_eq!(w.failed(id(2), SendFailure::Unreachable, t, ON_TIME), Verdict::Uncounted, "not our head");
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::Ambiguous, t, ON_TIME), Verdict::Again, "score 1 of 4");
        for k in 0..3 {
            t += Duration::from_secs(1);
            assert!(w.due(head, t));
            w.probe_sent(t);
            let v = w.failed(id(1), SendFailure::Ambiguous, t, ON_TIME);
            assert_eq!(v, if k == 2 { Verdict::Down } else { Verdict::Again }, "ambiguous probe {}", k + 2);
        }
    }

    /// Session 10: a head that refuses our dials before the handshake is alive. Probes that
    /// alternate refusals and unreachable dials (a busy head's gate) never report it down
    /// (session 24: after `min_silence` without service the refusal says `NotServing`
    /// instead); a head that dies after its last refusal is reported `min_silence` after that
    /// refusal.
    #[test]
    fn a_refusal_by_the_head_is_a_sign_of_life() {
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let mut t = t0;
        let mut served = t0;
        let mut left = Vec::new();
        for k in 0..40 {
            t += Duration::from_secs(1);
            if w.due(head, t) {
                w.probe_sent(t);
                let class = if k % 4 == 3 { SendFailure::RefusedByPeer } else { SendFailure::Unreachable };
                let v = w.failed(id(1), class, t, ON_TIME);
                assert_ne!(v, Verdict::Down, "probe {k} at {:?}: a head that refuses us is alive", t - t0);
                if class == SendFailure::RefusedByPeer {
                    let expected = if t - served >= cfg().min_silence { Verdict::NotServing } else { Verdict::Alive };
                    assert_eq!(v, expected, "refusal at {:?}", t - t0);
                    if v == Verdict::NotServing {
                        served = t;
                        left.push((t - t0).as_secs());
                    }
                }
            }
        }
        assert_eq!(left, [12, 24, 36], "left every min_silence (rounded up to a refusal)");
        // Refused once more, then dead: down after min_silence from the refusal.
        w.heard(id(1), t);
        assert!(w.due(head, t + Duration::from_secs(2)));
        w.probe_sent(t);
        let refused_at = t + Duration::from_secs(2);
        assert_eq!(w.failed(id(1), SendFailure::RefusedByPeer, refused_at, ON_TIME), Verdict::Alive);
        let down_at = probed_until_down(&mut w, refused_at, SendFailure::Unreachable);
        assert_eq!(down_at - refused_at, Duration::from_secs(10));
    }

    /// Session 24 (issue 4, run s23cd): a member whose head handed its token on without
    /// telling it was refused by the former head's gate on every probe and stayed attached for
    /// 400 s. Refusals for `min_silence` with nothing served say `NotServing`, once; anything
    /// the head sends us meanwhile starts the wait again.
    #[test]
    fn a_head_that_only_refuses_us_is_left_after_the_silence() {
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let refused_every_second = |w: &mut HeadWatch, from: Instant, secs: u64| {
            let mut verdicts = Vec::new();
            for s in 1..=secs {
                let t = from + Duration::from_secs(s);
                if w.due(head, t) {
                    w.probe_sent(t);
                    verdicts.push((s, w.failed(id(1), SendFailure::RefusedByPeer, t, ON_TIME)));
                }
            }
            verdicts
        };
        let v = refused_every_second(&mut w, t0, 12);
        let not_serving: Vec<u64> = v.iter().filter(|(_, v)| *v == Verdict::NotServing).map(|(s, _)| *s).collect();
        assert_eq!(not_serving, [10], "left once, at min_silence: {v:?}");
        assert!(v.iter().all(|(_, v)| matches!(v, Verdict::Alive | Verdict::NotServing)), "{v:?}");
        assert_eq!(v.first().map(|(s, _)| *s), Some(2), "the first probe after probe_after");

        // A head that served us in between is not left.
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let _ = refused_every_second(&mut w, t0, 8);
        w.heard(id(1), t0 + Duration::from_secs(8) + Duration::from_millis(500));
        let v = refused_every_second(&mut w, t0 + Duration::from_secs(8), 10);
        assert!(v.iter().all(|(_, v)| *v == Verdict::Alive), "served at 8.5 s: {v:?}");
        let v = refused_every_second(&mut w, t0 + Duration::from_secs(18), 1);
        assert_eq!(v, [(1, Verdict::NotServing)], "19 s: 10.5 s after it last served us");
    }

    #[test]
    fn a_broken_connection_is_probed_at_once_and_a_new_head_starts_clean() {
        let t0 = Instant::now();
        let mut w = HeadWatch::new(cfg());
        w.due(Some(id(1)), t0);
        w.broke(Some(id(1)), id(1), t0);
        assert!(w.due(Some(id(1)), t0), "a broken connection to the head: probe now");
        w.probe_sent(t0);
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t0, ON_TIME), Verdict::Again);
        // Attached elsewhere: the old head's failures do not carry over.
        assert!(!w.due(Some(id(3)), t0 + Duration::from_secs(1)));
        assert!(!w.probing());
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t0, ON_TIME), Verdict::Uncounted);
        assert!(!w.due(None, t0 + Duration::from_secs(60)), "no head, no probe");
    }

    /// Session 19: probes that fail while our own loop runs seconds late count nothing, so a
    /// saturated machine reports no alive head down; once the loop is on time again a dead
    /// head is reported as before (`min_silence` long since passed: after `down_score`).
    #[test]
    fn probes_failed_while_our_loop_stalled_count_nothing() {
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let mut t = t0;
        let mut probes = 0;
        for _ in 0..60 {
            t += Duration::from_secs(1);
            if w.due(head, t) {
                w.probe_sent(t);
                assert_eq!(w.probe_started(), Some(t));
                probes += 1;
                let v = w.failed(id(1), SendFailure::Unreachable, t, Duration::from_millis(1500));
                assert_eq!(v, Verdict::Stalled, "probe {probes} at {:?}", t - t0);
                assert_eq!(w.probe_started(), None);
            }
        }
        assert!(probes >= 50, "still probed every round: {probes}");
        // A stall within the limit counts as before.
        let mut verdicts = Vec::new();
        for _ in 0..3 {
            t += Duration::from_secs(1);
            assert!(w.due(head, t));
            w.probe_sent(t);
            verdicts.push(w.failed(id(1), SendFailure::Unreachable, t, Duration::from_secs(1)));
        }
        assert_eq!(verdicts, [Verdict::Again, Verdict::Down, Verdict::Again], "down at score 4 once on time");
        // Off: a zero limit counts every failure whatever the stall.
        let mut w = HeadWatch::new(WatchConfig { max_stall: Duration::ZERO, ..cfg() });
        w.due(head, t0);
        let t = t0 + Duration::from_secs(20);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::Unreachable, t, Duration::from_secs(30)), Verdict::Again);
    }

    /// Session 22: a head with nothing listening at its addresses is reported down after
    /// `gone_after` such probes in a row, a round apart, long before `min_silence`, even while
    /// our loop stalls; any other outcome in between starts the count again, and with the
    /// rule off such probes count as unreachable ones.
    #[test]
    fn nothing_listening_twice_in_a_row_is_down_at_once() {
        let t0 = Instant::now();
        let head = Some(id(1));
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        w.broke(head, id(1), t0 + Duration::from_millis(300));
        let mut t = t0 + Duration::from_millis(300);
        assert!(w.due(head, t), "the connection broke: probe at once");
        w.probe_sent(t);
        let stalled = Duration::from_secs(5);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, stalled), Verdict::Again, "one is not enough");
        assert!(!w.due(head, t + Duration::from_millis(500)), "spaced like any failed probe");
        t += Duration::from_secs(1);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, stalled), Verdict::Gone, "1.3 s of silence, not 10");

        // Broken streaks: a timeout or an answer in between starts the count again; our own
        // refusals teach nothing and leave it.
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let mut t = t0 + Duration::from_secs(2);
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
            t += Duration::from_secs(1);
        }
        assert_eq!(
            verdicts,
            [Verdict::Again, Verdict::Again, Verdict::Again, Verdict::Uncounted, Verdict::Gone],
            "a timeout broke the first pair; our own refusal did not break the second"
        );
        let mut w = HeadWatch::new(cfg());
        w.due(head, t0);
        let t = t0 + Duration::from_secs(2);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, ON_TIME), Verdict::Again);
        w.heard(id(1), t + Duration::from_millis(100));
        let t = t + Duration::from_secs(3);
        assert!(w.due(head, t));
        w.probe_sent(t);
        assert_eq!(w.failed(id(1), SendFailure::NoListener, t, ON_TIME), Verdict::Again, "heard from in between");

        // Off: scored as unreachable, down only after the silence.
        let mut w = HeadWatch::new(WatchConfig { gone_after: 0, ..cfg() });
        w.due(head, t0);
        let down_at = probed_until_down(&mut w, t0, SendFailure::NoListener);
        assert_eq!(down_at - t0, Duration::from_secs(10), "the rule off: min_silence as before");
    }
}
