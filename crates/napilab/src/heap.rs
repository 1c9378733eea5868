//! The process's heap: jemalloc is the global allocator (main.rs), and this reads its own
//! account of what is live, which `napilab export` exports beside its RSS.
//!
//! Why jemalloc: `napilab export` runs for days. Under glibc malloc its resident memory
//! recorded the heap's highest and most fragmented moment, not what was live: in the
//! 2-hour soaks of 2026-11-27 anonymous memory stepped up by the same 284 KB in two
//! exporters at the same second when other jobs loaded the machine, while heaptrack showed
//! the live heap flat; and with `malloc_trim(0)` every 10 s it still crept by 35-80 KB an
//! hour (docs/export.md, section "Soak"). jemalloc keeps small allocations in per-size
//! slabs, returns dirty pages to the kernel on a decay timer (10 s by default, driven by
//! the sampler's own allocations) and counts the bytes the program holds, so a leak shows
//! as growth of [`HeapStats::allocated`] and fragmentation as RSS above it.

/// jemalloc's counts, refreshed when read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeapStats {
    /// Bytes the program holds in live allocations (`stats.allocated`).
    pub allocated: u64,
    /// Bytes of physically resident pages jemalloc maps: live, metadata and dirty pages
    /// not yet returned (`stats.resident`).
    pub resident: u64,
}

/// The allocator's counts now; None when jemalloc refuses (never expected: it is the
/// global allocator, built with statistics).
pub fn heap_stats() -> Option<HeapStats> {
    // jemalloc caches its statistics; advancing the epoch refreshes them.
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    Some(HeapStats {
        allocated: tikv_jemalloc_ctl::stats::allocated::read().ok()? as u64,
        resident: tikv_jemalloc_ctl::stats::resident::read().ok()? as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_heap_counts_what_is_allocated_and_freed() {
        let before = heap_stats().expect("jemalloc statistics");
        // 256 blocks of 64 KiB, each written so that its pages are resident.
        let blocks: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; 64 * 1024]).collect();
        let held = heap_stats().expect("jemalloc statistics");
        drop(blocks);
        let after = heap_stats().expect("jemalloc statistics");
        // Other tests allocate on other threads meanwhile: a few MB of slack.
        assert!(
            held.allocated >= before.allocated + 12 * 1024 * 1024,
            "16 MB held, but the live heap went only from {} to {} bytes: is jemalloc the global allocator?",
            before.allocated,
            held.allocated
        );
        assert!(
            after.allocated + 12 * 1024 * 1024 <= held.allocated,
            "16 MB freed, but the live heap went only from {} to {} bytes",
            held.allocated,
            after.allocated
        );
        assert!(
            held.resident >= held.allocated,
            "jemalloc's resident pages ({}) below its live bytes ({})",
            held.resident,
            held.allocated
        );
    }
}
