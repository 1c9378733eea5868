/* SPDX-License-Identifier: GPL-2.0 OR MIT OR Apache-2.0 */
/*
 * The map layout shared by packets.bpf.c (the opt-in per-packet tier) and its loader
 * (src/packets.rs). Values are u64 words followed by fixed-size names so the Rust side
 * decodes them without padding rules; the loader checks the sizes at load time.
 */
#ifndef __NAPILAB_PACKETS_H__
#define __NAPILAB_PACKETS_H__

/* Stages, in the order a forwarded packet meets them (docs/trace.md, "Per-packet
 * tier"); src/packets.rs names them with the same numbers. */
#define PK_GRO_RECEIVE 0   /* net:napi_gro_receive_entry */
#define PK_RECEIVE_ENTRY 1 /* net:netif_receive_skb_entry, _list_entry */
#define PK_NETIF_RX 2      /* net:netif_rx (backlog enqueue: veth without NAPI, loopback) */
#define PK_RECEIVE 3       /* net:netif_receive_skb (__netif_receive_skb_core) */
#define PK_QUEUE 4         /* net:net_dev_queue (__dev_queue_xmit) */
#define PK_DEQUEUE 5       /* qdisc:qdisc_dequeue (every skb of a dequeued chain) */
#define PK_START_XMIT 6    /* net:net_dev_start_xmit (before ndo_start_xmit) */
#define PK_XMIT 7          /* net:net_dev_xmit (after ndo_start_xmit) */
#define PK_NR_STAGES 8
#define PK_NO_STAGE 255    /* a drop of a packet no stage had seen */
#define PK_OUTSIDE_WINDOW 254 /* a drop between two tracing windows (stages detached) */

/* Latency histogram: values 0..3 ns get one slot each; above, each power of two is
 * split into 4 linear sub-buckets (at most 25% wide), up to 2^40 ns (the last slot
 * also holds longer ones). Slot s >= 4: msb = (s - 4) / 4 + 2, sub = (s - 4) % 4,
 * bounds [(4 + sub) << (msb - 2), (5 + sub) << (msb - 2)). */
#define PK_MAX_MSB 39
#define PK_SLOTS (4 + (PK_MAX_MSB - 1) * 4)

/* One tracked packet, keyed by its sk_buff address in an LRU hash (bounded). */
struct pk_skb_state {
	__u64 ts;      /* when the last stage saw it */
	__u64 dev;     /* that stage's struct net_device * (read only for its name) */
	__u32 netns;   /* that device's network namespace inode, and ifindex */
	__u32 ifindex;
	__u32 stage;
	__u32 pad;
};

/* The one entry of the `control` array map, written by the loader's window thread
 * (time-sliced tracing, docs/trace.md "Per-packet tier"). The stage programs are
 * attached only around a window and count nothing while `between_windows` is set (the
 * thread clears it after attaching them all and sets it before detaching any);
 * kfree_skb stays attached so drops are counted exactly, and reads the packet's last
 * stage only inside a window. A packet state older than `window_start_ns` was left by
 * an earlier window and is ignored. */
struct pk_control {
	__u64 window_start_ns; /* bpf_ktime_get_ns() when the current window opened */
	__u32 between_windows; /* 1 while the stage programs are detached (0: always on) */
	__u32 pad;
};

struct pk_pair_key {
	__u32 from_netns;
	__u32 from_ifindex;
	__u32 to_netns;
	__u32 to_ifindex;
	__u32 from_stage;
	__u32 to_stage;
};

/* u64 words: count, sum_ns, hist[PK_SLOTS]; then from_dev[16], to_dev[16]. */
struct pk_pair_val {
	__u64 count;
	__u64 sum_ns;
	__u64 hist[PK_SLOTS];
	char from_dev[16];
	char to_dev[16];
};

struct pk_drop_key {
	__u32 reason;   /* enum skb_drop_reason, named by the loader from the kernel's BTF */
	__u32 netns;    /* skb->dev at the drop (0 when the skb had no device) */
	__u32 ifindex;
	__u16 protocol; /* skb->protocol, network byte order */
	__u8 last_stage; /* the last stage that saw the packet, or PK_NO_STAGE */
	__u8 pad;
};

struct pk_drop_val {
	__u64 count;
	char dev[16];
};

#endif
