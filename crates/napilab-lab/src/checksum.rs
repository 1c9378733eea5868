//! The Internet checksum (RFC 1071) of the IPv4 headers the lab's generators build:
//! the line-rate frames and the tunnel's inner packets.

/// The ones' complement of the ones' complement sum of `bytes` as 16-bit big-endian
/// words (an odd last byte padded with zero). Over a header whose checksum field holds
/// this value the result is 0.
pub(crate) fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worked IPv4 header (UDP, 192.168.0.1 -> 192.168.0.199, total length 115):
    /// its checksum is 0xb861, and with it in place the header sums to zero.
    #[test]
    fn a_known_header_sums_to_its_checksum_and_checks_to_zero() {
        let mut h: [u8; 20] = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(internet_checksum(&h), 0);
        // An odd length pads with zero.
        assert_eq!(internet_checksum(&[0xff]), !0xff00);
    }
}
