//! Software prefetch: asking the CPU to start loading a value's cache lines before the
//! simulation reads it.
//!
//! Why (*ours*, measured with `perf annotate` at N = 300,000 in): both hot loops
//! of a `superpeers` run wait on memory, not on arithmetic. In the Vivaldi phase 72 % of
//! `VivaldiClient::update_secs` sat on the first read of the peer's coordinate and 89 % of
//! `LatencyFilter::push` on the first read of the peer's id, both random reads across
//! gigabytes at N = 10^6; in the protocol rounds half of `on_message` sat on the first read of
//! the receiving node's state. The sample's or message's target is known well before it is
//! read (the next node's neighbours, a message's receiver when it is queued), so the loads can
//! overlap instead of following one another.
//!
//! A prefetch is only a hint: it never faults, never changes a value, and the result of the
//! simulation is the same with or without it (the same seed gives byte-identical output).
//! On targets other than x86-64 it does nothing.

/// Cache line size assumed for the hint (x86-64).
const LINE: usize = 64;

/// At most this many lines are requested for one value (a node's state is ~18 lines).
const MAX_LINES: usize = 24;

/// Starts loading every cache line of `*value` (at most [`MAX_LINES`]) into the L1 cache.
#[inline(always)]
pub fn prefetch<T: ?Sized>(value: &T) {
    let (first, count) = line_span(value as *const T as *const u8 as usize, std::mem::size_of_val(value));
    for k in 0..count {
        prefetch_line((first + k * LINE) as *const u8);
    }
}

/// Starts loading the `bytes` bytes at `addr` (at most [`MAX_LINES`] lines); nothing if
/// `bytes` is 0 (an empty buffer's address may dangle; it is never touched either way).
#[inline(always)]
pub fn prefetch_raw(addr: *const u8, bytes: usize) {
    if bytes == 0 {
        return;
    }
    let (first, count) = line_span(addr as usize, bytes);
    for k in 0..count {
        prefetch_line((first + k * LINE) as *const u8);
    }
}

/// The first cache line (its address) of `size` bytes at `start`, and how many lines to
/// request: every line the bytes touch, at most [`MAX_LINES`], at least one.
#[inline(always)]
fn line_span(start: usize, size: usize) -> (usize, usize) {
    let first = start & !(LINE - 1);
    let last = (start + size.max(1) - 1) & !(LINE - 1);
    (first, ((last - first) / LINE + 1).min(MAX_LINES))
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_line(p: *const u8) {
    // SAFETY: `prefetcht0` is a hint that never faults and never writes; every caller passes
    // an address inside a live reference's value (SSE is part of the x86-64 baseline).
    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn prefetch_line(_p: *const u8) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_touched_line_is_requested_up_to_the_cap() {
        assert_eq!(line_span(128, 64), (128, 1));
        assert_eq!(line_span(130, 64), (128, 2), "an unaligned line straddles two");
        assert_eq!(line_span(32, 96), (0, 2));
        assert_eq!(line_span(40, 96), (0, 3));
        assert_eq!(line_span(64, 0), (64, 1), "a zero-sized value still names its line");
        assert_eq!(line_span(0, 1144), (0, 18), "a protocol node's state");
        assert_eq!(line_span(0, 1 << 20), (0, MAX_LINES));
        // The hint itself neither faults nor writes, whatever it is given.
        let v: Vec<[u8; 96]> = vec![[1; 96]; 10];
        v.iter().for_each(prefetch);
        prefetch(&v[..]);
        prefetch(&());
        assert!(v.iter().all(|x| x.iter().all(|&b| b == 1)));
    }
}
