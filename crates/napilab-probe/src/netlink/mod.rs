//! Netlink readers (YNL-generated bindings).
