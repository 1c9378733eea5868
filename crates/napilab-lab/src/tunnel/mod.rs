//! The vpn topology's engine when the kernel has no WireGuard: a user-space tunnel
//! endpoint and its traffic source (docs/lab.md, "The user-space tunnel endpoint").
//!
//! - [`wire`]: the datagram format (WireGuard-shaped header, ChaCha20-Poly1305) and the
//!   inner IPv4/UDP packets.
//! - [`tun_device`]: a multi-queue TUN device opened with `IFF_NAPI`, one queue (and
//!   NAPI instance) per peer.
//! - [`endpoint`]: the endpoint: UDP receiver, round-robin decryption workers, writes
//!   into the peers' TUN queues; statistics.
//! - [`peers`]: encrypting peers sending sealed packets at a rate.
//! - [`detect`]: kernel WireGuard or the user-space endpoint.

pub mod detect;
pub mod endpoint;
pub mod peers;
pub mod tun_device;
pub mod wire;

pub use endpoint::{Endpoint, EndpointConfig, EndpointStats};
pub use peers::{PeersConfig, PeersStats};
