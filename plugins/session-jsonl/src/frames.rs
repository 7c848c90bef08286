//! The zstd container of the original's `session.jsonl.zstd` (reference
//! dsh-core §8.3): a plain concatenation of independent frames, each with
//! a content checksum. The header line is a frame of its own; every
//! durable append batch is one more frame.
//!
//! [`scan`] finds frame boundaries from the frame and block headers alone
//! (no decompression), as the original does: a frame cut off by the end of
//! the file is a torn tail, while a bad magic number or a reserved bit or
//! block type in the bytes present is corruption. [`Framer`] keeps one
//! compressor context for the life of the store, so a frame per flush
//! costs a compression, not a context setup.

use std::io::Read;

use zstd::bulk::Compressor;
use zstd::zstd_safe::CParameter;

/// The first four bytes of every zstd frame (little endian 0xFD2FB528).
const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Where the frames of a zstd log lie.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FrameScan {
    /// `(start, end)` byte ranges of the structurally complete frames.
    pub frames: Vec<(usize, usize)>,
    /// The start of a final frame the end of the file cuts off.
    pub torn_start: Option<usize>,
}

/// Reads `n` little-endian bytes at `at`.
fn le(raw: &[u8], at: usize, n: usize) -> u32 {
    raw[at..at + n]
        .iter()
        .rev()
        .fold(0, |acc, b| (acc << 8) | u32::from(*b))
}

/// Where the frame starting at `start` ends: `Ok(Some(end))`, `Ok(None)`
/// when the file ends inside it, `Err` when its headers are invalid.
fn frame_end(raw: &[u8], start: usize) -> Result<Option<usize>, String> {
    let len = raw.len();
    if len - start < 4 {
        return Ok(None);
    }
    if raw[start..start + 4] != MAGIC {
        return Err(format!(
            "corrupt Zstandard session log: invalid frame magic at byte {start}"
        ));
    }
    let mut at = start + 4;
    let Some(&descriptor) = raw.get(at) else {
        return Ok(None);
    };
    if descriptor & 0x18 != 0 {
        return Err(format!(
            "corrupt Zstandard session log: reserved frame-header bit at byte {at}"
        ));
    }
    at += 1;
    let single_segment = descriptor & 0x20 != 0;
    let checksum = descriptor & 0x04 != 0;
    let dictionary = match descriptor & 0x03 {
        3 => 4,
        d => usize::from(d),
    };
    let content_size = match descriptor >> 6 {
        0 => usize::from(single_segment),
        f => 1 << f,
    };
    at += usize::from(!single_segment) + dictionary + content_size;
    loop {
        if len < at + 3 {
            return Ok(None);
        }
        let block = le(raw, at, 3);
        let block_type = (block >> 1) & 0x03;
        if block_type == 3 {
            return Err(format!(
                "corrupt Zstandard session log: reserved block type at byte {at}"
            ));
        }
        at += 3;
        // An RLE block holds one byte, repeated `size` times.
        at += if block_type == 1 {
            1
        } else {
            (block >> 3) as usize
        };
        if len < at {
            return Ok(None);
        }
        if block & 1 != 0 {
            break;
        }
    }
    if checksum {
        at += 4;
    }
    Ok((at <= len).then_some(at))
}

/// Finds the frames of a concatenated zstd stream (see the module doc).
pub fn scan(raw: &[u8]) -> Result<FrameScan, String> {
    let mut out = FrameScan::default();
    let mut at = 0;
    while at < raw.len() {
        match frame_end(raw, at)? {
            Some(end) => {
                out.frames.push((at, end));
                at = end;
            }
            None => {
                out.torn_start = Some(at);
                break;
            }
        }
    }
    Ok(out)
}

/// Decodes one complete frame, checking its content checksum.
pub fn decode(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::stream::decode_all(frame)
}

/// What decodes of a frame the file cuts off: the text produced before the
/// input ran out (possibly nothing).
pub fn decode_prefix(torn: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let Ok(mut decoder) = zstd::stream::read::Decoder::with_buffer(torn) else {
        return out;
    };
    let mut buf = [0u8; 8192];
    while let Ok(n) = decoder.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// One compressor context, reused for every frame this store writes
/// (default level, content checksum on, as the original writes them).
pub struct Framer(Compressor<'static>);

impl Framer {
    /// A compressor at zstd's default level with the checksum flag set.
    pub fn new() -> std::io::Result<Framer> {
        let mut c = Compressor::new(zstd::DEFAULT_COMPRESSION_LEVEL)?;
        c.set_parameter(CParameter::ChecksumFlag(true))?;
        Ok(Framer(c))
    }

    /// `text` as one complete, checksummed frame.
    pub fn frame(&mut self, text: &[u8]) -> std::io::Result<Vec<u8>> {
        self.0.compress(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framer() -> Framer {
        Framer::new().unwrap()
    }

    #[test]
    fn frames_are_found_without_decoding_and_carry_a_checksum() {
        let mut f = framer();
        let a = f.frame(b"header\n").unwrap();
        let b = f.frame(&b"x".repeat(300_000)).unwrap();
        assert_eq!(a[4] & 0x04, 0x04, "the checksum flag is set");
        let raw = [a.clone(), b.clone()].concat();
        let s = scan(&raw).unwrap();
        assert_eq!(s.frames, [(0, a.len()), (a.len(), raw.len())]);
        assert_eq!(s.torn_start, None);
        assert_eq!(decode(&raw[..a.len()]).unwrap(), b"header\n");
    }

    #[test]
    fn a_frame_cut_off_at_any_byte_is_a_torn_tail() {
        let mut f = framer();
        let a = f.frame(b"header\n").unwrap();
        let b = f.frame(b"line one\nline two\n").unwrap();
        for cut in 1..b.len() {
            let raw = [a.as_slice(), &b[..cut]].concat();
            let s = scan(&raw).unwrap();
            assert_eq!(s.frames, [(0, a.len())], "cut at {cut}");
            assert_eq!(s.torn_start, Some(a.len()), "cut at {cut}");
        }
    }

    #[test]
    fn bad_magic_and_a_bad_checksum_are_corruption() {
        let mut f = framer();
        let mut a = f.frame(b"header\n").unwrap();
        let mut bad_magic = a.clone();
        bad_magic[0] ^= 0xff;
        assert!(scan(&bad_magic)
            .unwrap_err()
            .contains("invalid frame magic"));
        let last = a.len() - 1;
        a[last] ^= 0xff;
        assert_eq!(scan(&a).unwrap().frames.len(), 1, "still complete");
        assert!(decode(&a).is_err(), "the checksum catches it");
    }

    #[test]
    fn a_torn_frame_yields_what_decodes_of_it() {
        let mut f = framer();
        let text = b"first line\nsecond line\n".repeat(50);
        let whole = f.frame(&text).unwrap();
        let got = decode_prefix(&whole[..whole.len() - 4]);
        assert!(text.starts_with(&got));
        assert!(decode_prefix(&whole[..3]).is_empty());
    }
}
