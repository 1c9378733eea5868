//! The preloaded key space both sides agree on: keys `key:0000000000` ..
//! `key:<keys-1>` and a deterministic value of a fixed size for each, so a client can
//! check what a `get` returns without keeping a copy.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keyspace {
    pub keys: u64,
    pub value_size: usize,
}

impl Default for Keyspace {
    /// 100k keys of 32-byte values (the study used 1M keys; ETC values are mostly small).
    fn default() -> Self {
        Keyspace {
            keys: 100_000,
            value_size: 32,
        }
    }
}

/// Bytes of a key: `key:` and 10 digits.
pub const KEY_LEN: usize = 14;

impl Keyspace {
    pub fn key(&self, i: u64) -> [u8; KEY_LEN] {
        let mut k = *b"key:0000000000";
        let mut n = i;
        for b in k[4..].iter_mut().rev() {
            *b = b'0' + (n % 10) as u8;
            n /= 10;
        }
        k
    }

    /// The preloaded value of key `i`: its number repeated in printable bytes.
    pub fn value(&self, i: u64) -> Vec<u8> {
        let seed = self.key(i);
        (0..self.value_size)
            .map(|j| seed[4 + j % (KEY_LEN - 4)])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values() {
        let ks = Keyspace {
            keys: 10,
            value_size: 12,
        };
        assert_eq!(&ks.key(42), b"key:0000000042");
        assert_eq!(ks.value(42), b"000000004200");
        assert_eq!(ks.value(7).len(), 12);
    }
}
