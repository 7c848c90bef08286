//! The zstd container of the original's `session.jsonl.zstd` (reference
//! dsh-core §8.3): a plain concatenation of independent frames, each with
//! a content checksum. The header line is a frame of its own; every
//! durable append batch is one more frame.
//!
//! [`scan`] finds frame boundaries from the frame and block headers alone
//! (no decompression), as the original does: a frame cut off by the end of
//! the file is a torn tail, while a bad magic number or a reserved bit or
//! block type in the bytes present is corruption. [`decode`] inflates a
//! frame under the caps of `limits`, streaming, never trusting the size a
//! frame declares. [`Framer`] keeps one compressor context for the life of
//! the store, so a frame per flush costs a compression, not a context
//! setup.

use std::io::Read;

use zstd::bulk::Compressor;
use zstd::zstd_safe::CParameter;

use crate::limits::{Cap, FillError, Text};

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

/// Decodes one complete frame into `out`, checking its content checksum.
/// It streams: the text grows one chunk at a time through [`Text::fill`],
/// so a frame is never allocated at the size it claims, and decoding
/// stops at the first chunk past a cap of `out`. The decoder's window is
/// zstd's default bound (128 MiB, as the original's reader has it).
pub fn decode(frame: &[u8], out: &mut Text) -> Result<(), FillError> {
    let decoder = zstd::stream::read::Decoder::with_buffer(frame)
        .map_err(FillError::Read)?
        .single_frame();
    out.fill(decoder)
}

/// Appends to `out` what decodes of a frame the file cuts off: the text
/// produced before the input ran out (possibly nothing). Only a cap can
/// fail it.
pub fn decode_prefix(torn: &[u8], out: &mut Text) -> Result<(), Cap> {
    match decode(torn, out) {
        Err(FillError::Over(cap)) => Err(cap),
        _ => Ok(()),
    }
}

/// Decodes the first frame of `input` (a log file's start), under the
/// header's caps; nothing after that frame is read.
pub fn decode_first(input: impl Read) -> Result<Text, FillError> {
    let decoder = zstd::stream::read::Decoder::new(input)
        .map_err(FillError::Read)?
        .single_frame();
    let mut out = Text::header();
    out.fill(decoder)?;
    Ok(out)
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
    use crate::limits::Limits;

    fn framer() -> Framer {
        Framer::new().unwrap()
    }

    /// A complete frame's text, under the default caps.
    fn text_of(frame: &[u8]) -> Result<Vec<u8>, FillError> {
        let mut out = Text::new(Limits::default());
        decode(frame, &mut out)?;
        Ok(out.into_bytes())
    }

    /// What decodes of a torn frame, under the default caps.
    fn prefix_of(torn: &[u8]) -> Vec<u8> {
        let mut out = Text::new(Limits::default());
        decode_prefix(torn, &mut out).unwrap();
        out.into_bytes()
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
        assert_eq!(text_of(&raw[..a.len()]).unwrap(), b"header\n");
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
        assert!(
            matches!(text_of(&a), Err(FillError::Read(_))),
            "the checksum catches it"
        );
    }

    #[test]
    fn a_torn_frame_yields_what_decodes_of_it() {
        let mut f = framer();
        let text = b"first line\nsecond line\n".repeat(50);
        let whole = f.frame(&text).unwrap();
        let got = prefix_of(&whole[..whole.len() - 4]);
        assert!(text.starts_with(&got));
        assert!(prefix_of(&whole[..3]).is_empty());
    }

    /// A checksummed frame of `mib` MiB of `byte`, compressed as it
    /// streams (a few bytes per 128 KiB block), declaring its size.
    fn bomb(byte: u8, mib: u64) -> Vec<u8> {
        use std::io::Write;
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        enc.include_checksum(true).unwrap();
        enc.set_pledged_src_size(Some(mib << 20)).unwrap();
        let block = vec![byte; 1 << 20];
        for _ in 0..mib {
            enc.write_all(&block).unwrap();
        }
        enc.finish().unwrap()
    }

    #[test]
    fn a_frame_that_inflates_past_a_cap_stops_there() {
        let zeros = bomb(0, 64);
        assert!(zeros.len() < 64 << 10, "{} bytes", zeros.len());
        let caps = Limits {
            line: 1 << 20,
            log: 8 << 20,
        };
        let mut out = Text::new(caps);
        let got = decode(&zeros, &mut out);
        assert!(matches!(got, Err(FillError::Over(Cap::Line(_)))), "{got:?}");
        assert!(out.len() <= 1 << 20, "stopped at the line cap");
        let newlines = bomb(b'\n', 64);
        let mut out = Text::new(caps);
        let got = decode(&newlines, &mut out);
        assert!(matches!(got, Err(FillError::Over(Cap::Log(_)))), "{got:?}");
        assert!(out.len() <= 8 << 20, "stopped at the log cap");
        let mut out = Text::new(caps);
        let torn = decode_prefix(&newlines[..newlines.len() - 8], &mut out);
        assert_eq!(torn, Err(Cap::Log(8 << 20)), "a torn frame too");
        let first = decode_first(zeros.as_slice()).err();
        assert!(matches!(first, Some(FillError::Over(Cap::Header))));
    }
}
