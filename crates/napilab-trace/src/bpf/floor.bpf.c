// SPDX-License-Identifier: GPL-2.0
/*
 * The floor of tracing on a kernel: empty tp_btf programs. Whatever one costs is the
 * price of a program run itself (tracepoint dispatch, the BPF trampoline-less raw
 * tracepoint call, retpolines and return thunks), which no map layout can remove.
 * Loaded only by the cost benchmarks, which attach the programs of the tracepoints
 * they measure (src/floor.rs):
 *  - examples/packets-overhead.rs, arm F: net:netif_receive_skb, once per packet;
 *  - examples/overhead.rs, arm F: the always-on tier's own hooks, so the tier is
 *    compared with empty programs at exactly the places it runs;
 *  - examples/overhead.rs, arm W: oom:mark_victim (fires only on an OOM kill),
 *    attached and detached in the tier's windows: the cost of the windows alone.
 * Each program is named floor_<tracepoint>. The floor_clock_<tracepoint> programs also
 * read the clock once into a per-CPU slot: the least a program that times something
 * (the tier's softirq_entry and softirq_exit) must do.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

#define FLOOR(tp)                              \
	SEC("tp_btf/" #tp)                     \
	int floor_##tp(void *ctx)              \
	{                                      \
		return 0;                      \
	}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} floor_clock SEC(".maps");

#define FLOOR_CLOCK(tp)                                            \
	SEC("tp_btf/" #tp)                                         \
	int floor_clock_##tp(void *ctx)                            \
	{                                                          \
		__u32 zero = 0;                                    \
		__u64 *t = bpf_map_lookup_elem(&floor_clock, &zero); \
		if (t)                                             \
			*t = bpf_ktime_get_ns();                   \
		return 0;                                          \
	}

FLOOR_CLOCK(softirq_entry)
FLOOR_CLOCK(softirq_exit)

FLOOR(netif_receive_skb)
FLOOR(napi_poll)
FLOOR(softirq_raise)
FLOOR(softirq_entry)
FLOOR(softirq_exit)
FLOOR(irq_handler_entry)
FLOOR(irq_handler_exit)
FLOOR(local_timer_exit)
FLOOR(call_function_single_exit)
FLOOR(call_function_exit)
FLOOR(reschedule_exit)
FLOOR(mark_victim)
