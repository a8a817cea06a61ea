//! The C allocator's settings for training, set at start-up ([`tune`]) by the edge client and by
//! `coordinator simulate` (which trains every client in one process).
//!
//! glibc's `malloc` hands every block above its mmap threshold (128 KiB at start, then raised
//! to the largest block freed so far) straight back to the kernel when it is freed, and trims
//! the top of each heap above its trim threshold. A training step allocates and frees tensors
//! of hundreds of KiB dozens of times (a LeNet-5 activation at batch 64 is 884 KiB), so each of
//! them cost fresh zeroed pages, and, with a second training thread, a TLB shoot-down on the
//! other core at every `munmap`: `perf` put page clearing, faults and cross-core calls among
//! the largest costs of a two-thread step, and the MLP (a batch of 64 images is 196 KiB) trained
//! more than twice as fast on one thread with these settings as without. [`tune`] keeps blocks up to [`MMAP_THRESHOLD`] in the
//! heap and up to [`TRIM_THRESHOLD`] of free memory on top of each heap, so the same pages are
//! reused step after step (BENCHMARKS.md §3 has the effect and the peak RSS).
//!
//! Only glibc on Linux has these settings (`mallopt`); elsewhere (musl, other systems) [`tune`]
//! does nothing. Values set through `GLIBC_TUNABLES` (`glibc.malloc.mmap_threshold`,
//! `glibc.malloc.trim_threshold`) are left alone.

/// Blocks up to this size come from the heap, not from their own mapping (bytes).
pub const MMAP_THRESHOLD: usize = 8 << 20;
/// Free memory kept at the top of a heap before it is returned to the kernel (bytes).
pub const TRIM_THRESHOLD: usize = 32 << 20;

/// Sets [`MMAP_THRESHOLD`] and [`TRIM_THRESHOLD`] on glibc (see the module docs); returns
/// whether they were set. Call it once, at the start of `main`, before other threads start.
pub fn tune() -> bool {
    let user = std::env::var("GLIBC_TUNABLES")
        .is_ok_and(|t| t.contains("malloc.mmap_threshold") || t.contains("malloc.trim_threshold"));
    !user && set()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set() -> bool {
    let value = |v: usize| libc::c_int::try_from(v).expect("thresholds fit a C int");
    // SAFETY: `mallopt` takes two integers and changes allocator parameters under glibc's own
    // lock; it is called with glibc's documented parameter names and values in range, and
    // touches no memory of ours.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, value(MMAP_THRESHOLD)) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, value(TRIM_THRESHOLD)) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() -> bool {
    false
}
