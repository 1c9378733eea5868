/* SPDX-License-Identifier: GPL-2.0 OR MIT OR Apache-2.0 */
/* Map layout shared by stage_profile.bpf.c and src/stages.rs. */
#ifndef __STAGE_PROFILE_H__
#define __STAGE_PROFILE_H__

#define SP_MAX_DEPTH 127

struct sp_key {
	__s32 kernel_stack; /* stack map id, negative when the sample was in user mode */
	__u32 cpu;
};

#endif
