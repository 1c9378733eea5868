//! The memcached text protocol subset that load generators use: `get`, `set`,
//! `delete` and their replies (memcached's doc/protocol.txt). Parsing never allocates
//! and never panics: a request or reply borrows from the read buffer, and a buffer that
//! does not yet hold a whole message reads as `Ok(None)` so the caller reads more.

use std::fmt;

/// Longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;
/// Longest command line (before a data block) either side accepts; longer is an error,
/// so a peer that never sends `\r\n` cannot grow a buffer without bound.
pub const MAX_LINE_LEN: usize = 2048;
/// Largest value either side accepts (memcached's default item size limit).
pub const MAX_VALUE_LEN: usize = 1 << 20;
/// Most keys in one `get`.
pub const MAX_GET_KEYS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get <key>*` (`gets` is not supported).
    Get { keys: Keys<'a> },
    /// `set <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n`.
    Set {
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        data: &'a [u8],
        noreply: bool,
    },
    /// `delete <key> [noreply]`.
    Delete { key: &'a [u8], noreply: bool },
}

/// The keys of a `get`, as the byte range of the line that holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a>(&'a [u8]);

impl<'a> Keys<'a> {
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> {
        self.0.split(|&b| b == b' ').filter(|k| !k.is_empty())
    }
}

/// A reply to one request, as a client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response<'a> {
    /// `VALUE <key> <flags> <bytes>\r\n<data>\r\n` ... `END`: the values found (only
    /// the first is kept; the load generator asks for one key per `get`), and how many.
    Values {
        first: Option<Value<'a>>,
        count: usize,
    },
    Stored,
    NotStored,
    Deleted,
    NotFound,
    /// `ERROR`, `CLIENT_ERROR <msg>` or `SERVER_ERROR <msg>`.
    Error(&'a [u8]),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value<'a> {
    pub key: &'a [u8],
    pub flags: u32,
    pub data: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// A line longer than [`MAX_LINE_LEN`] without `\r\n`.
    LineTooLong,
    UnknownCommand(String),
    /// A well-known command with a bad argument; the message names it.
    Bad(String),
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::LineTooLong => {
                write!(f, "line longer than {MAX_LINE_LEN} bytes without CRLF")
            }
            ProtocolError::UnknownCommand(c) => write!(f, "unknown command {c:?}"),
            ProtocolError::Bad(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ProtocolError {}

fn bad(m: impl Into<String>) -> ProtocolError {
    ProtocolError::Bad(m.into())
}

/// The first line of `buf` without its `\r\n`, and the bytes up to and including it.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let limit = buf.len().min(MAX_LINE_LEN + 2);
    match buf[..limit].windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&buf[..i], i + 2))),
        None if buf.len() > MAX_LINE_LEN + 1 => Err(ProtocolError::LineTooLong),
        None => Ok(None),
    }
}

fn num<T: std::str::FromStr>(field: &str, tok: Option<&[u8]>) -> Result<T, ProtocolError> {
    let tok = tok.ok_or_else(|| bad(format!("missing <{field}>")))?;
    std::str::from_utf8(tok)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            bad(format!(
                "<{field}> is not a number: {:?}",
                String::from_utf8_lossy(tok)
            ))
        })
}

fn key(tok: Option<&[u8]>) -> Result<&[u8], ProtocolError> {
    let k = tok.ok_or_else(|| bad("missing <key>"))?;
    if k.len() > MAX_KEY_LEN {
        return Err(bad(format!("key longer than {MAX_KEY_LEN} bytes")));
    }
    if k.iter().any(|b| b.is_ascii_control()) {
        return Err(bad("key holds a control character"));
    }
    Ok(k)
}

fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|t| !t.is_empty())
}

/// The data block of `bytes` bytes after a header of `head` bytes, followed by `\r\n`:
/// its slice and the total consumed, or None when it has not all arrived.
fn data_block(
    buf: &[u8],
    head: usize,
    bytes: usize,
) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    if bytes > MAX_VALUE_LEN {
        return Err(bad(format!(
            "<bytes> {bytes} above the {MAX_VALUE_LEN}-byte limit"
        )));
    }
    let end = head + bytes;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(bad("data block not terminated by CRLF after <bytes> bytes"));
    }
    Ok(Some((&buf[head..end], end + 2)))
}

/// Parses the first request in `buf`: the request and the bytes it took, `Ok(None)`
/// when more bytes are needed. After an error the connection cannot be resynchronised
/// reliably (a `set`'s data may follow), so servers answer and close.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, ProtocolError> {
    let Some((l, head)) = line(buf)? else {
        return Ok(None);
    };
    let mut t = tokens(l);
    let cmd = t.next().unwrap_or_default();
    match cmd {
        b"get" => {
            let rest = l.get(4..).unwrap_or_default();
            let keys = Keys(rest);
            let mut n = 0;
            for k in keys.iter() {
                key(Some(k))?;
                n += 1;
            }
            if n == 0 {
                return Err(bad("get without a key"));
            }
            if n > MAX_GET_KEYS {
                return Err(bad(format!("get with more than {MAX_GET_KEYS} keys")));
            }
            Ok(Some((Request::Get { keys }, head)))
        }
        b"set" => {
            let k = key(t.next())?;
            let flags = num::<u32>("flags", t.next())?;
            let exptime = num::<i64>("exptime", t.next())?;
            let bytes = num::<usize>("bytes", t.next())?;
            let noreply = match t.next() {
                None => false,
                Some(b"noreply") => true,
                Some(o) => {
                    return Err(bad(format!(
                        "unexpected {:?} after <bytes>",
                        String::from_utf8_lossy(o)
                    )))
                }
            };
            let Some((data, used)) = data_block(buf, head, bytes)? else {
                return Ok(None);
            };
            Ok(Some((
                Request::Set {
                    key: k,
                    flags,
                    exptime,
                    data,
                    noreply,
                },
                used,
            )))
        }
        b"delete" => {
            let k = key(t.next())?;
            let noreply = match t.next() {
                None => false,
                Some(b"noreply") => true,
                // memcached still accepts a legacy `0` time argument.
                Some(b"0") => matches!(t.next(), Some(b"noreply")),
                Some(o) => {
                    return Err(bad(format!(
                        "unexpected {:?} after <key>",
                        String::from_utf8_lossy(o)
                    )))
                }
            };
            Ok(Some((Request::Delete { key: k, noreply }, head)))
        }
        other => Err(ProtocolError::UnknownCommand(
            String::from_utf8_lossy(&other[..other.len().min(32)]).into_owned(),
        )),
    }
}

/// Parses the first whole reply in `buf` (a `get`'s reply runs up to its `END`).
pub fn parse_response(buf: &[u8]) -> Result<Option<(Response<'_>, usize)>, ProtocolError> {
    let mut at = 0;
    let mut first = None;
    let mut count = 0;
    loop {
        let Some((l, used)) = line(&buf[at..])? else {
            return Ok(None);
        };
        let head = at + used;
        let simple = |r| Ok(Some((r, head)));
        if count == 0 {
            match l {
                b"STORED" => return simple(Response::Stored),
                b"NOT_STORED" => return simple(Response::NotStored),
                b"DELETED" => return simple(Response::Deleted),
                b"NOT_FOUND" => return simple(Response::NotFound),
                b"ERROR" => return simple(Response::Error(l)),
                _ if l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"SERVER_ERROR") => {
                    return simple(Response::Error(l))
                }
                _ => {}
            }
        }
        if l == b"END" {
            return Ok(Some((Response::Values { first, count }, head)));
        }
        let mut t = tokens(l);
        if t.next() != Some(b"VALUE") {
            return Err(bad(format!(
                "unexpected reply line {:?}",
                String::from_utf8_lossy(&l[..l.len().min(64)])
            )));
        }
        let k = key(t.next())?;
        let flags = num::<u32>("flags", t.next())?;
        let bytes = num::<usize>("bytes", t.next())?;
        let Some((data, next)) = data_block(buf, head, bytes)? else {
            return Ok(None);
        };
        if first.is_none() {
            first = Some(Value {
                key: k,
                flags,
                data,
            });
        }
        count += 1;
        if count > MAX_GET_KEYS {
            return Err(bad(format!("more than {MAX_GET_KEYS} values in one reply")));
        }
        at = next;
    }
}

/// Appends a `get` for one key.
pub fn write_get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"get ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// Appends a `set` (flags 0, no expiry).
pub fn write_set(out: &mut Vec<u8>, key: &[u8], data: &[u8]) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    out.extend_from_slice(format!(" 0 0 {}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends a `delete`.
pub fn write_delete(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"delete ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// Appends one `VALUE` line and its data (the server side of a `get` hit).
pub fn write_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8]) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.extend_from_slice(format!(" {flags} {}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &[u8]) -> Request<'_> {
        match parse_request(s) {
            Ok(Some((r, n))) => {
                assert_eq!(n, s.len(), "consumed");
                r
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(s)),
        }
    }

    #[test]
    fn requests() {
        match req(b"get key:1 key:2\r\n") {
            Request::Get { keys } => {
                assert_eq!(
                    keys.iter().collect::<Vec<_>>(),
                    vec![&b"key:1"[..], b"key:2"]
                )
            }
            r => panic!("{r:?}"),
        }
        assert_eq!(
            req(b"set k 5 0 3\r\nabc\r\n"),
            Request::Set {
                key: b"k",
                flags: 5,
                exptime: 0,
                data: b"abc",
                noreply: false
            }
        );
        assert_eq!(
            req(b"set k 0 -1 0 noreply\r\n\r\n"),
            Request::Set {
                key: b"k",
                flags: 0,
                exptime: -1,
                data: b"",
                noreply: true
            }
        );
        assert_eq!(
            req(b"delete k\r\n"),
            Request::Delete {
                key: b"k",
                noreply: false
            }
        );
        assert_eq!(
            req(b"delete k noreply\r\n"),
            Request::Delete {
                key: b"k",
                noreply: true
            }
        );
        assert_eq!(
            req(b"delete k 0 noreply\r\n"),
            Request::Delete {
                key: b"k",
                noreply: true
            }
        );
    }

    #[test]
    fn pipelined_requests_are_taken_one_at_a_time() {
        let buf = b"get a\r\nset b 0 0 2\r\nxy\r\ndelete c\r\n";
        let mut at = 0;
        let mut kinds = Vec::new();
        while let Some((r, n)) = parse_request(&buf[at..]).expect("valid") {
            kinds.push(match r {
                Request::Get { .. } => "get",
                Request::Set { .. } => "set",
                Request::Delete { .. } => "delete",
            });
            at += n;
        }
        assert_eq!(kinds, ["get", "set", "delete"]);
        assert_eq!(at, buf.len());
    }

    #[test]
    fn partial_requests_wait_for_more() {
        let whole = b"set k 0 0 5\r\nhello\r\n";
        for cut in 0..whole.len() {
            assert_eq!(parse_request(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse_request(b"get k"), Ok(None));
    }

    #[test]
    fn bad_requests_name_what_is_wrong() {
        let err = |s: &[u8]| parse_request(s).expect_err("must fail").to_string();
        assert!(err(b"set k x 0 1\r\na\r\n").contains("<flags>"));
        assert!(err(b"set k 0 0\r\n").contains("missing <bytes>"));
        assert!(err(b"set k 0 0 1\r\nab\r\n").contains("not terminated"));
        assert!(err(b"set k 0 0 99999999\r\n").contains("limit"));
        assert!(err(b"get\r\n").contains("without a key"));
        assert!(err(b"flush_all\r\n").contains("unknown command"));
        assert!(err(b"delete k later\r\n").contains("unexpected"));
        let long_key = format!("get {}\r\n", "k".repeat(MAX_KEY_LEN + 1));
        assert!(err(long_key.as_bytes()).contains("key longer"));
        let no_crlf = vec![b'a'; MAX_LINE_LEN + 2];
        assert_eq!(parse_request(&no_crlf), Err(ProtocolError::LineTooLong));
    }

    #[test]
    fn responses() {
        let r = |s: &'static [u8]| parse_response(s).expect("valid").expect("whole").0;
        assert_eq!(r(b"STORED\r\n"), Response::Stored);
        assert_eq!(r(b"NOT_FOUND\r\n"), Response::NotFound);
        assert_eq!(r(b"DELETED\r\n"), Response::Deleted);
        assert_eq!(
            r(b"END\r\n"),
            Response::Values {
                first: None,
                count: 0
            }
        );
        assert_eq!(
            r(b"VALUE k 7 3\r\nabc\r\nEND\r\n"),
            Response::Values {
                first: Some(Value {
                    key: b"k",
                    flags: 7,
                    data: b"abc"
                }),
                count: 1
            }
        );
        assert_eq!(
            r(b"SERVER_ERROR out of memory\r\n"),
            Response::Error(b"SERVER_ERROR out of memory")
        );
        // A value that holds "END\r\n" is data, not the end of the reply.
        let tricky = b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\n";
        let (v, n) = parse_response(tricky).expect("valid").expect("whole");
        assert_eq!(n, tricky.len());
        assert!(matches!(v, Response::Values { count: 1, .. }));
        let whole = b"VALUE k 0 3\r\nabc\r\nEND\r\n";
        for cut in 0..whole.len() {
            assert_eq!(parse_response(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(parse_response(b"HELLO\r\n").is_err());
    }

    #[test]
    fn writers_round_trip_through_the_parsers() {
        let mut b = Vec::new();
        write_set(&mut b, b"key:1", b"value");
        write_get(&mut b, b"key:1");
        write_delete(&mut b, b"key:1");
        let (r, n) = parse_request(&b).expect("valid").expect("whole");
        assert!(matches!(r, Request::Set { data: b"value", .. }));
        let (r, m) = parse_request(&b[n..]).expect("valid").expect("whole");
        assert!(matches!(r, Request::Get { .. }));
        let (r, _) = parse_request(&b[n + m..]).expect("valid").expect("whole");
        assert_eq!(
            r,
            Request::Delete {
                key: b"key:1",
                noreply: false
            }
        );
        let mut v = Vec::new();
        write_value(&mut v, b"key:1", 3, b"xyz");
        v.extend_from_slice(b"END\r\n");
        let (r, _) = parse_response(&v).expect("valid").expect("whole");
        assert_eq!(
            r,
            Response::Values {
                first: Some(Value {
                    key: b"key:1",
                    flags: 3,
                    data: b"xyz"
                }),
                count: 1
            }
        );
    }

    /// The fuzz target's property (fuzz/fuzz_targets/kv_protocol.rs) on mutations of
    /// valid traffic, so it is checked on every `cargo test`, not only under the fuzzer.
    #[test]
    fn mutated_input_never_panics_and_messages_are_prefixes() {
        let seeds: [&[u8]; 3] = [
            b"set key:1 0 0 5\r\nhello\r\nget key:1 key:2\r\ndelete key:2 noreply\r\n",
            b"VALUE key:1 0 5\r\nhello\r\nEND\r\nSTORED\r\nNOT_FOUND\r\nDELETED\r\n",
            b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\nSERVER_ERROR oom\r\nget a\r\n",
        ];
        let mut x: u64 = 0x1234_5678;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let mut buf = seeds[round % seeds.len()].to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % buf.len() as u64) as usize;
                match next() % 3 {
                    0 => buf[at] = next() as u8,
                    1 => buf.insert(at, b"0123456789 \r\n"[(next() % 13) as usize]),
                    _ => {
                        buf.remove(at);
                    }
                }
                if buf.is_empty() {
                    break;
                }
            }
            let mut at = 0;
            while let Ok(Some((r, used))) = parse_request(&buf[at..]) {
                assert!(used > 0 && at + used <= buf.len());
                assert_eq!(parse_request(&buf[at..at + used]), Ok(Some((r, used))));
                at += used;
            }
            let mut at = 0;
            while let Ok(Some((r, used))) = parse_response(&buf[at..]) {
                assert!(used > 0 && at + used <= buf.len());
                assert_eq!(parse_response(&buf[at..at + used]), Ok(Some((r, used))));
                at += used;
            }
        }
    }
}
