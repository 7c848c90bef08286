//! Reading a log file: opened only as a regular file ([`open_log`]), then
//! its text decoded under the caps of `limits`. A plain log is read as it
//! is; a zstd log (the original's default) is decoded frame by frame, its
//! frames found from their headers alone (`frames`), so a crash mid-append
//! loses only the frame being written. [`read_header`] reads the header
//! alone, as the original lists sessions. What a log holds beyond its
//! bytes (events, torn tails) is `tail`'s.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use dsh_sdk::vocab::SessionHeader;

use crate::frames;
use crate::header::parse_header;
use crate::limits::{size, Cap, FillError, Limits, Text, HEADER_MAX};
use crate::paths::is_zstd;

/// A log's text, and for a zstd log where its frames start, so a repair can
/// cut the file at a frame boundary.
pub struct Log {
    /// The decoded JSONL text: every complete frame, then what decodes of a
    /// torn final frame.
    pub text: Vec<u8>,
    /// zstd only: how much of `text` the complete frames hold.
    complete: usize,
    /// zstd only: file offset of a final frame the end of the file cuts off.
    torn_frame: Option<u64>,
    zstd: bool,
}

impl Log {
    /// True when the file's bytes end in a torn frame.
    pub fn is_torn(&self) -> bool {
        self.torn_frame.is_some()
    }

    /// The original's rule for a zstd log: a defect (an unparsable line, a
    /// seq gap, a line cut short) inside a complete frame is corruption;
    /// only the frame the file ends inside may be torn.
    pub fn check_defect(&self, torn_at: Option<usize>) -> Result<(), String> {
        match torn_at {
            Some(at) if self.zstd && at < self.complete => Err(format!(
                "corrupt Zstandard session log: a complete frame holds a damaged JSONL record (text byte {at})"
            )),
            _ => Ok(()),
        }
    }

    /// Where a repair of the torn tail at text offset `torn_at` (from
    /// `tail::scan`) cuts the file, and the text it writes again after the
    /// cut. A plain log is cut at the tail itself. A zstd log is cut at the
    /// start of its torn final frame, if it has one, and the complete lines
    /// that decoded from that frame are written again.
    pub fn repair_cut(&self, torn_at: Option<usize>) -> (Option<u64>, String) {
        if !self.zstd {
            return (torn_at.map(|at| at as u64), String::new());
        }
        match self.torn_frame {
            Some(at) => {
                let end = torn_at.unwrap_or(self.text.len()).max(self.complete);
                let kept = String::from_utf8_lossy(&self.text[self.complete..end]).into_owned();
                (Some(at), kept)
            }
            None => (None, String::new()),
        }
    }
}

fn corrupt(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// Opens the log at `path` with `options`, only as a regular file: with
/// `O_NOFOLLOW` (a symbolic link in its place is refused, never followed,
/// so a link to `/dev/zero` is not read), `O_NONBLOCK` (a FIFO named like a
/// log never blocks the open) and `O_CLOEXEC`, then checked on the open
/// descriptor. Anything else fails `InvalidData`, naming what it is.
pub fn open_log(path: &Path, options: &mut OpenOptions) -> std::io::Result<File> {
    let opened = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(corrupt(format!(
                "{} is a symbolic link; a session log is read only from a regular file, never through a link",
                path.display()
            )))
        }
        other => other?,
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = dsh_sdk::file::irregular_kind(&kind).unwrap_or("not a regular file");
        return Err(corrupt(format!(
            "{} is {what}; a session log is read only from a regular file",
            path.display()
        )));
    }
    Ok(file)
}

/// [`open_log`] for reading.
pub fn open_log_read(path: &Path) -> std::io::Result<File> {
    open_log(path, OpenOptions::new().read(true))
}

/// Reads at most `cap` bytes of `file` (which grows no further here); a
/// file longer than that is refused, unread.
fn read_capped(file: File, cap: usize) -> std::io::Result<Vec<u8>> {
    let len = file.metadata()?.len();
    let over = || {
        corrupt(format!(
            "the file holds more than {}, the cap of a whole log (`maxLogBytes` in session-jsonl's config); it is refused unread and left as it is",
            size(cap)
        ))
    };
    if len > cap as u64 {
        return Err(over());
    }
    let mut raw = Vec::with_capacity(len as usize);
    file.take(cap as u64 + 1).read_to_end(&mut raw)?;
    if raw.len() > cap {
        return Err(over());
    }
    Ok(raw)
}

/// Reads a log under `limits` (see `limits`): zstd-framed logs (the
/// original's default) are decoded frame by frame, so a crash mid-append
/// loses only the frame being written. A zstd log that cannot be read as
/// the original reads it, or that inflates past a cap, fails `InvalidData`
/// (corruption); the file is not changed.
pub fn read(path: &Path, limits: Limits) -> std::io::Result<Log> {
    let raw = read_capped(open_log_read(path)?, limits.log)?;
    if !is_zstd(path) {
        return Ok(plain(raw));
    }
    decode_frames(&raw, limits)
}

/// A plain log's text.
fn plain(raw: Vec<u8>) -> Log {
    Log {
        complete: raw.len(),
        text: raw,
        torn_frame: None,
        zstd: false,
    }
}

/// The whole log at `path` when it decodes to at most `budget` bytes;
/// `None` when it is longer (the file, or what its frames inflate to), in
/// which case at most `budget` bytes were read and decoded. A log that
/// cannot be read fails as [`read`] does.
pub fn read_within(path: &Path, budget: usize) -> std::io::Result<Option<Log>> {
    let file = open_log_read(path)?;
    if file.metadata()?.len() > budget as u64 {
        return Ok(None);
    }
    let raw = read_capped(file, budget)?;
    if !is_zstd(path) {
        return Ok(Some(plain(raw)));
    }
    let limits = Limits {
        line: budget,
        log: budget,
    };
    match decode_capped(&raw, limits) {
        Ok(log) => Ok(Some(log)),
        Err(Refusal { over: true, .. }) => Ok(None),
        Err(r) => Err(r.error),
    }
}

/// Why [`decode_frames`] refused a log.
struct Refusal {
    /// A frame after the header inflated past a cap of the log (the line
    /// or the whole log), as opposed to bytes that break the format.
    over: bool,
    error: std::io::Error,
}

impl Refusal {
    fn corrupt(why: String) -> Refusal {
        Refusal {
            over: false,
            error: corrupt(why),
        }
    }

    /// Frame `n` (from 1) at byte `at` of the file ran into `cap`.
    fn over(n: usize, at: usize, cap: Cap) -> Refusal {
        Refusal {
            over: cap != Cap::Header,
            error: over_cap(n, at, cap),
        }
    }
}

/// The refusal of frame `n` (from 1) at byte `at` of the file, which ran
/// into `cap`.
fn over_cap(n: usize, at: usize, cap: Cap) -> std::io::Error {
    corrupt(format!(
        "corrupt Zstandard session log: frame {n} (at byte {at} of the file) {cap}; the log is refused unread and the file is left as it is"
    ))
}

/// The text of the zstd log `raw` under `limits` (see [`read`]).
fn decode_frames(raw: &[u8], limits: Limits) -> std::io::Result<Log> {
    decode_capped(raw, limits).map_err(|r| r.error)
}

/// [`decode_frames`], saying whether a refusal was a cap of the log.
fn decode_capped(raw: &[u8], limits: Limits) -> Result<Log, Refusal> {
    let scan = frames::scan(raw).map_err(Refusal::corrupt)?;
    let Some(&(h0, h1)) = scan.frames.first() else {
        return Err(Refusal::corrupt(
            "empty or header-less Zstandard session log".into(),
        ));
    };
    let mut text = Text::header();
    frames::decode(&raw[h0..h1], &mut text).map_err(|e| match e {
        FillError::Over(cap) => Refusal::over(1, h0, cap),
        FillError::Read(e) => Refusal::corrupt(format!(
            "corrupt Zstandard session log: the header frame does not decode ({e})"
        )),
    })?;
    check_header_frame(text.bytes()).map_err(|error| Refusal { over: false, error })?;
    let mut text = text.widen(limits);
    for (k, &(start, end)) in scan.frames.iter().enumerate().skip(1) {
        frames::decode(&raw[start..end], &mut text).map_err(|e| match e {
            FillError::Over(cap) => Refusal::over(k + 1, start, cap),
            FillError::Read(e) => Refusal::corrupt(format!(
                "corrupt Zstandard session log: the frame at byte {start} fails its checksum or does not decode ({e})"
            )),
        })?;
    }
    let complete = text.len();
    if let Some(at) = scan.torn_start {
        frames::decode_prefix(&raw[at..], &mut text)
            .map_err(|cap| Refusal::over(scan.frames.len() + 1, at, cap))?;
    }
    Ok(Log {
        text: text.into_bytes(),
        complete,
        torn_frame: scan.torn_start.map(|at| at as u64),
        zstd: true,
    })
}

/// The original's rule for the first frame: exactly one line, the header.
fn check_header_frame(text: &[u8]) -> std::io::Result<()> {
    if text.is_empty() || text.iter().position(|b| *b == b'\n') != Some(text.len() - 1) {
        return Err(corrupt(
            "corrupt Zstandard session log: first frame is not exactly one header line".into(),
        ));
    }
    Ok(())
}

/// A log's header alone, as the original lists sessions: the first frame
/// of a zstd log, or the first line of a plain one, decoded under
/// [`HEADER_MAX`] (nothing after it is read). A header that cannot be read
/// fails `InvalidData`.
pub fn read_header(path: &Path) -> std::io::Result<SessionHeader> {
    let file = open_log_read(path)?;
    let line = if is_zstd(path) {
        let text = frames::decode_first(file).map_err(|e| match e {
            FillError::Over(cap) => over_cap(1, 0, cap),
            FillError::Read(e) => corrupt(format!(
                "corrupt Zstandard session log: the header frame does not decode ({e})"
            )),
        })?;
        check_header_frame(text.bytes())?;
        text.into_bytes()
    } else {
        let mut line = Vec::new();
        std::io::BufReader::new(file.take(HEADER_MAX as u64 + 1)).read_until(b'\n', &mut line)?;
        if line.len() > HEADER_MAX {
            return Err(corrupt(format!(
                "the first line is longer than {}, the cap of the header line",
                size(HEADER_MAX)
            )));
        }
        line
    };
    parse_header(&String::from_utf8_lossy(&line)).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expand::Expansion;
    use crate::tail::scan;
    use crate::test_logs::{frame, line, zstd_file, HEAD};
    use dsh_sdk::vocab::event;

    fn corruption(raw: &[u8]) -> String {
        let err = decode_frames(raw, Limits::default()).err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        err.to_string()
    }

    #[test]
    fn a_defect_inside_a_complete_zstd_frame_is_corruption() {
        let good = line(event::STEP_START, 1);
        let raw = [
            frame(HEAD),
            frame(&line(event::TURN_START, 0)),
            frame(&format!("{good}garbage\n")),
        ]
        .concat();
        let log = decode_frames(&raw, Limits::default()).unwrap();
        let s = scan(&log.text, Expansion::default()).unwrap();
        assert!(log.check_defect(s.torn_at).is_err());
        // A frame whose text stops mid-line is damaged the same way.
        let raw = [frame(HEAD), frame("{\"type\":\"turn/st")].concat();
        let log = decode_frames(&raw, Limits::default()).unwrap();
        assert!(log
            .check_defect(scan(&log.text, Expansion::default()).unwrap().torn_at)
            .is_err());
    }

    #[test]
    fn a_bad_checksum_a_bad_magic_or_a_header_frame_with_more_is_corruption() {
        let mut bad = frame(&line(event::STEP_START, 1));
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let raw = [frame(HEAD), bad].concat();
        assert!(
            corruption(&raw).contains("checksum"),
            "{}",
            corruption(&raw)
        );
        let mut magic = frame(&line(event::STEP_START, 1));
        magic[0] ^= 0xff;
        let raw = [frame(HEAD), magic].concat();
        assert!(corruption(&raw).contains("invalid frame magic"));
        let together = frame(&format!("{HEAD}{}", line(event::TURN_START, 0)));
        assert!(corruption(&together).contains("exactly one header line"));
        assert!(corruption(&frame(HEAD)[..5]).contains("header-less"));
    }

    #[test]
    fn the_header_alone_is_read_from_the_first_frame_or_line() {
        let rest = line(event::TURN_START, 0);
        let zstd = zstd_file("header", &[frame(HEAD), frame(&rest)].concat());
        assert_eq!(read_header(&zstd).unwrap().id, "s");
        // Only the first frame is read: what follows it may be anything.
        std::fs::write(&zstd, [frame(HEAD), b"not zstd".to_vec()].concat()).unwrap();
        assert_eq!(read_header(&zstd).unwrap().id, "s");
        let plain = zstd.with_file_name("session.jsonl");
        std::fs::write(&plain, format!("{HEAD}{rest}")).unwrap();
        assert_eq!(read_header(&plain).unwrap().id, "s");
        std::fs::write(&plain, "x".repeat(HEADER_MAX + 10)).unwrap();
        let long = read_header(&plain).unwrap_err().to_string();
        assert!(long.contains("cap of the header line"), "{long}");
        let two = frame(&format!("{HEAD}{rest}"));
        std::fs::write(&zstd, two).unwrap();
        let e = read_header(&zstd).unwrap_err().to_string();
        assert!(e.contains("exactly one header line"), "{e}");
        let _ = std::fs::remove_dir_all(zstd.parent().unwrap());
    }

    #[test]
    fn a_log_over_a_cap_is_corruption_naming_the_frame_and_the_cap() {
        let caps = Limits {
            line: 64,
            log: 1024,
        };
        let long = format!("{{\"type\":\"x\",\"data\":\"{}\"}}\n", "a".repeat(100));
        let raw = [
            frame(HEAD),
            frame(&line(event::TURN_START, 0)),
            frame(&long),
        ]
        .concat();
        let e = decode_frames(&raw, caps).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let e = e.to_string();
        assert!(e.contains("frame 3 (at byte"), "{e}");
        assert!(e.contains("64 bytes, the cap of one line"), "{e}");
        let many = line(event::TURN_START, 0).repeat(40);
        let raw = [frame(HEAD), frame(&many)].concat();
        let e = decode_frames(&raw, caps).err().unwrap().to_string();
        assert!(e.contains("frame 2") && e.contains("1 KiB"), "{e}");
        // A plain log is capped by its size, before it is read.
        let path = zstd_file("plain-cap", b"").with_file_name("session.jsonl");
        std::fs::write(&path, format!("{HEAD}{many}")).unwrap();
        let e = read(&path, caps).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("1 KiB"), "{e}");
        assert!(read(&path, Limits::default()).is_ok());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_log_is_opened_only_as_a_regular_file_never_through_a_link() {
        let dir = std::env::temp_dir().join(format!("dsh-open-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_log_read(&fifo).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("FIFO"), "{e}");
        let link = dir.join("zero.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_header(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::write(dir.join("plain.jsonl"), HEAD).unwrap();
        assert_eq!(read_header(&dir.join("plain.jsonl")).unwrap().id, "s");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
