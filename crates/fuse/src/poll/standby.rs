//! Serving threads waiting out a spin. Every serving thread but the spinner
//! sleeps in `read(2)` on `/dev/fuse`, and the kernel wakes one of them for
//! each request it queues, even when the spinner takes that request first:
//! a wake-up and a context switch per request for nothing (a quarter of the
//! server's CPU time in PostMark). A thread on standby is not reading, so
//! nobody is woken; it reads again once called back.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Longest a thread stands by without being called: a safety net, so that
/// no missed call can keep a thread away from the device for long.
pub(crate) const LONGEST: Duration = Duration::from_millis(50);

/// Where threads stand by.
pub(crate) struct Standby {
    state: Mutex<State>,
    cv: Condvar,
    /// [`LONGEST`], but for tests that tell a call back from the safety
    /// net on a loaded machine.
    longest: Duration,
}

impl Default for Standby {
    fn default() -> Self {
        Self::with_longest(LONGEST)
    }
}

#[derive(Default)]
struct State {
    /// Bumped by every call back.
    calls: u64,
    /// Threads standing by.
    waiting: usize,
    /// Waits the safety net ended.
    timeouts: u64,
}

impl Standby {
    pub(crate) fn with_longest(longest: Duration) -> Self {
        Self {
            state: Mutex::default(),
            cv: Condvar::new(),
            longest,
        }
    }

    /// Waits until called back, or the longest wait.
    pub(crate) fn wait(&self) {
        let mut state = self.state.lock();
        let seen = state.calls;
        let deadline = std::time::Instant::now() + self.longest;
        state.waiting += 1;
        while state.calls == seen {
            if self.cv.wait_until(&mut state, deadline).timed_out() {
                state.timeouts += u64::from(state.calls == seen);
                break;
            }
        }
        state.waiting -= 1;
    }

    /// Threads standing by now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state.lock().waiting
    }

    /// Waits that ended without a call back.
    #[cfg(test)]
    pub(crate) fn timeouts(&self) -> u64 {
        self.state.lock().timeouts
    }

    /// Calls every waiting thread back.
    pub(crate) fn release(&self) {
        let mut state = self.state.lock();
        state.calls = state.calls.wrapping_add(1);
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_release_ends_every_wait_and_a_lost_one_costs_at_most_the_longest_wait() {
        let s = Standby::default();
        std::thread::scope(|sc| {
            let waiters: Vec<_> = (0..3)
                .map(|_| {
                    sc.spawn(|| {
                        let t = Instant::now();
                        s.wait();
                        t.elapsed()
                    })
                })
                .collect();
            while s.state.lock().waiting < 3 {
                std::thread::yield_now();
            }
            s.release();
            for w in waiters {
                assert!(w.join().unwrap() < LONGEST, "a released waiter waited the longest wait");
            }
        });
        assert_eq!(s.timeouts(), 0, "a released waiter was counted as timed out");
        let t = Instant::now();
        s.wait();
        assert!(t.elapsed() >= LONGEST, "a wait without a release ended early");
        assert_eq!(s.timeouts(), 1);
    }
}
