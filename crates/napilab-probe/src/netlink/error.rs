//! Errors of the netlink readers, and the errno classification behind them.
//!
//! The kernel answers a netlink request it cannot serve with an errno in an
//! `NLMSG_ERROR` message. What that errno means depends on where it came from: an
//! `ENOENT` while resolving a generic-netlink family name says "this kernel has no
//! such family" (netdev appeared in 6.5), while the same errno from a routing dump
//! would be a real failure. Callers need the distinction to report "needs a newer
//! kernel" instead of failing obscurely (docs/kernel.md#this-machine).

use std::io;

use netlink_socket2::ReplyError;

/// Why a netlink read failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel lacks the family or operation (too old, or built without it), or the
    /// driver does not implement it. Not a fault: report the feature as absent.
    #[error("{family} netlink: not supported by this kernel or driver ({why})")]
    Unsupported {
        /// The netlink family: "rtnetlink", "netdev" or "ethtool".
        family: &'static str,
        /// What was refused and the kernel's answer, for the user.
        why: String,
    },
    /// The kernel refused the request for lack of privilege.
    #[error("permission denied for {what}: run as root or grant CAP_NET_ADMIN")]
    Permission {
        /// The request that was refused.
        what: String,
    },
    /// Any other failure: socket errors, device gone, malformed exchange.
    #[error("{what}: {source}")]
    Kernel {
        /// The request that failed, with the kernel's extended-ack message if any.
        what: String,
        /// The underlying error; `raw_os_error()` holds the kernel's errno when there
        /// was one.
        #[source]
        source: io::Error,
    },
}

/// Where in a request a failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Opening the socket, sending, or resolving the generic-netlink family id.
    Request,
    /// In the kernel's reply to the operation itself.
    Reply,
}

/// What kind of failure an errno denotes, before context is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    Unsupported,
    Permission,
    Other,
}

/// Classifies a failed request.
///
/// `generic` says the request went to a generic-netlink family. Genetlink answers
/// an unknown family name with ENOENT (from nlctrl), an unknown command with
/// EOPNOTSUPP, and older kernels reject attributes they do not know with EINVAL
/// (strict validation); all three mean "this kernel cannot do it". For rtnetlink
/// only EOPNOTSUPP means that: ENOENT or EINVAL there is a real error.
pub(crate) fn classify(
    generic: bool,
    stage: Stage,
    errno: Option<i32>,
    kind: io::ErrorKind,
) -> ErrorClass {
    match errno {
        Some(libc::EPERM) | Some(libc::EACCES) => ErrorClass::Permission,
        Some(libc::EOPNOTSUPP) => ErrorClass::Unsupported,
        // socket(AF_NETLINK, .., proto) fails this way when the protocol is absent,
        // and setsockopt(NETLINK_EXT_ACK) before Linux 4.12.
        Some(libc::EPROTONOSUPPORT) | Some(libc::EAFNOSUPPORT) | Some(libc::ENOPROTOOPT)
            if stage == Stage::Request =>
        {
            ErrorClass::Unsupported
        }
        Some(libc::ENOENT) | Some(libc::EINVAL) if generic => ErrorClass::Unsupported,
        // netlink-socket2 reports a family reply without an id this way.
        None if kind == io::ErrorKind::Unsupported => ErrorClass::Unsupported,
        _ => ErrorClass::Other,
    }
}

/// A failure as observed, before it is turned into a [`NetlinkError`].
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) stage: Stage,
    pub(crate) errno: Option<i32>,
    pub(crate) kind: io::ErrorKind,
    /// The io error as text.
    pub(crate) text: String,
    /// The kernel's extended-ack message: which attribute or value it disliked.
    pub(crate) ext_ack: Option<String>,
    /// The local call that failed, when it was not the request itself.
    pub(crate) call: Option<&'static str>,
}

impl Failure {
    /// From an error of `NetlinkSocket::request` (socket, send, family resolution).
    pub(crate) fn request(err: &io::Error) -> Self {
        Self {
            stage: Stage::Request,
            errno: err.raw_os_error(),
            kind: err.kind(),
            text: err.to_string(),
            ext_ack: None,
            call: None,
        }
    }

    /// Recovers the errno of a failed socket setup.
    ///
    /// netlink-socket2 0.3.5 reports a failed `socket(2)` or
    /// `setsockopt(NETLINK_EXT_ACK)` as `from_raw_os_error(-ret)`, i.e. always EPERM,
    /// which would read as "run as root". Nothing else yields EPERM before the
    /// request is sent (family resolution needs no privilege), so on EPERM the two
    /// calls are repeated here to learn the real errno.
    pub(crate) fn fix_socket_errno(mut self, protonum: u16) -> Self {
        if self.stage != Stage::Request || self.errno != Some(libc::EPERM) {
            return self;
        }
        match socket_setup_errno(protonum) {
            Some((errno, call)) => {
                let err = io::Error::from_raw_os_error(errno);
                self.errno = Some(errno);
                self.kind = err.kind();
                self.text = err.to_string();
                self.call = Some(call);
            }
            None => {
                // The setup works now (a transient EMFILE?): the errno is lost.
                self.errno = None;
                self.kind = io::ErrorKind::Other;
                self.text = "failed, errno unknown".to_string();
                self.call = Some("opening a netlink socket");
            }
        }
        self
    }

    /// From an error message in the kernel's reply.
    pub(crate) fn reply(err: &ReplyError) -> Self {
        let io = err.as_io_error();
        let ext_ack = err
            .ext_ack()
            .and_then(|a| a.get_msg().ok())
            .map(|m| m.to_string_lossy().into_owned())
            .filter(|m| !m.is_empty());
        Self {
            stage: Stage::Reply,
            errno: io.raw_os_error(),
            kind: io.kind(),
            text: io.to_string(),
            ext_ack,
            call: None,
        }
    }

    /// From a local system call (the ethtool ioctl).
    pub(crate) fn syscall(err: &io::Error) -> Self {
        Self {
            stage: Stage::Reply,
            ..Self::request(err)
        }
    }

    pub(crate) fn class(&self, generic: bool) -> ErrorClass {
        classify(generic, self.stage, self.errno, self.kind)
    }

    /// Builds the public error; `what` names the request ("netdev napi-get dump").
    pub(crate) fn into_error(
        self,
        family: &'static str,
        generic: bool,
        what: &str,
    ) -> NetlinkError {
        let mut what = what.to_string();
        if let Some(call) = self.call {
            what = format!("{what}, in {call}");
        }
        if let Some(ext_ack) = &self.ext_ack {
            what = format!("{what} (kernel: {ext_ack})");
        }
        match self.class(generic) {
            ErrorClass::Unsupported => NetlinkError::Unsupported {
                family,
                why: format!("{what}: {}", self.text),
            },
            ErrorClass::Permission => NetlinkError::Permission { what },
            ErrorClass::Other => NetlinkError::Kernel {
                what,
                source: match self.errno {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::new(self.kind, self.text),
                },
            },
        }
    }
}

/// Repeats netlink-socket2's socket setup; the failing call and its errno, if any.
fn socket_setup_errno(protonum: u16) -> Option<(i32, &'static str)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protonum),
        )
    };
    if fd < 0 {
        return Some((errno(), "socket(AF_NETLINK)"));
    }
    // SAFETY: a fresh descriptor owned by nobody else; closed on drop.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: u32 = 1;
    // SAFETY: valid descriptor, option value pointer and length.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_NETLINK,
            libc::NETLINK_EXT_ACK,
            (&one as *const u32).cast(),
            4,
        )
    };
    if rc < 0 {
        return Some((errno(), "setsockopt(NETLINK_EXT_ACK)"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(generic: bool, stage: Stage, errno: i32) -> ErrorClass {
        classify(generic, stage, Some(errno), io::ErrorKind::Other)
    }

    #[test]
    fn permission_errors_are_permission_everywhere() {
        for generic in [false, true] {
            for stage in [Stage::Request, Stage::Reply] {
                assert_eq!(class(generic, stage, libc::EPERM), ErrorClass::Permission);
                assert_eq!(class(generic, stage, libc::EACCES), ErrorClass::Permission);
            }
        }
    }

    #[test]
    fn eopnotsupp_is_unsupported_for_every_family() {
        assert_eq!(
            class(false, Stage::Reply, libc::EOPNOTSUPP),
            ErrorClass::Unsupported
        );
        assert_eq!(
            class(true, Stage::Reply, libc::EOPNOTSUPP),
            ErrorClass::Unsupported
        );
    }

    #[test]
    fn enoent_and_einval_mean_unsupported_only_for_genetlink() {
        // Unknown family name (nlctrl answers ENOENT) and unknown attribute (EINVAL).
        assert_eq!(
            class(true, Stage::Request, libc::ENOENT),
            ErrorClass::Unsupported
        );
        assert_eq!(
            class(true, Stage::Reply, libc::EINVAL),
            ErrorClass::Unsupported
        );
        // From rtnetlink they are genuine errors.
        assert_eq!(class(false, Stage::Reply, libc::ENOENT), ErrorClass::Other);
        assert_eq!(class(false, Stage::Reply, libc::EINVAL), ErrorClass::Other);
    }

    #[test]
    fn missing_protocol_is_unsupported_only_when_opening() {
        assert_eq!(
            class(false, Stage::Request, libc::EPROTONOSUPPORT),
            ErrorClass::Unsupported
        );
        assert_eq!(
            class(false, Stage::Reply, libc::EPROTONOSUPPORT),
            ErrorClass::Other
        );
    }

    #[test]
    fn socket_eperm_from_netlink_socket2_is_not_a_permission_error() {
        // Protocol 31 (MAX_LINKS - 1) is unassigned, so socket(2) really fails.
        let f = Failure::request(&io::Error::from_raw_os_error(libc::EPERM)).fix_socket_errno(31);
        assert_eq!(f.errno, Some(libc::EPROTONOSUPPORT), "{f:?}");
        assert_eq!(f.class(false), ErrorClass::Unsupported);
        // Rtnetlink opens fine, so the errno is unknown rather than EPERM.
        let f = Failure::request(&io::Error::from_raw_os_error(libc::EPERM)).fix_socket_errno(0);
        assert_eq!(f.class(false), ErrorClass::Other, "{f:?}");
        // EPERM from the kernel's reply is left alone.
        let f = Failure {
            stage: Stage::Reply,
            errno: Some(libc::EPERM),
            kind: io::ErrorKind::PermissionDenied,
            text: String::new(),
            ext_ack: None,
            call: None,
        }
        .fix_socket_errno(0);
        assert_eq!(f.class(false), ErrorClass::Permission);
    }

    #[test]
    fn family_without_id_is_unsupported() {
        assert_eq!(
            classify(true, Stage::Request, None, io::ErrorKind::Unsupported),
            ErrorClass::Unsupported
        );
        assert_eq!(
            classify(true, Stage::Request, None, io::ErrorKind::UnexpectedEof),
            ErrorClass::Other
        );
    }

    #[test]
    fn other_errnos_are_kernel_errors_with_errno_kept() {
        let f = Failure {
            stage: Stage::Reply,
            errno: Some(libc::ENODEV),
            kind: io::ErrorKind::Other,
            text: "No such device".into(),
            ext_ack: Some("no device matches name".into()),
            call: None,
        };
        match f.into_error("ethtool", true, "ethtool channels-get") {
            NetlinkError::Kernel { what, source } => {
                assert_eq!(
                    what,
                    "ethtool channels-get (kernel: no device matches name)"
                );
                assert_eq!(source.raw_os_error(), Some(libc::ENODEV));
            }
            other => panic!("expected Kernel, got {other:?}"),
        }
    }

    #[test]
    fn unsupported_error_names_family_and_request() {
        let f = Failure::request(&io::Error::from_raw_os_error(libc::ENOENT));
        match f.into_error("netdev", true, "netdev napi-get dump") {
            NetlinkError::Unsupported { family, why } => {
                assert_eq!(family, "netdev");
                assert!(why.starts_with("netdev napi-get dump"), "{why}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}
