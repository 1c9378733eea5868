// SPDX-License-Identifier: GPL-2.0
/*
 * napilab's always-on tier (docs/architecture.md principle 2): fires per NAPI poll, per softirq
 * run and per hard IRQ, never per packet, and only adds to per-CPU maps. Every hook
 * exists twice: as `tp_btf` (BTF-typed, cheapest) and as `raw_tp` (for kernels where
 * tp_btf cannot attach); the loader enables one of each pair.
 *
 * Cost (docs/trace.md, "Overhead"): every program does one per-CPU state lookup (a
 * percpu array with a constant key, which the verifier inlines); the NAPI counters are
 * a per-CPU array indexed by a slot found in a 4-entry per-CPU cache (the hash map of
 * slots is touched only on a miss); the task's comm is read only when the running task
 * changes; log2 buckets take six compares. Clock reads are the dearest part left
 * (about 50 ns each on the test VM): two per softirq run and per IRQ, and one per
 * timed raise, with raises timed for at most one run per millisecond per CPU and
 * vector.
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
#include "log2.h"
#include "dev_netns.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_KTHREAD 0x00200000
#define HARDIRQ_GAP_NS 4000
/* The raise of a vector is timed for at most one run per this interval per CPU: a
 * clock read (bpf_ktime_get_ns) costs about 50 ns on the 2-CPU test VM, as much as the
 * rest of a program, and a saturated NET_RX is raised tens of thousands of times per
 * second. Below 1000 runs/s every run is timed; above, the mean latency comes from
 * runs spaced >= 1 ms apart, chosen at the previous run's entry, before their raise
 * happens (so independently of their latency). */
#define RAISE_TIMING_GAP_NS 1000000
/* Per-CPU cache of the last (NAPI instance, context) pairs polled: slot lookups on the
 * hot path are a few compares instead of a hash lookup. */
#define NAPI_CACHE 4

/* Set by the loader before load. */
const volatile __u64 netdev_budget = 300;
const volatile __u64 netdev_budget_ns = 2000000;

/* Read by the loader through the memory-mapped .bss: which IRQ numbers below
 * NT_IRQ_ARRAY have counters (set once per IRQ, so the cache line is only read after),
 * and what could not be counted. */
__u8 irq_seen[NT_IRQ_ARRAY];
__u64 napi_lost_polls; /* polls of pairs that found no free slot */
__u64 irq_lost;        /* IRQ runs that found no room in irq_stats_high */

struct napi_cache_ent {
	__u64 napi; /* struct napi_struct * */
	__u64 dev;  /* struct net_device * */
	__u32 napi_id;
	__u32 ctx;
	__u32 slot;
	__u32 pad;
};

/* Hot fields first: a softirq run and the polls in it touch the first cache line, the
 * first cache entries and one slot of each per-vector array. */
struct cpu_state {
	__u64 softirq_start;
	__u64 net_rx_packets;
	__u64 run_raise_lat; /* raise-to-entry of the running softirq, if run_raise_timed */
	__u32 softirq_vec;   /* vec + 1 while a softirq runs, else 0 */
	__u32 softirq_ctx;
	__u32 run_raise_timed;
	__u32 timed_raise_mask; /* vectors whose next first raise is timed */
	__u32 raised_mask;      /* vectors raised since their last run started */
	/* The last task classified on this CPU (a flood hits the same task again and
	 * again): its pid and whether it is ksoftirqd or a NAPI kthread. Saves reading the
	 * comm on every event. */
	__u32 cached_pid;
	__u32 cached_kind; /* 0 other, 1 ksoftirqd, 2 napi kthread */
	__u32 napi_slots_used;
	__u32 cache_next;
	__u32 pad;
	__u64 irq_start;
	__u64 last_irq_exit;
	struct napi_cache_ent cache[NAPI_CACHE];
	__u64 raise_ts[NT_NR_SOFTIRQS];
	__u64 next_timed_raise[NT_NR_SOFTIRQS];
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

/* (NAPI instance, context, CPU) -> slot; only touched when a CPU polls a pair for the
 * first time (or after it fell out of the cache). max_entries is set by the loader to
 * NT_NAPI_SLOTS per possible CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NT_NAPI_SLOTS);
	__type(key, struct nt_napi_key);
	__type(value, struct nt_napi_slot);
} napi_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_NAPI_SLOTS);
	__type(key, __u32);
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
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_IRQ_ARRAY);
	__type(key, __u32);
	__type(value, struct nt_irq_val);
} irq_stats SEC(".maps");

/* IRQ numbers >= NT_IRQ_ARRAY (large MSI-X setups). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, struct nt_irq_val);
} irq_stats_high SEC(".maps");

/* A percpu-array lookup with a constant key: the verifier inlines it to a few loads. */
static __always_inline struct cpu_state *state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpu_states, &zero);
}

/* floor(log2(v)) (0 for 0 and 1), at most NT_LOG2_SLOTS - 1. */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 r = msb64(v);

	return r > NT_LOG2_SLOTS - 1 ? NT_LOG2_SLOTS - 1 : r;
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

/* The running task's pid. tp_btf: a BTF-typed load from bpf_get_current_task_btf(),
 * which recent x86-64 JITs inline to one per-CPU load (bpf_get_current_pid_tgid stays a
 * helper call); raw_tp: the helper. `btf` is a compile-time constant. */
static __always_inline __u32 current_pid(bool btf)
{
	if (btf)
		return bpf_get_current_task_btf()->pid;
	return (__u32)bpf_get_current_pid_tgid();
}

static __always_inline __u32 softirq_context(struct cpu_state *s, __u64 now, bool btf)
{
	__u32 pid = current_pid(btf);

	if (pid == 0)
		return NT_CTX_HARDIRQ;
	if (task_kind(s, pid) == KIND_KSOFTIRQD)
		return NT_CTX_KSOFTIRQD;
	if (s->last_irq_exit && now - s->last_irq_exit < HARDIRQ_GAP_NS)
		return NT_CTX_HARDIRQ;
	return NT_CTX_BH_ENABLE;
}

/* Only the first raise since the vector's last run matters, and only it may read the
 * clock (when the vector is armed, see RAISE_TIMING_GAP_NS). */
static __always_inline void on_softirq_raise(unsigned int vec)
{
	struct cpu_state *s = state();
	if (!s || vec >= NT_NR_SOFTIRQS)
		return;
	__u32 bit = 1U << vec;
	if (s->raised_mask & bit)
		return;
	s->raised_mask |= bit;
	if (s->timed_raise_mask & bit)
		s->raise_ts[vec] = bpf_ktime_get_ns();
}

static __always_inline void on_softirq_entry(unsigned int vec, bool btf)
{
	struct cpu_state *s = state();
	if (!s || vec >= NT_NR_SOFTIRQS)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u32 ctx = softirq_context(s, now, btf);
	__u32 bit = 1U << vec;
	s->softirq_start = now;
	s->softirq_vec = vec + 1;
	s->softirq_ctx = ctx;
	s->net_rx_packets = 0;
	s->raised_mask &= ~bit;
	__u64 raised = s->raise_ts[vec];
	s->raise_ts[vec] = 0;
	s->run_raise_timed = raised && raised <= now;
	if (s->run_raise_timed)
		s->run_raise_lat = now - raised;
	/* Arm (or not) the timing of the raise of this vector's next run. */
	if (now >= s->next_timed_raise[vec]) {
		s->timed_raise_mask |= bit;
		s->next_timed_raise[vec] = now + RAISE_TIMING_GAP_NS;
	} else {
		s->timed_raise_mask &= ~bit;
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
		v->log2_ns[log2_slot(dur)]++;
		if (s->run_raise_timed) {
			v->raise_lat_ns += s->run_raise_lat;
			v->raise_lat_count++;
		}
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
	r->log2_packets[log2_slot(pkts)]++;
}

/* The slot of (napi, ctx) on this CPU, allocating one on first use; NT_NAPI_SLOTS when
 * none is free. The slow path of on_napi_poll. */
static __always_inline __u32 napi_slot(struct cpu_state *s, struct napi_struct *napi,
				       struct net_device *dev, __u32 napi_id, __u32 ctx,
				       bool btf)
{
	struct nt_napi_key key = {};
	key.napi_id = napi_id;
	key.ctx = ctx;
	key.cpu = bpf_get_smp_processor_id();
	__u32 ifindex = 0;
	if (dev)
		ifindex = btf ? dev->ifindex : BPF_CORE_READ(dev, ifindex);
	__u32 netns = dev_netns(dev, btf);
	if (!napi_id) {
		key.ifindex = ifindex;
		key.netns = netns;
	}
	struct nt_napi_slot *e = bpf_map_lookup_elem(&napi_slots, &key);
	if (e)
		return e->slot;
	if (s->napi_slots_used >= NT_NAPI_SLOTS)
		return NT_NAPI_SLOTS;
	struct nt_napi_slot n = {};
	n.slot = s->napi_slots_used;
	n.ifindex = ifindex;
	n.netns = netns;
	if (dev)
		BPF_CORE_READ_STR_INTO(&n.dev, napi, dev, name);
	if (bpf_map_update_elem(&napi_slots, &key, &n, BPF_NOEXIST))
		return NT_NAPI_SLOTS;
	s->napi_slots_used++;
	return n.slot;
}

/* `btf` is a compile-time constant: tp_btf programs read the napi's fields with direct
 * BTF-typed loads, raw_tp programs need bpf_probe_read_kernel (BPF_CORE_READ). */
static __always_inline void on_napi_poll(struct napi_struct *napi, int work, int budget,
					 bool btf)
{
	struct cpu_state *s = state();
	if (!s)
		return;
	__u32 ctx;
	if (s->softirq_vec == NT_NET_RX_SOFTIRQ + 1) {
		ctx = s->softirq_ctx;
		if (work > 0)
			s->net_rx_packets += work;
	} else {
		__u32 pid = current_pid(btf);
		ctx = task_kind(s, pid) == KIND_NAPI_THREAD ? NT_CTX_NAPI_THREAD
							     : NT_CTX_BUSY_POLL;
	}
	__u32 napi_id = btf ? napi->napi_id : BPF_CORE_READ(napi, napi_id);
	struct net_device *dev = btf ? napi->dev : BPF_CORE_READ(napi, dev);
	/* The napi and dev pointers are compared, never dereferenced, from the cache; the
	 * id check catches a freed instance whose memory was reused. */
	__u64 napi_addr = (__u64)(unsigned long)napi;
	__u64 dev_addr = (__u64)(unsigned long)dev;
	__u32 slot = NT_NAPI_SLOTS;
#pragma unroll
	for (int i = 0; i < NAPI_CACHE; i++) {
		struct napi_cache_ent *c = &s->cache[i];
		if (c->napi == napi_addr && c->dev == dev_addr && c->napi_id == napi_id &&
		    c->ctx == ctx) {
			slot = c->slot;
			break;
		}
	}
	if (slot >= NT_NAPI_SLOTS) {
		slot = napi_slot(s, napi, dev, napi_id, ctx, btf);
		if (slot >= NT_NAPI_SLOTS) {
			__sync_fetch_and_add(&napi_lost_polls, 1);
			return;
		}
		__u32 i = s->cache_next++ % NAPI_CACHE;
		struct napi_cache_ent *c = &s->cache[i];
		c->napi = napi_addr;
		c->dev = dev_addr;
		c->napi_id = napi_id;
		c->ctx = ctx;
		c->slot = slot;
	}
	struct nt_napi_val *v = bpf_map_lookup_elem(&napi_stats, &slot);
	if (!v)
		return;
	v->polls++;
	if (work > 0)
		v->packets += work;
	if (work >= budget)
		v->full_budget++;
	__u32 w = work < 0 ? 0 : (work > NT_MAX_WORK ? NT_MAX_WORK : work);
	if (w <= NT_MAX_WORK)
		v->work_hist[w]++;
	/* Busy polling: the application's name, read again only when another task polls
	 * this slot (task_kind above cached this task's pid). */
	if (ctx == NT_CTX_BUSY_POLL && v->comm_pid != s->cached_pid) {
		v->comm_pid = s->cached_pid;
		bpf_get_current_comm(v->comm, sizeof(v->comm));
	}
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
	if (!s || !s->irq_start || irq < 0)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 dur = now - s->irq_start;
	s->irq_start = 0;
	s->last_irq_exit = now;
	__u32 key = irq;
	struct nt_irq_val *v;
	if (key < NT_IRQ_ARRAY) {
		/* The mask (NT_IRQ_ARRAY is a power of two) is for the verifier: clang
		 * reloads key from the stack after the call, unbounded. */
		__u32 i = key & (NT_IRQ_ARRAY - 1);
		v = bpf_map_lookup_elem(&irq_stats, &key);
		if (!irq_seen[i])
			irq_seen[i] = 1;
	} else {
		v = bpf_map_lookup_elem(&irq_stats_high, &key);
		if (!v) {
			struct nt_irq_val zero = {};
			bpf_map_update_elem(&irq_stats_high, &key, &zero, BPF_NOEXIST);
			v = bpf_map_lookup_elem(&irq_stats_high, &key);
		}
	}
	if (!v) {
		__sync_fetch_and_add(&irq_lost, 1);
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
	on_softirq_entry(vec, true);
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(raw_softirq_entry, unsigned int vec)
{
	on_softirq_entry(vec, false);
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
