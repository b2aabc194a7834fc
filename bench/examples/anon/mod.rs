//! Anonymous memory for the examples that measure this machine's memory (`fault_rate`,
//! `mem_latency`): a private mapping advised into huge pages or kept off them.

/// Map `bytes` of fresh zeroed memory, advised into huge pages when `huge`, else kept on
/// small pages. Panics when the kernel refuses. Give it back with `unmap(ptr, bytes)`.
pub fn map(bytes: usize, huge: bool) -> *mut u8 {
    // SAFETY: a private anonymous mapping with no address hint; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert!(p != libc::MAP_FAILED, "mmap failed");
    let advice = if huge {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(p, bytes, advice) };
    p.cast()
}

/// Unmap what `map(bytes, _)` returned.
///
/// # Safety
/// `p` came from `map(bytes, _)` and nothing uses the memory any more.
pub unsafe fn unmap(p: *mut u8, bytes: usize) {
    // SAFETY: the caller's promise.
    unsafe { libc::munmap(p.cast(), bytes) };
}
