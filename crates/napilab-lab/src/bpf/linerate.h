/* SPDX-License-Identifier: GPL-2.0 */
/* Shared between linerate.bpf.c and src/linerate.rs (keep the numbers in step). */
#ifndef NAPILAB_LINERATE_H
#define NAPILAB_LINERATE_H

/* Most traffic classes a scenario may send with the line-rate back end. */
#define LR_MAX_CLASSES 16
/* Ethernet + IPv4 (no options) + UDP. */
#define LR_HDR_LEN 42
/* "NLXR", little endian, first word of the UDP payload. */
#define LR_MAGIC 0x52584c4e
/* Payload flag: the frame departed inside the measurement window. */
#define LR_FLAG_MEASURED 1

/* The first bytes of every generated UDP payload. */
struct lr_payload {
	__u32 magic;
	__u32 point;
	__u16 class_id;
	__u16 flags;
};

/* Headers of one class, rewritten into every frame (see lr_gen). */
struct lr_tmpl {
	__u8 hdr[LR_HDR_LEN];
	__u8 pad[6];
};

/* In-kernel pacing of one class (linerate.rs, `Pacing::InKernel`): departures at
 * start_ns + k / rate_pps seconds; a run before the next departure sends nothing. */
struct lr_pace {
	__u64 start_ns;  /* schedule origin, CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 end_ns;    /* no departure at or after this */
	__u64 rate_pps;  /* 0: not paced, every run sends (batch mode) */
	__u64 slack;     /* most departures sent back to back to catch up */
	__u64 sent;      /* frames sent since start_ns */
	__u64 skipped;   /* departures given up: more than `slack` behind */
	__u64 idle_runs; /* runs that found no departure due */
};

struct lr_count {
	__u64 packets;
	__u64 bytes;
};

#endif
