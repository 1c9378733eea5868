/* SPDX-License-Identifier: GPL-2.0 OR MIT OR Apache-2.0 */
/*
 * The log2 helper of the BPF programs' histograms: the always-on tier's power-of-two
 * slots (napi_trace.bpf.c) and the per-packet tier's log-linear latency slots
 * (packets.bpf.c). Include after vmlinux.h and bpf_helpers.h.
 */
#ifndef __NAPILAB_LOG2_H__
#define __NAPILAB_LOG2_H__

/* floor(log2(v)), the index of v's top bit (0 for 0 and 1): six compares instead of a
 * loop over the bits. */
static __always_inline __u32 msb64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1)
		r += 1;
	return r;
}

#endif /* __NAPILAB_LOG2_H__ */
