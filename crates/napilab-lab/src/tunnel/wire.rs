//! The tunnel's datagram format and the inner packets it carries.
//!
//! Shaped after WireGuard's transport-data message (docs/studies.md#wireguard-study):
//! a 16-byte header (type, receiver index, 64-bit counter) followed by the inner IPv4
//! packet sealed with ChaCha20-Poly1305 and its 16-byte tag; the nonce is the counter,
//! as in WireGuard. It is not WireGuard's protocol: there is no handshake, each peer's
//! key is derived from a key seed both ends are given, and counters are not checked
//! for replay. The lab needs the per-packet work (an AEAD open per datagram, then a
//! write into the peer's queue), not the key exchange.

use std::net::Ipv4Addr;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce, Tag};

use crate::checksum::internet_checksum;

/// Message type in byte 0 (WireGuard's transport-data type).
pub const MESSAGE_DATA: u8 = 4;
/// Bytes before the ciphertext.
pub const HEADER_LEN: usize = 16;
/// Poly1305 tag after the ciphertext.
pub const TAG_LEN: usize = 16;
/// IPv4 (20) + UDP (8) headers of the inner packet.
pub const INNER_HEADERS: usize = 28;

/// Why a datagram was not decrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Too short or not a data message.
    Malformed,
    /// Its receiver index names no peer of this endpoint.
    UnknownPeer,
    /// The tag did not verify (corrupted or sealed with another key).
    BadCiphertext,
}

/// A peer's cipher (ChaCha20-Poly1305 with the peer's key).
pub struct PeerCipher {
    aead: ChaCha20Poly1305,
}

/// The key of peer `peer`: the seed with the peer's index mixed into its first bytes,
/// so every peer has its own key and both ends agree without a handshake.
pub fn peer_key(seed: &[u8; 32], peer: u32) -> [u8; 32] {
    let mut k = *seed;
    for (b, p) in k.iter_mut().zip(peer.to_le_bytes()) {
        *b ^= p;
    }
    k[31] ^= 0xa5;
    k
}

fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::from(n)
}

impl PeerCipher {
    pub fn new(seed: &[u8; 32], peer: u32) -> PeerCipher {
        let key = peer_key(seed, peer);
        PeerCipher {
            aead: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// Seals `inner` into `out` (cleared first): header, ciphertext, tag.
    pub fn seal(&self, peer: u32, counter: u64, inner: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.push(MESSAGE_DATA);
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&peer.to_le_bytes());
        out.extend_from_slice(&counter.to_le_bytes());
        out.extend_from_slice(inner);
        let body = &mut out[HEADER_LEN..];
        // Encryption fails only for messages longer than ChaCha20's 256 GiB limit.
        match self
            .aead
            .encrypt_in_place_detached(&nonce(counter), &[], body)
        {
            Ok(tag) => out.extend_from_slice(&tag),
            Err(_) => out.truncate(HEADER_LEN),
        }
    }

    /// Opens a datagram in place; on success the inner packet is `dgram[HEADER_LEN..
    /// len - TAG_LEN]`.
    pub fn open(&self, dgram: &mut [u8]) -> Result<(), OpenError> {
        let (counter, _) = header(dgram)?;
        let len = dgram.len();
        let tag = Tag::clone_from_slice(&dgram[len - TAG_LEN..]);
        self.aead
            .decrypt_in_place_detached(
                &nonce(counter),
                &[],
                &mut dgram[HEADER_LEN..len - TAG_LEN],
                &tag,
            )
            .map_err(|_| OpenError::BadCiphertext)
    }
}

/// The receiver index (peer) of a datagram, read before choosing its cipher.
pub fn receiver_index(dgram: &[u8]) -> Result<u32, OpenError> {
    header(dgram).map(|(_, peer)| peer)
}

fn header(dgram: &[u8]) -> Result<(u64, u32), OpenError> {
    if dgram.len() < HEADER_LEN + TAG_LEN || dgram[0] != MESSAGE_DATA {
        return Err(OpenError::Malformed);
    }
    let peer = u32::from_le_bytes([dgram[4], dgram[5], dgram[6], dgram[7]]);
    let mut c = [0u8; 8];
    c.copy_from_slice(&dgram[8..16]);
    Ok((u64::from_le_bytes(c), peer))
}

/// Builds an IPv4/UDP packet `src:sport -> dst:dport` with `payload_len` bytes of
/// payload (the counter in its first 8 bytes), IP header checksum set, UDP checksum 0
/// (allowed for IPv4: the AEAD tag already protects the bytes).
pub fn inner_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload_len: usize,
    counter: u64,
    out: &mut Vec<u8>,
) {
    let total = INNER_HEADERS + payload_len.max(8);
    out.clear();
    out.resize(total, 0);
    let total16 = u16::try_from(total).unwrap_or(u16::MAX);
    out[0] = 0x45;
    out[2..4].copy_from_slice(&total16.to_be_bytes());
    out[6] = 0x40; // don't fragment
    out[8] = 64; // TTL
    out[9] = 17; // UDP
    out[12..16].copy_from_slice(&src.octets());
    out[16..20].copy_from_slice(&dst.octets());
    let csum = internet_checksum(&out[..20]);
    out[10..12].copy_from_slice(&csum.to_be_bytes());
    out[20..22].copy_from_slice(&sport.to_be_bytes());
    out[22..24].copy_from_slice(&dport.to_be_bytes());
    let udp_len = u16::try_from(total - 20).unwrap_or(u16::MAX);
    out[24..26].copy_from_slice(&udp_len.to_be_bytes());
    out[28..36].copy_from_slice(&counter.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: [u8; 32] = [7; 32];

    #[test]
    fn seal_then_open_gives_the_inner_packet_back() {
        let c = PeerCipher::new(&SEED, 3);
        let mut inner = Vec::new();
        inner_udp(
            Ipv4Addr::new(10, 99, 1, 4),
            Ipv4Addr::new(10, 99, 0, 1),
            40000,
            9,
            64,
            17,
            &mut inner,
        );
        let mut d = Vec::new();
        c.seal(3, 17, &inner, &mut d);
        assert_eq!(d.len(), HEADER_LEN + inner.len() + TAG_LEN);
        assert_ne!(&d[HEADER_LEN..HEADER_LEN + inner.len()], &inner[..]);
        assert_eq!(receiver_index(&d), Ok(3));
        c.open(&mut d).expect("opens");
        assert_eq!(&d[HEADER_LEN..d.len() - TAG_LEN], &inner[..]);
    }

    #[test]
    fn a_flipped_bit_or_another_peers_key_is_refused() {
        let c = PeerCipher::new(&SEED, 0);
        let mut d = Vec::new();
        c.seal(0, 1, b"0123456789abcdef0123456789abcdef", &mut d);
        let mut flipped = d.clone();
        flipped[HEADER_LEN + 2] ^= 1;
        assert_eq!(c.open(&mut flipped), Err(OpenError::BadCiphertext));
        let other = PeerCipher::new(&SEED, 1);
        assert_eq!(other.open(&mut d.clone()), Err(OpenError::BadCiphertext));
        assert_eq!(c.open(&mut d[..20].to_vec()), Err(OpenError::Malformed));
        let mut wrong_type = d.clone();
        wrong_type[0] = 1;
        assert_eq!(receiver_index(&wrong_type), Err(OpenError::Malformed));
    }

    #[test]
    fn the_inner_header_checksum_verifies() {
        let mut p = Vec::new();
        inner_udp(
            Ipv4Addr::new(10, 99, 1, 1),
            Ipv4Addr::new(10, 99, 0, 1),
            1,
            2,
            100,
            0,
            &mut p,
        );
        assert_eq!(p.len(), 128);
        // A correct header sums to 0xffff, whose complement is 0.
        assert_eq!(internet_checksum(&p[..20]), 0);
    }
}
