//! Errors of the netlink readers, and the errno classification behind them.
//!
//! The kernel answers a netlink request it cannot serve with an errno in an
//! `NLMSG_ERROR` message. What that errno means depends on where it came from: an
//! `ENOENT` while resolving a generic-netlink family name says "this kernel has no
//! such family" (netdev appeared in 6.5), while the same errno from a routing dump
//! would be a real failure. Callers need the distinction to report "needs a newer
//! kernel" instead of failing obscurely (domain.md section 6).

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
        // socket(AF_NETLINK, .., proto) fails this way when the protocol is absent.
        Some(libc::EPROTONOSUPPORT) | Some(libc::EAFNOSUPPORT) if stage == Stage::Request => {
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
    /// Human text: the io error, plus the kernel's extended-ack message if any.
    pub(crate) text: String,
}

impl Failure {
    /// From an error of `NetlinkSocket::request` (socket, send, family resolution).
    pub(crate) fn request(err: &io::Error) -> Self {
        Self {
            stage: Stage::Request,
            errno: err.raw_os_error(),
            kind: err.kind(),
            text: err.to_string(),
        }
    }

    /// From an error message in the kernel's reply.
    pub(crate) fn reply(err: &ReplyError) -> Self {
        let io = err.as_io_error();
        let mut text = io.to_string();
        // The extended ack says which attribute or value the kernel disliked; keep it.
        if let Some(msg) = err.ext_ack().and_then(|a| a.get_msg().ok()) {
            let msg = msg.to_string_lossy();
            if !msg.is_empty() {
                text.push_str(": ");
                text.push_str(&msg);
            }
        }
        Self {
            stage: Stage::Reply,
            errno: io.raw_os_error(),
            kind: io.kind(),
            text,
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
    pub(crate) fn into_error(self, family: &'static str, generic: bool, what: &str) -> NetlinkError {
        match self.class(generic) {
            ErrorClass::Unsupported => NetlinkError::Unsupported {
                family,
                why: format!("{what}: {}", self.text),
            },
            ErrorClass::Permission => NetlinkError::Permission {
                what: what.to_string(),
            },
            ErrorClass::Other => NetlinkError::Kernel {
                what: format!("{what} ({})", self.text),
                source: match self.errno {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::new(self.kind, self.text),
                },
            },
        }
    }
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
        };
        match f.into_error("ethtool", true, "ethtool channels-get") {
            NetlinkError::Kernel { what, source } => {
                assert!(what.contains("ethtool channels-get"), "{what}");
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
