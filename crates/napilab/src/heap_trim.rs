//! Giving freed heap back to the kernel in a process that runs for days (`napilab export`).
//!
//! glibc keeps freed memory inside its arenas: only a free block at the top of an arena,
//! larger than the trim threshold, goes back on its own. A long-running exporter's
//! resident memory therefore records the highest the heap ever was and how it was
//! fragmented then, not what is live: in the 2-hour soaks of 2026-11-27 both exporters'
//! anonymous memory stepped up by the same 284 KB at the same second when other jobs
//! loaded the machine, and stayed there, while heaptrack showed the live heap flat.
//! `malloc_trim(0)` returns every free page of every arena (glibc 2.8 and later release
//! pages in the middle of an arena too), so RSS follows the live heap and a leak, if
//! there is one, shows instead of hiding under the high-water mark. It costs a walk over
//! the arenas' free lists: microseconds for the exporter's few MB, done every
//! [`TRIM_EVERY`].

use std::time::{Duration, Instant};

/// How often the sampler gives freed heap back.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Calls [`release_free_heap`] at most once per [`TRIM_EVERY`].
pub struct HeapTrimmer {
    last: Instant,
}

impl HeapTrimmer {
    pub fn new() -> HeapTrimmer {
        HeapTrimmer {
            last: Instant::now(),
        }
    }

    /// Trims when [`TRIM_EVERY`] has passed since the last trim; says whether it did.
    pub fn maybe_trim(&mut self) -> bool {
        if self.last.elapsed() < TRIM_EVERY {
            return false;
        }
        self.last = Instant::now();
        release_free_heap();
        true
    }
}

/// Returns the free pages of every malloc arena to the kernel (glibc); elsewhere nothing
/// to do: musl's allocator unmaps freed memory itself.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists; it takes the
    // arenas' locks like malloc does and has no preconditions on the caller.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anonymous_rss_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssAnon in /proc/self/status")
    }

    #[test]
    fn freed_heap_below_the_top_goes_back_to_the_kernel() {
        // Many 64 KiB blocks (below the mmap threshold, so on the heap), freed except the
        // last one, which pins the top of the arena: glibc alone keeps the freed pages.
        let mut blocks: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; 64 * 1024]).collect();
        let pin = blocks.pop().expect("256 blocks");
        let before_free = anonymous_rss_kb();
        drop(blocks);
        let after_free = anonymous_rss_kb();
        release_free_heap();
        let after_trim = anonymous_rss_kb();
        drop(pin);
        assert!(
            after_free + 4_000 > before_free,
            "glibc gave the freed blocks back by itself ({before_free} -> {after_free} kB): the test no longer shows what trimming is for"
        );
        assert!(
            after_trim + 8_000 < after_free,
            "malloc_trim gave back too little: {after_free} -> {after_trim} kB of anonymous RSS after freeing 16 MB"
        );
    }

    #[test]
    fn the_trimmer_waits_its_interval() {
        let mut trimmer = HeapTrimmer::new();
        assert!(!trimmer.maybe_trim());
        trimmer.last -= TRIM_EVERY;
        assert!(trimmer.maybe_trim());
        assert!(!trimmer.maybe_trim());
    }
}
