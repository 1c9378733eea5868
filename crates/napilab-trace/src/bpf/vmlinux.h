/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A minimal, hand-written kernel type header for napilab's BPF programs.
 *
 * Why not the full `bpftool btf dump ... format c` output: it is several megabytes per
 * architecture, changes with every kernel, and these programs read a few fields. Every
 * struct here is marked `preserve_access_index`, so clang emits CO-RE relocations and
 * libbpf resolves the real offsets against the running kernel's BTF at load time; the
 * layouts below only need the right field names and types, not the right offsets.
 * The header is architecture-independent for the same reason.
 */
#ifndef __NAPILAB_VMLINUX_H__
#define __NAPILAB_VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

/* A device's network namespace: both tiers record its inode beside the ifindex, since
 * names and ifindexes are per namespace. */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	char name[16];
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int flags;
	int pid;
	char comm[16];
} __attribute__((preserve_access_index));

struct napi_struct {
	struct net_device *dev;
	struct task_struct *thread;
	unsigned int napi_id;
} __attribute__((preserve_access_index));

struct irqaction;

#endif
