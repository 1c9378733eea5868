// SPDX-License-Identifier: GPL-2.0
/*
 * napilab's always-on tier (design.md principle 2): fires per NAPI poll, per softirq
 * run and per hard IRQ, never per packet, and only adds to per-CPU maps. Every hook
 * exists twice: as `tp_btf` (BTF-typed, cheapest) and as `raw_tp` (for kernels where
 * tp_btf cannot attach); the loader enables one of each pair.
 *
 * How the execution context is decided (docs/trace.md, "contexts"):
 *  - softirq_entry: the current task is ksoftirqd (PF_KTHREAD, comm "ksoftirqd/") ->
 *    KSOFTIRQD. The idle task (pid 0) only runs softirqs from irq_exit -> HARDIRQ.
 *    A softirq that starts within 4 us of the end of an interrupt handler on the same
 *    CPU -> HARDIRQ: device IRQs (irq_handler_exit) and, where the architecture has
 *    them (x86 `irq_vectors`), the local timer and the IPIs that RPS and
 *    smp_call_function use. Anything else ran when a task re-enabled bottom halves ->
 *    BH_ENABLE. (The per-CPU preempt count would decide this exactly, but kernels
 *    without CONFIG_KALLSYMS_ALL do not resolve `__preempt_count` for BPF.)
 *  - napi_poll inside a NET_RX softirq on this CPU: that softirq's context. Outside a
 *    softirq: a kthread named "napi/" -> NAPI_THREAD; any other
 *    task -> BUSY_POLL (its comm is kept).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "napi_trace.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_KTHREAD 0x00200000
#define HARDIRQ_GAP_NS 4000

/* Set by the loader before load. */
const volatile __u64 netdev_budget = 300;
const volatile __u64 netdev_budget_ns = 2000000;

/* The initial value of a new NAPI entry: too large for the 512-byte BPF stack. */
static const struct nt_napi_val zero_napi;

struct cpu_state {
	__u64 softirq_start;
	__u64 raise_ts[NT_NR_SOFTIRQS];
	__u64 irq_start;
	__u64 last_irq_exit;
	__u64 net_rx_packets;
	__u32 softirq_vec; /* vec + 1 while a softirq runs, else 0 */
	__u32 softirq_ctx;
	/* The last task classified on this CPU (a flood hits the same task again and
	 * again): its pid and whether it is ksoftirqd or a NAPI kthread. Saves reading the
	 * comm on every event. */
	__u32 cached_pid;
	__u32 cached_kind; /* 0 other, 1 ksoftirqd, 2 napi kthread */
};

#define KIND_OTHER 0
#define KIND_KSOFTIRQD 1
#define KIND_NAPI_THREAD 2

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_napi_key);
	__type(value, struct nt_napi_val);
} napi_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_NR_SOFTIRQS * NT_NR_CTX);
	__type(key, __u32);
	__type(value, struct nt_softirq_val);
} softirq_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_NR_CTX);
	__type(key, __u32);
	__type(value, struct nt_net_rx_val);
} net_rx_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 2048);
	__type(key, __u32);
	__type(value, struct nt_irq_val);
} irq_stats SEC(".maps");

static __always_inline struct cpu_state *state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpu_states, &zero);
}

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 slot = 0;
#pragma unroll
	for (int i = 0; i < NT_LOG2_SLOTS - 1; i++) {
		if (v > 1) {
			v >>= 1;
			slot++;
		}
	}
	return slot;
}

static __always_inline bool comm_prefix(const char *comm, const char *prefix, int n)
{
	for (int i = 0; i < n; i++)
		if (comm[i] != prefix[i])
			return false;
	return true;
}

/* What kind of task is running, from a one-entry per-CPU cache keyed by pid. */
static __always_inline __u32 task_kind(struct cpu_state *s, __u32 pid)
{
	if (pid == s->cached_pid && pid != 0)
		return s->cached_kind;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int flags = BPF_CORE_READ(task, flags);
	char comm[16] = {};
	__u32 kind = KIND_OTHER;

	if (flags & PF_KTHREAD) {
		bpf_get_current_comm(comm, sizeof(comm));
		if (comm_prefix(comm, "ksoftirqd/", 10))
			kind = KIND_KSOFTIRQD;
		else if (comm_prefix(comm, "napi/", 5))
			kind = KIND_NAPI_THREAD;
	}
	s->cached_pid = pid;
	s->cached_kind = kind;
	return kind;
}

static __always_inline __u32 softirq_context(struct cpu_state *s, __u64 now)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();

	if (pid == 0)
		return NT_CTX_HARDIRQ;
	if (task_kind(s, pid) == KIND_KSOFTIRQD)
		return NT_CTX_KSOFTIRQD;
	if (s->last_irq_exit && now - s->last_irq_exit < HARDIRQ_GAP_NS)
		return NT_CTX_HARDIRQ;
	return NT_CTX_BH_ENABLE;
}

static __always_inline void on_softirq_raise(unsigned int vec)
{
	struct cpu_state *s = state();
	if (!s || vec >= NT_NR_SOFTIRQS)
		return;
	if (s->raise_ts[vec] == 0)
		s->raise_ts[vec] = bpf_ktime_get_ns();
}

static __always_inline void on_softirq_entry(unsigned int vec)
{
	struct cpu_state *s = state();
	if (!s || vec >= NT_NR_SOFTIRQS)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u32 ctx = softirq_context(s, now);
	s->softirq_start = now;
	s->softirq_vec = vec + 1;
	s->softirq_ctx = ctx;
	s->net_rx_packets = 0;
	__u64 raised = s->raise_ts[vec];
	s->raise_ts[vec] = 0;
	if (raised && raised <= now) {
		__u32 idx = vec * NT_NR_CTX + ctx;
		struct nt_softirq_val *v = bpf_map_lookup_elem(&softirq_stats, &idx);
		if (v) {
			v->raise_lat_ns += now - raised;
			v->raise_lat_count++;
		}
	}
}

static __always_inline void on_softirq_exit(unsigned int vec)
{
	struct cpu_state *s = state();
	if (!s || vec >= NT_NR_SOFTIRQS || s->softirq_vec != vec + 1)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 dur = now - s->softirq_start;
	__u32 ctx = s->softirq_ctx;
	if (ctx >= NT_NR_CTX)
		return;
	s->softirq_vec = 0;
	__u32 idx = vec * NT_NR_CTX + ctx;
	struct nt_softirq_val *v = bpf_map_lookup_elem(&softirq_stats, &idx);
	if (v) {
		v->count++;
		v->total_ns += dur;
		__u32 slot = log2_slot(dur);
		if (slot < NT_LOG2_SLOTS)
			v->log2_ns[slot]++;
	}
	if (vec != NT_NET_RX_SOFTIRQ)
		return;
	struct nt_net_rx_val *r = bpf_map_lookup_elem(&net_rx_stats, &ctx);
	if (!r)
		return;
	__u64 pkts = s->net_rx_packets;
	r->runs++;
	r->packets += pkts;
	if (pkts >= netdev_budget)
		r->budget_runs++;
	else if (dur >= netdev_budget_ns)
		r->time_runs++;
	__u32 slot = log2_slot(pkts);
	if (slot < NT_LOG2_SLOTS)
		r->log2_packets[slot]++;
}

/* `btf` is a compile-time constant: tp_btf programs read the napi's fields with direct
 * BTF-typed loads, raw_tp programs need bpf_probe_read_kernel (BPF_CORE_READ). */
static __always_inline void on_napi_poll(struct napi_struct *napi, int work, int budget,
					 bool btf)
{
	struct cpu_state *s = state();
	if (!s)
		return;
	struct nt_napi_key key = {};
	key.napi_id = btf ? napi->napi_id : BPF_CORE_READ(napi, napi_id);
	if (!key.napi_id) {
		struct net_device *dev = btf ? napi->dev : BPF_CORE_READ(napi, dev);
		if (dev)
			key.ifindex = btf ? dev->ifindex : BPF_CORE_READ(dev, ifindex);
	}
	if (s->softirq_vec == NT_NET_RX_SOFTIRQ + 1) {
		key.ctx = s->softirq_ctx;
		if (work > 0)
			s->net_rx_packets += work;
	} else {
		__u32 pid = (__u32)bpf_get_current_pid_tgid();
		if (task_kind(s, pid) == KIND_NAPI_THREAD)
			key.ctx = NT_CTX_NAPI_THREAD;
		else
			key.ctx = NT_CTX_BUSY_POLL;
	}
	struct nt_napi_val *v = bpf_map_lookup_elem(&napi_stats, &key);
	if (!v) {
		bpf_map_update_elem(&napi_stats, &key, &zero_napi, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&napi_stats, &key);
		if (!v)
			return;
	}
	if (!v->ifindex)
		v->ifindex = btf ? napi->dev->ifindex : BPF_CORE_READ(napi, dev, ifindex);
	/* A per-CPU hash entry created on one CPU appears zeroed on the others. */
	if (!v->dev[0])
		BPF_CORE_READ_STR_INTO(&v->dev, napi, dev, name);
	v->polls++;
	if (work > 0)
		v->packets += work;
	if (work >= budget)
		v->full_budget++;
	__u32 w = work < 0 ? 0 : (work > NT_MAX_WORK ? NT_MAX_WORK : work);
	if (w <= NT_MAX_WORK)
		v->work_hist[w]++;
	if (key.ctx == NT_CTX_BUSY_POLL)
		bpf_get_current_comm(v->comm, sizeof(v->comm));
}

static __always_inline void on_irq_entry(int irq)
{
	struct cpu_state *s = state();
	if (s)
		s->irq_start = bpf_ktime_get_ns();
}

static __always_inline void on_irq_exit(int irq)
{
	struct cpu_state *s = state();
	if (!s || !s->irq_start)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 dur = now - s->irq_start;
	s->irq_start = 0;
	s->last_irq_exit = now;
	__u32 key = irq;
	struct nt_irq_val *v = bpf_map_lookup_elem(&irq_stats, &key);
	if (!v) {
		struct nt_irq_val zero = {};
		bpf_map_update_elem(&irq_stats, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&irq_stats, &key);
		if (!v)
			return;
	}
	v->count++;
	v->total_ns += dur;
}

SEC("tp_btf/napi_poll")
int BPF_PROG(btf_napi_poll, struct napi_struct *napi, int work, int budget)
{
	on_napi_poll(napi, work, budget, true);
	return 0;
}

SEC("raw_tp/napi_poll")
int BPF_PROG(raw_napi_poll, struct napi_struct *napi, int work, int budget)
{
	on_napi_poll(napi, work, budget, false);
	return 0;
}

SEC("tp_btf/softirq_raise")
int BPF_PROG(btf_softirq_raise, unsigned int vec)
{
	on_softirq_raise(vec);
	return 0;
}

SEC("raw_tp/softirq_raise")
int BPF_PROG(raw_softirq_raise, unsigned int vec)
{
	on_softirq_raise(vec);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(btf_softirq_entry, unsigned int vec)
{
	on_softirq_entry(vec);
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(raw_softirq_entry, unsigned int vec)
{
	on_softirq_entry(vec);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(btf_softirq_exit, unsigned int vec)
{
	on_softirq_exit(vec);
	return 0;
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(raw_softirq_exit, unsigned int vec)
{
	on_softirq_exit(vec);
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(btf_irq_handler_entry, int irq, struct irqaction *action)
{
	on_irq_entry(irq);
	return 0;
}

SEC("raw_tp/irq_handler_entry")
int BPF_PROG(raw_irq_handler_entry, int irq, struct irqaction *action)
{
	on_irq_entry(irq);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(btf_irq_handler_exit, int irq, struct irqaction *action, int ret)
{
	on_irq_exit(irq);
	return 0;
}

SEC("raw_tp/irq_handler_exit")
int BPF_PROG(raw_irq_handler_exit, int irq, struct irqaction *action, int ret)
{
	on_irq_exit(irq);
	return 0;
}

/* x86 system vectors: they do not pass through irq_handler_entry/exit, but softirqs
 * run on their way out too (the timer tick, RPS and call-function IPIs). */
static __always_inline void on_vector_exit(void)
{
	struct cpu_state *s = state();
	if (s)
		s->last_irq_exit = bpf_ktime_get_ns();
}

#define VECTOR_EXIT(tp)                                  \
	SEC("tp_btf/" #tp)                               \
	int BPF_PROG(btf_##tp, int vector)               \
	{                                                \
		on_vector_exit();                        \
		return 0;                                \
	}                                                \
	SEC("raw_tp/" #tp)                               \
	int BPF_PROG(raw_##tp, int vector)               \
	{                                                \
		on_vector_exit();                        \
		return 0;                                \
	}

VECTOR_EXIT(local_timer_exit)
VECTOR_EXIT(call_function_single_exit)
VECTOR_EXIT(call_function_exit)
VECTOR_EXIT(reschedule_exit)
