/* SPDX-License-Identifier: GPL-2.0 OR MIT OR Apache-2.0 */
/*
 * The map layout shared by napi_trace.bpf.c and its loader (src/always_on.rs).
 * Every value is a flat array of u64 (or u32 for keys) so the Rust side can decode it
 * without padding rules; keep the two in step (the Rust side checks the value sizes at
 * load time).
 */
#ifndef __NAPI_TRACE_H__
#define __NAPI_TRACE_H__

/* Execution contexts of a NAPI poll or a softirq run (docs/trace.md, "contexts"). */
#define NT_CTX_HARDIRQ 0     /* softirq run on exit from a hard IRQ */
#define NT_CTX_BH_ENABLE 1   /* softirq run when a task re-enabled bottom halves */
#define NT_CTX_KSOFTIRQD 2   /* softirq run by ksoftirqd/N */
#define NT_CTX_NAPI_THREAD 3 /* threaded NAPI kthread napi/<dev>-<id> */
#define NT_CTX_BUSY_POLL 4   /* an application's syscall (busy polling) */
#define NT_NR_CTX 5

#define NT_MAX_WORK 64      /* work histogram slots 0..64 */
#define NT_LOG2_SLOTS 32
#define NT_NR_SOFTIRQS 10
#define NT_NET_RX_SOFTIRQ 3

/* Per-CPU NAPI counter slots: each CPU numbers the (NAPI instance, context) pairs it
 * polls 0, 1, 2, ... on its own, so the hot path indexes an array and needs no atomic
 * operation. */
#define NT_NAPI_SLOTS 512
/* IRQ numbers below this index a per-CPU array; larger ones go to a hash map. */
#define NT_IRQ_ARRAY 1024

/* Key of napi_slots (global hash): one (NAPI instance, context) pair on one CPU. */
struct nt_napi_key {
	/* 0 for instances without an id: the per-CPU backlog (RPS, netif_rx) and some
	 * drivers' TX-only NAPIs; those are told apart by device, (netns, ifindex), which
	 * is (0, 0) for the backlog. NAPI ids are global, ifindexes per namespace. */
	__u32 napi_id;
	__u32 ctx;
	__u32 ifindex; /* only when napi_id is 0 */
	__u32 cpu;
	__u32 netns; /* only when napi_id is 0 */
};

/* Value of napi_slots: where the pair's counters are, and what it is. Written once. */
struct nt_napi_slot {
	__u32 slot; /* index into napi_stats, valid on key.cpu only */
	__u32 ifindex;
	__u32 netns; /* inode of the device's network namespace; 0 without a device */
	char dev[16];
};

/* Per CPU, index slot: u64 words polls, packets, full_budget_polls, comm_pid,
 * work_hist[65]; then comm[16]. */
struct nt_napi_val {
	__u64 polls;
	__u64 packets;
	__u64 full_budget;
	__u64 comm_pid; /* the pid whose comm is in comm */
	__u64 work_hist[NT_MAX_WORK + 1];
	char comm[16]; /* the last task that polled (busy poll: the application) */
};

/* Per CPU, index vec * NT_NR_CTX + ctx. */
struct nt_softirq_val {
	__u64 count;
	__u64 total_ns;
	__u64 raise_lat_ns;    /* sum of raise-to-entry latency over the timed runs */
	__u64 raise_lat_count; /* runs whose raise was timed */
	__u64 log2_ns[NT_LOG2_SLOTS];
};

/* Per CPU, index ctx: one record per net_rx_action run. */
struct nt_net_rx_val {
	__u64 runs;
	__u64 packets;
	__u64 budget_runs; /* runs that handled >= netdev_budget packets */
	__u64 time_runs;   /* runs that lasted >= netdev_budget_usecs */
	__u64 log2_packets[NT_LOG2_SLOTS];
};

/* Per CPU, key: IRQ number (array below NT_IRQ_ARRAY, hash above). */
struct nt_irq_val {
	__u64 count;
	__u64 total_ns;
};

#endif
