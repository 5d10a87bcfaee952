//! The `<key>.bin` file format, the same at every level: a fixed header (the level's magic,
//! format version, payload length, payload SHA-256, key digest) followed by the payload (a
//! serialized executable, a graph entry: the store does not look inside).
//!
//! All integers are little-endian. Decoding checks everything, so a truncated, bit-flipped,
//! misnamed or other-level file is reported instead of being handed to its user.

use sha2::{Digest, Sha256};

use super::key::{hex, CacheDigest};
use super::Level;

/// Version of this format (the store's layout version: entries of another version live in
/// another folder and are never read); a reader rejects others.
pub const FORMAT_VERSION: u32 = super::LAYOUT_VERSION;
/// magic (8) + version (4) + header length (4) + payload length (8) + payload SHA-256 (32)
/// + key digest (32).
pub const HEADER_LEN: usize = 88;

/// The entry file for `payload` stored under `key`.
pub fn encode(level: Level, key: &CacheDigest, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&level.magic());
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(&key.0);
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(payload);
    out
}

/// The payload of an entry file, after checking its header against `expected_key` (when
/// given) and its checksum; otherwise why the file is unusable.
pub fn decode<'a>(level: Level, file: &'a [u8], expected_key: Option<&CacheDigest>) -> Result<&'a [u8], String> {
    if file.len() < HEADER_LEN {
        return Err(format!("truncated: {} bytes, shorter than the {HEADER_LEN}-byte header", file.len()));
    }
    if file[..8] != level.magic() {
        if let Some(other) = Level::ALL.into_iter().find(|l| file[..8] == l.magic()) {
            return Err(format!("a {} entry filed at the {} level (bad magic)", other.name(), level.name()));
        }
        return Err("not a torchtpu cache entry (bad magic)".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes(file[i..i + 4].try_into().unwrap());
    let version = u32_at(8);
    if version != FORMAT_VERSION {
        return Err(format!("entry format version {version}, this torchtpu reads {FORMAT_VERSION}"));
    }
    let header_len = u32_at(12) as usize;
    if header_len != HEADER_LEN {
        return Err(format!("header length {header_len}, expected {HEADER_LEN}"));
    }
    let payload_len = u64::from_le_bytes(file[16..24].try_into().unwrap());
    let actual = (file.len() - HEADER_LEN) as u64;
    if payload_len != actual {
        return Err(format!("truncated or padded: header says {payload_len} payload bytes, file has {actual}"));
    }
    if let Some(key) = expected_key {
        if file[56..88] != key.0 {
            return Err(format!("stored under key {} but its header names {}", key.hex(), hex(&file[56..88])));
        }
    }
    let payload = &file[HEADER_LEN..];
    if Sha256::digest(payload).as_slice() != &file[24..56] {
        return Err("checksum mismatch: the payload is corrupt".into());
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> CacheDigest {
        CacheDigest([b; 32])
    }

    #[test]
    fn round_trips_and_rejects_every_kind_of_damage() {
        let payload = b"serialized executable bytes".to_vec();
        let file = encode(Level::Executable, &key(7), &payload);
        assert_eq!(file.len(), HEADER_LEN + payload.len());
        let decode = |f: &[u8], k: Option<&CacheDigest>| decode(Level::Executable, f, k).map(<[u8]>::to_vec);
        assert_eq!(decode(&file, Some(&key(7))), Ok(payload.clone()));
        assert_eq!(decode(&file, None), Ok(payload.clone()));

        assert!(decode(&file, Some(&key(8))).unwrap_err().contains("stored under key"));
        assert!(decode(&file[..40], None).unwrap_err().contains("truncated"));
        assert!(decode(&file[..file.len() - 1], None).unwrap_err().contains("truncated"));
        assert!(decode(&[], None).unwrap_err().contains("truncated"));
        for i in [0, 9, 13, 17, 30, 60, HEADER_LEN, file.len() - 1] {
            let mut bad = file.clone();
            bad[i] ^= 0x20;
            assert!(decode(&bad, Some(&key(7))).is_err(), "flip at {i} accepted");
        }
        let mut flipped = file.clone();
        flipped[HEADER_LEN + 3] ^= 1;
        assert!(decode(&flipped, None).unwrap_err().contains("checksum"));

        // A graph entry is not an executable one, even with the right key and checksum.
        let graph = encode(Level::Graph, &key(7), &payload);
        assert!(decode(&graph, Some(&key(7))).unwrap_err().contains("a graph entry filed at the executable level"));
        assert_eq!(super::decode(Level::Graph, &graph, Some(&key(7))), Ok(&payload[..]));
    }
}
