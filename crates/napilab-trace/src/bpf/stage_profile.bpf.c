// SPDX-License-Identifier: GPL-2.0
/*
 * Stage profile sampler: attached to one cpu-clock perf event per CPU (a software
 * event, since VMs often lack hardware counters), it counts kernel stacks. User space
 * maps each stack to a packet-path stage by its callers (src/stages.rs).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "stage_profile.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, SP_MAX_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct sp_key);
	__type(value, __u64);
} samples SEC(".maps");

SEC("perf_event")
int sample_stack(void *ctx)
{
	struct sp_key key = {};
	key.cpu = bpf_get_smp_processor_id();
	key.kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
	__u64 *count = bpf_map_lookup_elem(&samples, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&samples, &key, &one, BPF_NOEXIST);
	}
	return 0;
}
