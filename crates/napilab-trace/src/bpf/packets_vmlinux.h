/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Kernel types the per-packet tier reads beyond vmlinux.h (which the always-on tier
 * owns). Same rule as vmlinux.h: names and types only, `preserve_access_index` makes
 * every access a CO-RE relocation resolved against the running kernel's BTF. A
 * device's network namespace (`net_device.nd_net`) is in vmlinux.h, which both tiers
 * read.
 */
#ifndef __NAPILAB_PACKETS_VMLINUX_H__
#define __NAPILAB_PACKETS_VMLINUX_H__

/* `dev` and `protocol` sit inside anonymous unions/structs in the kernel; libbpf
 * finds them there by name. */
struct sock;

struct sk_buff {
	/* In an anonymous union in the kernel: CO-RE finds it by name. */
	struct sk_buff *next;
	struct net_device *dev;
	struct sock *sk;
	__be16 protocol;
} __attribute__((preserve_access_index));

struct Qdisc;
struct netdev_queue;

#endif
