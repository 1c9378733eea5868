// SPDX-License-Identifier: GPL-2.0
/*
 * napilab lab's line-rate back end (docs/lab.md, "The line-rate back end").
 *
 *  - lr_gen runs through BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES in the
 *    generator namespace; every frame it returns XDP_TX leaves through the generator's
 *    veth (the kernel turns XDP_TX into a redirect to the ingress device given in the
 *    context) into the DUT ingress's ring.
 *  - lr_sink is attached to the sink's veth: it counts the generated frames per class
 *    (by UDP destination port) and drops them, so the sink does no socket work.
 *  - lr_pass (XDP_PASS) is attached to the DUT ingress only when its GRO is off:
 *    veth accepts redirected frames only when the receiving peer runs NAPI, which
 *    GRO or an XDP program turns on.
 *
 * Needs no vmlinux.h: XDP uses only UAPI types.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "linerate.h"

char LICENSE[] SEC("license") = "GPL";

/* Per class: Ethernet, IP and UDP headers (filled in by the loader after load). */
struct lr_tmpl gen_tmpl[LR_MAX_CLASSES];
/* Sink: UDP destination port of each class (host order), how many, and the point
 * whose measured frames count as received (updated before each point). */
__u16 sink_ports[LR_MAX_CLASSES];
__u32 sink_nports;
__u32 sink_point;

/* Generator: frames emitted, slot class * 2 + measured. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LR_MAX_CLASSES * 2);
	__type(key, __u32);
	__type(value, struct lr_count);
} gen_counts SEC(".maps");

/* Sink: slot class = measured frames of sink_point; slot LR_MAX_CLASSES + class =
 * every other frame to that port (warm-up, earlier points, foreign). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LR_MAX_CLASSES * 2);
	__type(key, __u32);
	__type(value, struct lr_count);
} sink_counts SEC(".maps");

/* Written by the generator thread before each phase, read back after it; one thread
 * owns each class, and the program runs on that thread's CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LR_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct lr_pace);
} gen_pace SEC(".maps");

/* Whether a run of class c sends its frame now. Pacing inside one long call replaces
 * one call per 200 us batch: every call creates a page pool whose release, while its
 * frames are in flight, walks all registered XDP memory models under one mutex
 * (mem_allocator_disconnect), which at 5000 calls/s took most of the generator's CPU
 * in a kworker and stalled the generator behind the mutex. */
static __always_inline int pace_allows(__u32 c)
{
	struct lr_pace *p = bpf_map_lookup_elem(&gen_pace, &c);
	__u64 now, due, done;

	if (!p || !p->rate_pps)
		return 1;
	now = bpf_ktime_get_ns();
	if (now >= p->end_ns || now <= p->start_ns) {
		p->idle_runs++;
		return 0;
	}
	due = (now - p->start_ns) * p->rate_pps / 1000000000ULL;
	done = p->sent + p->skipped;
	if (due <= done) {
		p->idle_runs++;
		return 0;
	}
	if (due - done > p->slack)
		p->skipped += due - done - p->slack;
	p->sent++;
	return 1;
}

static __always_inline void count(void *map, __u32 key, __u64 bytes)
{
	struct lr_count *c = bpf_map_lookup_elem(map, &key);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

SEC("xdp")
int lr_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct lr_payload *p = data + LR_HDR_LEN;
	__u32 c;

	/* Anything else (lr_gen is also attached to the generator namespace's lo, see
	 * linerate.rs) passes untouched. */
	if ((void *)(p + 1) > end || p->magic != LR_MAGIC)
		return XDP_PASS;
	c = p->class_id;
	if (c >= LR_MAX_CLASSES)
		return XDP_DROP;
	/* Not due yet: the page goes straight back to the call's pool, nothing leaves. */
	if (!pace_allows(c))
		return XDP_DROP;
	/* The frame's page is recycled after the DUT forwarded it (TTL decremented,
	 * MACs rewritten in place), and live-frames mode does not copy data_in again:
	 * restore the headers on every run. The payload is never touched on the way. */
	__builtin_memcpy(data, gen_tmpl[c].hdr, LR_HDR_LEN);
	count(&gen_counts, c * 2 + (p->flags & LR_FLAG_MEASURED), end - data);
	return XDP_TX;
}

SEC("xdp")
int lr_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = data + sizeof(*eth) + sizeof(*ip);
	struct lr_payload *p = data + LR_HDR_LEN;
	__u32 cls = LR_MAX_CLASSES, i;
	__u16 port;

	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	port = bpf_ntohs(udp->dest);
	for (i = 0; i < LR_MAX_CLASSES; i++) {
		if (i >= sink_nports)
			break;
		if (sink_ports[i] == port) {
			cls = i;
			break;
		}
	}
	if (cls >= LR_MAX_CLASSES)
		return XDP_PASS;
	if ((void *)(p + 1) <= end && p->magic == LR_MAGIC && p->point == sink_point &&
	    (p->flags & LR_FLAG_MEASURED))
		count(&sink_counts, cls, end - data);
	else
		count(&sink_counts, LR_MAX_CLASSES + cls, end - data);
	return XDP_DROP;
}

SEC("xdp")
int lr_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
