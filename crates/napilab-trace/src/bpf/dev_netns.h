/* SPDX-License-Identifier: GPL-2.0 OR MIT OR Apache-2.0 */
/*
 * The network namespace of a device, as both tiers record it beside the ifindex:
 * names and ifindexes are per namespace, so (namespace inode, ifindex) is what tells
 * the `eth0` of one container from another's. Include after vmlinux.h and
 * bpf_core_read.h.
 */
#ifndef __NAPILAB_DEV_NETNS_H__
#define __NAPILAB_DEV_NETNS_H__

/* The inode of `dev`'s network namespace (the inode of /proc/<pid>/ns/net of a task
 * in it), 0 without a device or on a kernel without CONFIG_NET_NS (there
 * `possible_net_t` has no `net`, and the check below drops the read at load time).
 * `btf` is a compile-time constant: tp_btf programs load fields directly, raw_tp
 * programs through bpf_probe_read_kernel. */
static __always_inline __u32 dev_netns(struct net_device *dev, bool btf)
{
	if (!dev || !bpf_core_field_exists(dev->nd_net.net))
		return 0;
	if (btf) {
		struct net *net = dev->nd_net.net;
		return net ? net->ns.inum : 0;
	}
	return BPF_CORE_READ(dev, nd_net.net, ns.inum);
}

#endif
