//! Pinning the calling thread to one CPU, for the probes that time work or wake-ups on a
//! chosen CPU (host speed, wake-up latency).

/// Pins the calling thread to `cpu` (sched_setaffinity); the kernel's error when the CPU
/// is offline or outside this process's affinity mask.
pub fn pin_this_thread(cpu: u32) -> std::io::Result<()> {
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it (cpu was
    // checked against CPU_SETSIZE); pid 0 is the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
