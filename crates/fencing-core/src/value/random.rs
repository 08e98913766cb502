//! Randomness from the operating system, for ids that must not collide across processes and
//! for jitter that must not line contending writers up.

/// 128 bits from the operating system's random source.
///
/// # Panics
///
/// When the operating system cannot give randomness (no such source on the platform): an
/// owner id or a write id drawn from anything weaker could collide with another process's.
pub(crate) fn random_u128() -> u128 {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source answers");
    u128::from_le_bytes(bytes)
}
