// SPDX-License-Identifier: GPL-2.0
/*
 * napilab's opt-in per-packet tier (`observe --trace-packets`, docs/trace.md
 * "Per-packet tier"). Unlike napi_trace.bpf.c this fires for every packet at every
 * stage, so it is off unless asked for and its cost is published.
 *
 * Each packet is followed by its sk_buff address in an LRU hash (bounded: the oldest
 * entries are evicted, so per-packet state cannot grow without limit). A stage event
 * looks up the packet's previous stage; when (previous -> this) is a transition a real
 * packet makes (allowed() below) the latency goes into a per-CPU histogram keyed by
 * (device, stage) pair. Anything else means the address was recycled or events raced,
 * and the packet starts afresh. consume_skb and kfree_skb end a packet (its address
 * will be reused); kfree_skb also counts the drop by reason, device, protocol and the
 * last stage that saw the packet.
 *
 * Every hook exists as `tp_btf` (direct BTF-typed loads) and `raw_tp`
 * (bpf_probe_read_kernel via BPF_CORE_READ); the loader enables one of each pair.
 */
#include "vmlinux.h"
#include "packets_vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "packets.h"
#include "log2.h"
#include "dev_netns.h"

char LICENSE[] SEC("license") = "GPL";

/* A packet not seen for this long is a stale entry of a freed sk_buff, not a stage. */
#define PK_MAX_AGE_NS 10000000000ULL

/* enum bpf_map_type value (UAPI, stable); vmlinux.h lists only the types the
 * always-on tier uses. */
#define PK_MAP_TYPE_LRU_HASH 9

struct {
	__uint(type, PK_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct pk_skb_state);
} skb_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct pk_pair_key);
	__type(value, struct pk_pair_val);
} pair_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct pk_drop_key);
	__type(value, struct pk_drop_val);
} drop_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pk_control);
} control SEC(".maps");

/* Stage transitions recorded, all pairs together: the window thread reads it after each
 * window, so the spread of the per-window rates gives the estimates' error. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} window_events SEC(".maps");

/* Too large for the 512-byte BPF stack. */
static const struct pk_pair_val zero_pair;

struct pk_dev {
	struct net_device *ptr;
	__u32 netns;
	__u32 ifindex;
};

static __always_inline void dev_of(struct net_device *dev, bool btf, struct pk_dev *out)
{
	out->ptr = dev;
	out->netns = 0;
	out->ifindex = 0;
	if (!dev)
		return;
	out->ifindex = btf ? dev->ifindex : BPF_CORE_READ(dev, ifindex);
	out->netns = dev_netns(dev, btf);
}

static __always_inline struct net_device *skb_dev(struct sk_buff *skb, bool btf)
{
	return btf ? skb->dev : BPF_CORE_READ(skb, dev);
}

static __always_inline __u32 slot_of(__u64 ns)
{
	if (ns < 4)
		return ns;
	__u32 msb = msb64(ns);
	if (msb > PK_MAX_MSB)
		return PK_SLOTS - 1;
	__u32 sub = (ns >> (msb - 2)) & 3;
	return 4 + (msb - 2) * 4 + sub;
}

/* Whether a packet really goes from stage `from` to stage `to`, and whether both must
 * be on the same device. Receive entries lead to netif_receive_skb on their device; a
 * received packet is forwarded to net_dev_queue of any device; a queued one goes
 * through the qdisc (or bypasses it) to the driver; a sent one can be received by
 * another device (veth peers, tunnels). start_xmit -> receive happens when the peer
 * receives inside ndo_start_xmit (veth without NAPI calls netif_rx there) or on
 * another CPU before net_dev_xmit fires. `local`: the packet at net_dev_queue belongs
 * to a local socket. */
static __always_inline bool allowed(__u32 from, __u32 to, bool same_dev, bool local)
{
	switch (to) {
	case PK_GRO_RECEIVE:
	case PK_RECEIVE_ENTRY:
	case PK_NETIF_RX:
		return from == PK_XMIT || from == PK_START_XMIT;
	case PK_RECEIVE:
		return same_dev && (from == PK_GRO_RECEIVE || from == PK_RECEIVE_ENTRY ||
				    from == PK_NETIF_RX);
	case PK_QUEUE:
		/* A packet a socket sends (skb->sk set) was not received: the address
		 * of a received packet was recycled after a free no tracepoint marks
		 * (skb_attempt_defer_free, the NAPI skb cache). */
		return from == PK_RECEIVE && !local;
	case PK_DEQUEUE:
		return same_dev && from == PK_QUEUE;
	case PK_START_XMIT:
		return same_dev && (from == PK_QUEUE || from == PK_DEQUEUE);
	case PK_XMIT:
		return same_dev && from == PK_START_XMIT;
	}
	return false;
}

static __always_inline void record(struct pk_skb_state *prev, __u32 to, struct pk_dev *dev,
				   __u64 lat)
{
	struct pk_pair_key key = {
		.from_netns = prev->netns,
		.from_ifindex = prev->ifindex,
		.to_netns = dev->netns,
		.to_ifindex = dev->ifindex,
		.from_stage = prev->stage,
		.to_stage = to,
	};
	struct pk_pair_val *v = bpf_map_lookup_elem(&pair_stats, &key);
	if (!v) {
		bpf_map_update_elem(&pair_stats, &key, &zero_pair, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&pair_stats, &key);
		if (!v)
			return;
	}
	/* A per-CPU hash entry created on one CPU appears zeroed on the others: the names
	 * are read once per CPU. */
	struct net_device *to_dev = dev->ptr;
	if (!v->to_dev[0] && to_dev)
		BPF_CORE_READ_STR_INTO(&v->to_dev, to_dev, name);
	if (!v->from_dev[0] && prev->dev) {
		struct net_device *from = (struct net_device *)prev->dev;
		BPF_CORE_READ_STR_INTO(&v->from_dev, from, name);
	}
	v->count++;
	v->sum_ns += lat;
	__u32 zero = 0;
	__u64 *events = bpf_map_lookup_elem(&window_events, &zero);
	if (events)
		(*events)++;
	__u32 slot = slot_of(lat);
	if (slot < PK_SLOTS)
		v->hist[slot]++;
}

static __always_inline void on_stage(void *skb, __u32 stage, struct net_device *dev, bool btf,
				     bool local)
{
	if (!skb)
		return;
	/* An array lookup with a constant key: the verifier inlines it to an address.
	 * While the window thread attaches or detaches the programs, some run and some
	 * do not: they count nothing then, so a window is exactly the time between the
	 * thread's two control writes. */
	__u32 zero = 0;
	struct pk_control *ctl = bpf_map_lookup_elem(&control, &zero);
	if (ctl && ctl->between_windows)
		return;
	__u64 window_start = ctl ? ctl->window_start_ns : 0;
	__u64 key = (__u64)skb;
	__u64 now = bpf_ktime_get_ns();
	struct pk_dev d;
	dev_of(dev, btf, &d);
	struct pk_skb_state *e = bpf_map_lookup_elem(&skb_states, &key);
	if (e) {
		bool same = e->netns == d.netns && e->ifindex == d.ifindex;
		__u64 ts = e->ts;
		if (allowed(e->stage, stage, same, local) && ts >= window_start && now >= ts &&
		    now - ts < PK_MAX_AGE_NS) {
			record(e, stage, &d, now - ts);
		} else if (stage == PK_XMIT) {
			/* The packet moved on (its receiver ran before ndo_start_xmit
			 * returned): do not overwrite the newer stage. */
			return;
		}
		e->ts = now;
		e->dev = (__u64)d.ptr;
		e->netns = d.netns;
		e->ifindex = d.ifindex;
		e->stage = stage;
		return;
	}
	struct pk_skb_state n = {
		.ts = now,
		.dev = (__u64)d.ptr,
		.netns = d.netns,
		.ifindex = d.ifindex,
		.stage = stage,
	};
	bpf_map_update_elem(&skb_states, &key, &n, BPF_ANY);
}

static __always_inline void on_consume(void *skb)
{
	__u64 key = (__u64)skb;
	bpf_map_delete_elem(&skb_states, &key);
}

static __always_inline void on_drop(struct sk_buff *skb, __u32 reason, bool btf)
{
	if (!skb)
		return;
	__u64 addr = (__u64)skb;
	struct pk_dev d;
	dev_of(skb_dev(skb, btf), btf, &d);
	struct pk_drop_key key = {
		.reason = reason,
		.netns = d.netns,
		.ifindex = d.ifindex,
		.protocol = btf ? skb->protocol : BPF_CORE_READ(skb, protocol),
		.last_stage = PK_NO_STAGE,
	};
	/* Between windows the stage programs are detached: the packet's state is stale or
	 * absent, so the LRU lookup is skipped (the drop still counts, exactly). */
	__u32 zero = 0;
	struct pk_control *ctl = bpf_map_lookup_elem(&control, &zero);
	if (ctl && ctl->between_windows) {
		key.last_stage = PK_OUTSIDE_WINDOW;
	} else {
		struct pk_skb_state *e = bpf_map_lookup_elem(&skb_states, &addr);
		if (e) {
			key.last_stage = e->stage;
			bpf_map_delete_elem(&skb_states, &addr);
		}
	}
	struct pk_drop_val *v = bpf_map_lookup_elem(&drop_stats, &key);
	if (!v) {
		struct pk_drop_val zero = {};
		bpf_map_update_elem(&drop_stats, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&drop_stats, &key);
		if (!v)
			return;
	}
	struct net_device *nd = d.ptr;
	if (!v->dev[0] && nd)
		BPF_CORE_READ_STR_INTO(&v->dev, nd, name);
	v->count++;
}

/* One tp_btf and one raw_tp program per hook. */
#define SKB_STAGE(tp, stage)                                              \
	SEC("tp_btf/" #tp)                                                \
	int BPF_PROG(btf_##tp, struct sk_buff *skb)                       \
	{                                                                 \
		on_stage(skb, stage, skb ? skb->dev : 0, true, false);    \
		return 0;                                                 \
	}                                                                 \
	SEC("raw_tp/" #tp)                                                \
	int BPF_PROG(raw_##tp, struct sk_buff *skb)                       \
	{                                                                 \
		on_stage(skb, stage, skb_dev(skb, false), false, false);  \
		return 0;                                                 \
	}

SKB_STAGE(napi_gro_receive_entry, PK_GRO_RECEIVE)
SKB_STAGE(netif_receive_skb_entry, PK_RECEIVE_ENTRY)
SKB_STAGE(netif_receive_skb_list_entry, PK_RECEIVE_ENTRY)
SKB_STAGE(netif_rx, PK_NETIF_RX)
SKB_STAGE(netif_receive_skb, PK_RECEIVE)

SEC("tp_btf/net_dev_queue")
int BPF_PROG(btf_net_dev_queue, struct sk_buff *skb)
{
	if (skb)
		on_stage(skb, PK_QUEUE, skb->dev, true, skb->sk != 0);
	return 0;
}

SEC("raw_tp/net_dev_queue")
int BPF_PROG(raw_net_dev_queue, struct sk_buff *skb)
{
	if (skb)
		on_stage(skb, PK_QUEUE, skb_dev(skb, false), false, BPF_CORE_READ(skb, sk) != 0);
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(btf_net_dev_start_xmit, struct sk_buff *skb, struct net_device *dev)
{
	on_stage(skb, PK_START_XMIT, dev, true, false);
	return 0;
}

SEC("raw_tp/net_dev_start_xmit")
int BPF_PROG(raw_net_dev_start_xmit, struct sk_buff *skb, struct net_device *dev)
{
	on_stage(skb, PK_START_XMIT, dev, false, false);
	return 0;
}

/* The skb may already be freed (or re-used by the receiver) when net_dev_xmit fires:
 * only its address is used, the device comes from the tracepoint's argument. */
SEC("tp_btf/net_dev_xmit")
int BPF_PROG(btf_net_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev)
{
	on_stage(skb, PK_XMIT, dev, true, false);
	return 0;
}

SEC("raw_tp/net_dev_xmit")
int BPF_PROG(raw_net_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev)
{
	on_stage(skb, PK_XMIT, dev, false, false);
	return 0;
}

/* dequeue_skb (net/sched/sch_generic.c) fires the tracepoint once per call, with the
 * first skb of what it dequeued: on a device with several TX queues it chains up to 8
 * more through skb->next (try_bulk_dequeue_skb_slow), and by BQL's byte limit on a
 * device with one; `packets` is the chain's length. Every skb of the chain is a
 * dequeue of its own. The walk is bounded for the verifier; a longer chain (a BQL
 * limit of many small packets) leaves its tail at net_dev_queue -> start_xmit. */
#define PK_DEQUEUE_CHAIN_MAX 64

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(btf_qdisc_dequeue, struct Qdisc *q, struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	for (int i = 0; i < PK_DEQUEUE_CHAIN_MAX && i < packets && skb; i++) {
		on_stage(skb, PK_DEQUEUE, skb->dev, true, false);
		skb = skb->next;
	}
	return 0;
}

SEC("raw_tp/qdisc_dequeue")
int BPF_PROG(raw_qdisc_dequeue, struct Qdisc *q, struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	for (int i = 0; i < PK_DEQUEUE_CHAIN_MAX && i < packets && skb; i++) {
		on_stage(skb, PK_DEQUEUE, skb_dev(skb, false), false, false);
		skb = BPF_CORE_READ(skb, next);
	}
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(btf_kfree_skb, struct sk_buff *skb, void *location, unsigned int reason)
{
	on_drop(skb, reason, true);
	return 0;
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(raw_kfree_skb, struct sk_buff *skb, void *location, unsigned int reason)
{
	on_drop(skb, reason, false);
	return 0;
}

SEC("tp_btf/consume_skb")
int BPF_PROG(btf_consume_skb, struct sk_buff *skb)
{
	on_consume(skb);
	return 0;
}

SEC("raw_tp/consume_skb")
int BPF_PROG(raw_consume_skb, struct sk_buff *skb)
{
	on_consume(skb);
	return 0;
}
