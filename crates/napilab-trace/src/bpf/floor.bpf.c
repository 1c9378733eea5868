// SPDX-License-Identifier: GPL-2.0
/*
 * The floor of per-packet tracing on a kernel: one empty tp_btf program on
 * net:netif_receive_skb (once per received packet). Whatever it costs is the price of
 * a program run itself (tracepoint dispatch, the BPF trampoline-less raw tracepoint
 * call, retpolines and return thunks), which no map layout can remove. Loaded only by
 * the per-packet cost benchmark (examples/packets-overhead.rs, arm F).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct sk_buff;

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_netif_receive_skb, struct sk_buff *skb)
{
	return 0;
}
