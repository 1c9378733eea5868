/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Kernel types the per-packet tier reads beyond vmlinux.h (which the always-on tier
 * owns). Same rule as vmlinux.h: names and types only, `preserve_access_index` makes
 * every access a CO-RE relocation resolved against the running kernel's BTF. The
 * `___pk` flavour suffix lets this file add fields to `net_device` without redefining
 * vmlinux.h's struct: libbpf ignores the suffix when matching types.
 */
#ifndef __NAPILAB_PACKETS_VMLINUX_H__
#define __NAPILAB_PACKETS_VMLINUX_H__

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device___pk {
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

/* `dev` and `protocol` sit inside anonymous unions/structs in the kernel; libbpf
 * finds them there by name. */
struct sock;

struct sk_buff {
	struct net_device *dev;
	struct sock *sk;
	__be16 protocol;
} __attribute__((preserve_access_index));

struct Qdisc;
struct netdev_queue;

#endif
