//! `futures_timer::Delay` on tokio's timer, for the libp2p crates of the node.
//!
//! libp2p arms a futures-timer `Delay` for each gossipsub message forwarded to each mesh peer,
//! each ping, each request and each stream upgrade. futures-timer keeps all of them in one
//! heap on one global thread, and creating, resetting or dropping a `Delay` wakes that thread
//! (a futex wake and two context switches); its expiries then wake the tokio workers from
//! outside. In a 500-node swarm in one process that was about a fifth of the steady CPU.
//! tokio's timer wheel lives in
//! the runtime's own driver: arming and dropping are a lock on the wheel, and expiries wake
//! tasks from the worker that parks on the driver.
//!
//! The API is futures-timer 3.0's: [`Delay::new`] (the deadline is counted from the call),
//! [`Delay::reset`], `Future<Output = ()>`, `Unpin`, `Send`, `Sync`. The tokio `Sleep` is made
//! on the first poll, so a `Delay` can be created outside the runtime (a behaviour built
//! before the swarm runs). A poll outside any tokio runtime falls back to a thread that
//! sleeps until the deadline, so the shim never panics where futures-timer would not.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A future that completes at a point in time.
pub struct Delay {
    deadline: Instant,
    state: State,
}

enum State {
    /// Not polled yet (or reset before its first poll).
    Idle,
    /// On the tokio timer of the runtime that polled it.
    Tokio(Pin<Box<tokio::time::Sleep>>),
    /// Polled outside a tokio runtime: a thread wakes it.
    Thread(Arc<Mutex<Option<Waker>>>),
}

impl Delay {
    /// A delay that completes `dur` from now.
    pub fn new(dur: Duration) -> Delay {
        Delay { deadline: deadline(dur), state: State::Idle }
    }

    /// Complete `dur` from now instead, whether or not the delay has completed.
    pub fn reset(&mut self, dur: Duration) {
        self.deadline = deadline(dur);
        match &mut self.state {
            State::Tokio(sleep) => sleep.as_mut().reset(self.deadline.into()),
            State::Idle => {}
            State::Thread(_) => self.state = State::Idle,
        }
    }
}

/// Far enough to be never, near enough not to overflow `Instant`.
fn deadline(dur: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(dur).unwrap_or_else(|| now + Duration::from_secs(60 * 60 * 24 * 365 * 30))
}

impl Future for Delay {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            return Poll::Ready(());
        }
        if let State::Idle = this.state {
            this.state = match tokio::runtime::Handle::try_current() {
                Ok(_) => State::Tokio(Box::pin(tokio::time::sleep_until(this.deadline.into()))),
                Err(_) => {
                    let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
                    let (until, theirs) = (this.deadline, slot.clone());
                    std::thread::spawn(move || {
                        std::thread::sleep(until.saturating_duration_since(Instant::now()));
                        if let Some(w) = theirs.lock().ok().and_then(|mut w| w.take()) {
                            w.wake();
                        }
                    });
                    State::Thread(slot)
                }
            };
        }
        match &mut this.state {
            State::Tokio(sleep) => sleep.as_mut().poll(cx),
            State::Thread(slot) => {
                if let Ok(mut w) = slot.lock() {
                    *w = Some(cx.waker().clone());
                }
                // The deadline may have passed while the waker was stored.
                if Instant::now() >= this.deadline {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
            State::Idle => Poll::Pending,
        }
    }
}

impl fmt::Debug for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delay").field("deadline", &self.deadline).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_traits<T: Send + Sync + Unpin + fmt::Debug>() {}

    #[test]
    fn has_the_traits_libp2p_needs() {
        assert_traits::<Delay>();
    }

    #[tokio::test]
    async fn completes_after_its_duration_counted_from_creation() {
        let d = Delay::new(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(30)).await;
        let t = Instant::now();
        d.await;
        let waited = t.elapsed();
        assert!(waited < Duration::from_millis(45), "counted from creation: waited {waited:?} more");
    }

    #[tokio::test]
    async fn reset_moves_the_deadline_both_ways() {
        let t = Instant::now();
        let mut d = Delay::new(Duration::from_secs(3600));
        // Armed on the wheel, then brought forward.
        assert!(futures_poll_once(&mut d).await.is_pending());
        d.reset(Duration::from_millis(20));
        (&mut d).await;
        assert!(t.elapsed() < Duration::from_secs(5));
        // A completed delay runs again after a reset.
        d.reset(Duration::from_millis(20));
        let t = Instant::now();
        d.await;
        assert!(t.elapsed() >= Duration::from_millis(19));
    }

    #[test]
    fn works_outside_a_runtime() {
        let t = Instant::now();
        block_on(Delay::new(Duration::from_millis(30)));
        assert!(t.elapsed() >= Duration::from_millis(29));
    }

    async fn futures_poll_once(d: &mut Delay) -> Poll<()> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *d).poll(cx))).await
    }

    /// A minimal executor without tokio: park the thread until woken.
    fn block_on(mut f: Delay) {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        while Pin::new(&mut f).poll(&mut cx).is_pending() {
            std::thread::park_timeout(Duration::from_secs(1));
        }
    }
}
