//! Looking at a library file before `dlopen`, without running any of it.
//!
//! `dlopen` runs a library's constructors before the host can ask it
//! anything, so every load first reads the file and refuses it unless it is
//! an ELF shared object (`ET_DYN`, and not a position-independent
//! executable) of this host's class, byte order and machine whose dynamic
//! symbol table exports abi_stable's root-module symbol — the static that
//! the SDK's `export_plugin!` emits through `#[export_root_module]`.
//!
//! Only the ELF header, the program and section header tables, the dynamic
//! segment and the dynamic symbol and string tables are read, with
//! positioned reads that are each bounded by the file's size and a cap:
//! never the whole file, however large.
//!
//! What this protects against: running the code of a file that is not a
//! dsh plugin at all (a system library, an executable, a text file named
//! `.so`). What it does not: someone who can write to a plugin directory
//! can build a plugin, whose constructors `dlopen` then runs (looking at
//! one without running it here is [`crate::isolate`]'s job). What is read
//! is what is loaded: a row's private copy ([`crate::staging`]), an
//! inspection's sealed copy ([`crate::sealed`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use abi_stable::library::ROOT_MODULE_LOADER_NAME;

/// Why a file is not loaded. Its code did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No ELF magic (a text file, garbage, an empty file).
    #[error("not an ELF file (invalid ELF header: {0})")]
    NotElf(String),
    /// An ELF file of another kind: an executable, an object file, a core
    /// dump.
    #[error("{0}, not a shared library")]
    NotALibrary(String),
    /// Built for another machine, word size or byte order.
    #[error("built for {found}; this host runs {host}")]
    WrongTarget {
        /// What the file is for, e.g. `aarch64`.
        found: String,
        /// What this host is, e.g. `x86_64`.
        host: String,
    },
    /// A shared library that does not export the root module.
    #[error("not a dsh plugin: no abi_stable root module ({0})")]
    NoRootModule(String),
    /// Tables that point outside the file or have impossible sizes.
    #[error("a damaged ELF file: {0}")]
    Damaged(String),
    /// The file cannot be read.
    #[error("cannot read it: {0}")]
    Unreadable(String),
}

/// Refuses `path` unless it looks like a dsh plugin for this host; see the
/// module doc. Reads a few kilobytes of a typical plugin.
pub fn inspect(path: &Path) -> Result<(), Refusal> {
    let file = File::open(path).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let len = file
        .metadata()
        .map_err(|e| Refusal::Unreadable(e.to_string()))?
        .len();
    inspect_source(&file, len)
}

/// [`inspect`] for a file already open (the sealed copy a confined
/// inspection loads: what is checked is what is loaded).
pub fn inspect_file(file: &File) -> Result<(), Refusal> {
    let len = file
        .metadata()
        .map_err(|e| Refusal::Unreadable(e.to_string()))?
        .len();
    inspect_source(file, len)
}

/// The bytes of a file, read at offsets (a `File`, or a slice in tests).
trait Source {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl Source for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl Source for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// The largest table read (a plugin's are a few kilobytes).
const TABLE_CAP: u64 = 64 << 20;

// ELF constants (the System V gABI; `man 5 elf`).
const ELFCLASS32: u8 = 1;
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const ELFDATA2MSB: u8 = 2;
const ET_REL: u16 = 1;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const ET_CORE: u16 = 4;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PN_XNUM: u16 = 0xffff;
const DT_NULL: u64 = 0;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DF_1_PIE: u64 = 0x0800_0000;
const SHT_STRTAB: u32 = 3;
const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;
const STB_GNU_UNIQUE: u8 = 10;
const STV_DEFAULT: u8 = 0;
const STV_PROTECTED: u8 = 3;

const HOST_CLASS: u8 = if cfg!(target_pointer_width = "64") {
    ELFCLASS64
} else {
    ELFCLASS32
};
const HOST_DATA: u8 = if cfg!(target_endian = "little") {
    ELFDATA2LSB
} else {
    ELFDATA2MSB
};

/// This host's `e_machine`, when known (otherwise `dlopen` judges).
const fn host_machine() -> Option<u16> {
    if cfg!(target_arch = "x86_64") {
        Some(62)
    } else if cfg!(target_arch = "x86") {
        Some(3)
    } else if cfg!(target_arch = "aarch64") {
        Some(183)
    } else if cfg!(target_arch = "arm") {
        Some(40)
    } else if cfg!(any(target_arch = "riscv64", target_arch = "riscv32")) {
        Some(243)
    } else if cfg!(target_arch = "powerpc64") {
        Some(21)
    } else if cfg!(target_arch = "s390x") {
        Some(22)
    } else if cfg!(target_arch = "loongarch64") {
        Some(258)
    } else {
        None
    }
}

fn machine_name(machine: u16) -> String {
    match machine {
        2 => "sparc".into(),
        3 => "i386".into(),
        8 => "mips".into(),
        20 => "powerpc".into(),
        21 => "powerpc64".into(),
        22 => "s390x".into(),
        40 => "arm".into(),
        43 => "sparc64".into(),
        62 => "x86_64".into(),
        183 => "aarch64".into(),
        243 => "riscv".into(),
        258 => "loongarch".into(),
        other => format!("ELF machine {other}"),
    }
}

/// Reads bounded pieces of one file.
struct Reader<'a, S: Source + ?Sized> {
    src: &'a S,
    len: u64,
}

impl<S: Source + ?Sized> Reader<'_, S> {
    fn bytes(&self, offset: u64, size: u64, what: &str) -> Result<Vec<u8>, Refusal> {
        if size > TABLE_CAP {
            return Err(Refusal::Damaged(format!("its {what} claims {size} bytes")));
        }
        if offset.checked_add(size).is_none_or(|end| end > self.len) {
            return Err(Refusal::Damaged(format!(
                "its {what} lies outside the file ({size} bytes at offset {offset}, the file has {})",
                self.len
            )));
        }
        let size = usize::try_from(size).map_err(|e| Refusal::Damaged(e.to_string()))?;
        let mut buf = vec![0; size];
        self.src
            .read_exact_at(&mut buf, offset)
            .map_err(|e| Refusal::Unreadable(e.to_string()))?;
        Ok(buf)
    }
}

fn field<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], Refusal> {
    at.checked_add(N)
        .and_then(|end| b.get(at..end))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or_else(|| Refusal::Damaged(format!("a field at byte {at} is cut off")))
}

fn u8_at(b: &[u8], at: usize) -> Result<u8, Refusal> {
    Ok(field::<1>(b, at)?[0])
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, Refusal> {
    Ok(u16::from_ne_bytes(field(b, at)?))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, Refusal> {
    Ok(u32::from_ne_bytes(field(b, at)?))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, Refusal> {
    Ok(u64::from_ne_bytes(field(b, at)?))
}

/// Field offsets and sizes of one ELF class (read in the host's byte
/// order, which the file was checked to have).
#[derive(Clone, Copy)]
struct Class {
    wide: bool,
}

impl Class {
    fn word(self, b: &[u8], at: usize) -> Result<u64, Refusal> {
        if self.wide {
            u64_at(b, at)
        } else {
            u32_at(b, at).map(u64::from)
        }
    }
    fn pick(self, wide: usize, narrow: usize) -> usize {
        if self.wide {
            wide
        } else {
            narrow
        }
    }
    fn header_size(self) -> u64 {
        self.pick(64, 52) as u64
    }
    fn phdr_size(self) -> usize {
        self.pick(56, 32)
    }
    fn shdr_size(self) -> usize {
        self.pick(64, 40)
    }
    fn dyn_size(self) -> usize {
        self.pick(16, 8)
    }
    fn sym_size(self) -> usize {
        self.pick(24, 16)
    }
}

/// One section header, as far as this check needs it.
struct Section {
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    entsize: u64,
}

fn section(class: Class, b: &[u8]) -> Result<Section, Refusal> {
    Ok(Section {
        kind: u32_at(b, 4)?,
        offset: class.word(b, class.pick(24, 16))?,
        size: class.word(b, class.pick(32, 20))?,
        link: u32_at(b, class.pick(40, 24))?,
        info: u32_at(b, class.pick(44, 28))?,
        entsize: class.word(b, class.pick(56, 36))?,
    })
}

fn inspect_source<S: Source + ?Sized>(src: &S, len: u64) -> Result<(), Refusal> {
    let r = Reader { src, len };
    if len < 16 {
        return Err(Refusal::NotElf(format!("the file has {len} bytes")));
    }
    let ident = r.bytes(0, 16, "ELF identification")?;
    if ident.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(Refusal::NotElf("no \\x7fELF magic".into()));
    }
    let (elf_class, data) = (u8_at(&ident, 4)?, u8_at(&ident, 5)?);
    if !matches!(elf_class, ELFCLASS32 | ELFCLASS64) {
        return Err(Refusal::Damaged(format!("unknown ELF class {elf_class}")));
    }
    if !matches!(data, ELFDATA2LSB | ELFDATA2MSB) {
        return Err(Refusal::Damaged(format!("unknown ELF byte order {data}")));
    }
    let class = Class {
        wide: elf_class == ELFCLASS64,
    };
    let header = r.bytes(0, class.header_size(), "ELF header")?;
    let (e_type, machine) = {
        let (t, m) = (field::<2>(&header, 16)?, field::<2>(&header, 18)?);
        if data == ELFDATA2LSB {
            (u16::from_le_bytes(t), u16::from_le_bytes(m))
        } else {
            (u16::from_be_bytes(t), u16::from_be_bytes(m))
        }
    };
    check_target(elf_class, data, machine)?;
    match e_type {
        ET_DYN => {}
        ET_EXEC => return Err(Refusal::NotALibrary("an executable".into())),
        ET_REL => return Err(Refusal::NotALibrary("an object file (.o)".into())),
        ET_CORE => return Err(Refusal::NotALibrary("a core dump".into())),
        other => {
            return Err(Refusal::NotALibrary(format!(
                "an ELF file of type {other:#x}"
            )))
        }
    }
    let phoff = class.word(&header, class.pick(32, 28))?;
    let shoff = class.word(&header, class.pick(40, 32))?;
    let phentsize = usize::from(u16_at(&header, class.pick(54, 42))?);
    let mut phnum = u64::from(u16_at(&header, class.pick(56, 44))?);
    let shentsize = usize::from(u16_at(&header, class.pick(58, 46))?);
    let mut shnum = u64::from(u16_at(&header, class.pick(60, 48))?);

    // Section 0 holds the real counts when they overflow the header's.
    if shoff != 0 {
        if shentsize < class.shdr_size() {
            return Err(Refusal::Damaged(format!(
                "section headers of {shentsize} bytes"
            )));
        }
        let first = section(class, &r.bytes(shoff, shentsize as u64, "section table")?)?;
        if shnum == 0 {
            shnum = first.size;
        }
        if phnum == u64::from(PN_XNUM) {
            phnum = u64::from(first.info);
        }
    }

    if phnum > 0 {
        if phentsize < class.phdr_size() {
            return Err(Refusal::Damaged(format!(
                "program headers of {phentsize} bytes"
            )));
        }
        let table = r.bytes(phoff, phnum * phentsize as u64, "program header table")?;
        for ph in table.chunks_exact(phentsize) {
            match u32_at(ph, 0)? {
                PT_INTERP => {
                    return Err(Refusal::NotALibrary(
                        "an executable (it names a program interpreter)".into(),
                    ))
                }
                PT_DYNAMIC => {
                    let offset = class.word(ph, class.pick(8, 4))?;
                    let size = class.word(ph, class.pick(32, 16))?;
                    if is_pie(class, &r.bytes(offset, size, "dynamic segment")?)? {
                        return Err(Refusal::NotALibrary(
                            "an executable (position-independent)".into(),
                        ));
                    }
                }
                _ => {}
            }
        }
    }

    if shoff == 0 || shnum == 0 {
        return Err(Refusal::NoRootModule(
            "it has no section headers to find its symbols in".into(),
        ));
    }
    let table = r.bytes(shoff, shnum * shentsize as u64, "section table")?;
    let sections: Vec<Section> = table
        .chunks_exact(shentsize)
        .map(|s| section(class, s))
        .collect::<Result<_, _>>()?;
    let Some(dynsym) = sections.iter().find(|s| s.kind == SHT_DYNSYM) else {
        return Err(Refusal::NoRootModule(
            "it has no dynamic symbol table".into(),
        ));
    };
    let strtab = usize::try_from(dynsym.link)
        .ok()
        .and_then(|i| sections.get(i))
        .filter(|s| s.kind == SHT_STRTAB)
        .ok_or_else(|| Refusal::Damaged("its dynamic symbol table names no string table".into()))?;
    let entsize = usize::try_from(dynsym.entsize).unwrap_or(0);
    if entsize < class.sym_size() {
        return Err(Refusal::Damaged(format!(
            "dynamic symbols of {entsize} bytes"
        )));
    }
    let symbols = r.bytes(dynsym.offset, dynsym.size, "dynamic symbol table")?;
    let names = r.bytes(strtab.offset, strtab.size, "dynamic string table")?;
    if exports(class, &symbols, entsize, &names, ROOT_MODULE_LOADER_NAME)? {
        Ok(())
    } else {
        Err(Refusal::NoRootModule(format!(
            "it does not export `{ROOT_MODULE_LOADER_NAME}`"
        )))
    }
}

fn check_target(elf_class: u8, data: u8, machine: u16) -> Result<(), Refusal> {
    let host = host_machine();
    if elf_class == HOST_CLASS && data == HOST_DATA && host.is_none_or(|h| h == machine) {
        return Ok(());
    }
    let mut found = String::new();
    if elf_class != HOST_CLASS {
        found.push_str(if elf_class == ELFCLASS32 {
            "32-bit "
        } else {
            "64-bit "
        });
    }
    if data != HOST_DATA {
        found.push_str(if data == ELFDATA2MSB {
            "big-endian "
        } else {
            "little-endian "
        });
    }
    found.push_str(&machine_name(machine));
    Err(Refusal::WrongTarget {
        found,
        host: std::env::consts::ARCH.into(),
    })
}

/// Whether the dynamic segment marks a position-independent executable.
fn is_pie(class: Class, dynamic: &[u8]) -> Result<bool, Refusal> {
    let step = class.dyn_size();
    for entry in dynamic.chunks_exact(step) {
        let tag = class.word(entry, 0)?;
        let value = class.word(entry, step / 2)?;
        if tag == DT_NULL {
            break;
        }
        if tag == DT_FLAGS_1 && value & DF_1_PIE != 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `symbols` defines a global, visible symbol called `wanted`.
fn exports(
    class: Class,
    symbols: &[u8],
    entsize: usize,
    names: &[u8],
    wanted: &str,
) -> Result<bool, Refusal> {
    for sym in symbols.chunks_exact(entsize).skip(1) {
        let name = u32_at(sym, 0)? as usize;
        let (info, other, shndx) = if class.wide {
            (u8_at(sym, 4)?, u8_at(sym, 5)?, u16_at(sym, 6)?)
        } else {
            (u8_at(sym, 12)?, u8_at(sym, 13)?, u16_at(sym, 14)?)
        };
        let bind = info >> 4;
        let visible = matches!(other & 3, STV_DEFAULT | STV_PROTECTED);
        let global = matches!(bind, STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE);
        if shndx == SHN_UNDEF || !global || !visible {
            continue;
        }
        let Some(rest) = names.get(name..) else {
            return Err(Refusal::Damaged(
                "a symbol name lies outside the string table".into(),
            ));
        };
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        if &rest[..end] == wanted.as_bytes() {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(all(test, target_pointer_width = "64", target_endian = "little"))]
mod tests {
    use super::*;

    /// A minimal 64-bit ELF image in the host's byte order.
    struct Elf {
        e_type: u16,
        machine: u16,
        interp: bool,
        pie: bool,
        /// (name, section index, binding)
        symbols: Vec<(&'static str, u16, u8)>,
        dynsym: bool,
    }

    impl Default for Elf {
        fn default() -> Self {
            Elf {
                e_type: ET_DYN,
                machine: host_machine().unwrap_or(62),
                interp: false,
                pie: false,
                symbols: vec![("something_else", 7, STB_GLOBAL), (ROOT, 7, STB_GLOBAL)],
                dynsym: true,
            }
        }
    }

    const ROOT: &str = ROOT_MODULE_LOADER_NAME;

    fn put(buf: &mut Vec<u8>, at: usize, bytes: &[u8]) {
        if buf.len() < at + bytes.len() {
            buf.resize(at + bytes.len(), 0);
        }
        buf[at..at + bytes.len()].copy_from_slice(bytes);
    }

    impl Elf {
        fn build(&self) -> Vec<u8> {
            let mut b = vec![0u8; 64];
            put(&mut b, 0, b"\x7fELF");
            b[4] = ELFCLASS64;
            b[5] = ELFDATA2LSB;
            b[6] = 1;
            put(&mut b, 16, &self.e_type.to_ne_bytes());
            put(&mut b, 18, &self.machine.to_ne_bytes());
            // Program headers at 64: PT_INTERP and/or PT_DYNAMIC.
            let mut phdrs = Vec::new();
            if self.interp {
                phdrs.push((PT_INTERP, 0u64, 0u64));
            }
            let dynamic_at = 1024u64;
            if self.pie {
                phdrs.push((PT_DYNAMIC, dynamic_at, 32));
                put(&mut b, dynamic_at as usize, &DT_FLAGS_1.to_ne_bytes());
                put(&mut b, dynamic_at as usize + 8, &DF_1_PIE.to_ne_bytes());
                put(&mut b, dynamic_at as usize + 16, &[0; 16]);
            }
            put(&mut b, 32, &64u64.to_ne_bytes());
            put(&mut b, 54, &56u16.to_ne_bytes());
            put(&mut b, 56, &(phdrs.len() as u16).to_ne_bytes());
            for (i, (kind, offset, size)) in phdrs.iter().enumerate() {
                let at = 64 + i * 56;
                put(&mut b, at, &kind.to_ne_bytes());
                put(&mut b, at + 8, &offset.to_ne_bytes());
                put(&mut b, at + 32, &size.to_ne_bytes());
            }
            // String and symbol tables at 2048 and 4096.
            let mut strtab = vec![0u8];
            let mut symtab = vec![0u8; 24];
            for (name, shndx, bind) in &self.symbols {
                let off = strtab.len() as u32;
                strtab.extend_from_slice(name.as_bytes());
                strtab.push(0);
                let mut s = vec![0u8; 24];
                put(&mut s, 0, &off.to_ne_bytes());
                s[4] = (bind << 4) | 1;
                put(&mut s, 6, &shndx.to_ne_bytes());
                symtab.extend_from_slice(&s);
            }
            put(&mut b, 2048, &strtab);
            put(&mut b, 4096, &symtab);
            // Section headers at 8192: null, dynsym (link 2), dynstr.
            let shoff = 8192usize;
            let dynsym_kind = if self.dynsym { SHT_DYNSYM } else { 2 };
            let sections = [
                (0u32, 0u64, 0u64, 0u32, 0u64),
                (dynsym_kind, 4096, symtab.len() as u64, 2, 24),
                (SHT_STRTAB, 2048, strtab.len() as u64, 0, 0),
            ];
            for (i, (kind, offset, size, link, entsize)) in sections.iter().enumerate() {
                let at = shoff + i * 64;
                put(&mut b, at + 4, &kind.to_ne_bytes());
                put(&mut b, at + 24, &offset.to_ne_bytes());
                put(&mut b, at + 32, &size.to_ne_bytes());
                put(&mut b, at + 40, &link.to_ne_bytes());
                put(&mut b, at + 56, &entsize.to_ne_bytes());
            }
            put(&mut b, 40, &(shoff as u64).to_ne_bytes());
            put(&mut b, 58, &64u16.to_ne_bytes());
            put(&mut b, 60, &3u16.to_ne_bytes());
            b
        }
    }

    fn check(bytes: &[u8]) -> Result<(), Refusal> {
        inspect_source(bytes, bytes.len() as u64)
    }

    #[test]
    fn a_library_exporting_the_root_module_passes() {
        assert_eq!(check(&Elf::default().build()), Ok(()));
    }

    #[test]
    fn text_and_short_files_are_not_elf() {
        let e = check(b"#!/bin/sh\necho hello, I am not a library\n").unwrap_err();
        assert!(matches!(e, Refusal::NotElf(_)), "{e}");
        assert!(e.to_string().starts_with("not an ELF file"), "{e}");
        assert!(matches!(check(b""), Err(Refusal::NotElf(_))));
        assert!(matches!(check(b"\x7fELF"), Err(Refusal::NotElf(_))));
    }

    #[test]
    fn executables_object_files_and_pies_are_not_libraries() {
        for elf in [
            Elf {
                e_type: ET_EXEC,
                ..Elf::default()
            },
            Elf {
                interp: true,
                ..Elf::default()
            },
            Elf {
                pie: true,
                ..Elf::default()
            },
        ] {
            let e = check(&elf.build()).unwrap_err();
            assert!(e.to_string().starts_with("an executable"), "{e}");
            assert!(e.to_string().ends_with("not a shared library"), "{e}");
        }
        let e = check(
            &Elf {
                e_type: ET_REL,
                ..Elf::default()
            }
            .build(),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "an object file (.o), not a shared library");
    }

    #[test]
    fn another_machine_class_or_byte_order_is_named() {
        let mut b = Elf {
            machine: 183,
            ..Elf::default()
        }
        .build();
        if host_machine() != Some(183) {
            let e = check(&b).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("built for aarch64; this host runs"),
                "{e}"
            );
        }
        b = Elf::default().build();
        b[4] = ELFCLASS32;
        let e = check(&b).unwrap_err();
        assert!(e.to_string().starts_with("built for 32-bit "), "{e}");
        b = Elf::default().build();
        b[5] = ELFDATA2MSB;
        let e = check(&b).unwrap_err();
        assert!(e.to_string().starts_with("built for big-endian "), "{e}");
    }

    #[test]
    fn a_library_without_the_root_module_is_not_a_plugin() {
        let cases = [
            vec![("something_else", 7, STB_GLOBAL)],
            // Imported, not exported.
            vec![(ROOT, SHN_UNDEF, STB_GLOBAL)],
            // Local.
            vec![(ROOT, 7, 0)],
        ];
        for symbols in cases {
            let e = check(
                &Elf {
                    symbols,
                    ..Elf::default()
                }
                .build(),
            )
            .unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("not a dsh plugin: no abi_stable root module"),
                "{e}"
            );
        }
        let e = check(
            &Elf {
                dynsym: false,
                ..Elf::default()
            }
            .build(),
        )
        .unwrap_err();
        assert!(matches!(e, Refusal::NoRootModule(_)), "{e}");
    }

    #[test]
    fn tables_outside_the_file_are_damage_not_a_panic() {
        let full = Elf::default().build();
        // Every truncation is refused without a panic.
        for cut in [20, 63, 100, 2100, 4100, 8200, full.len() - 1] {
            assert!(check(&full[..cut]).is_err(), "cut at {cut}");
        }
        // A section table that claims a huge size.
        let mut b = full.clone();
        put(&mut b, 60, &0xffffu16.to_ne_bytes());
        assert!(matches!(check(&b), Err(Refusal::Damaged(_))));
        // A symbol table claiming more than the cap.
        let mut b = full;
        put(&mut b, 8192 + 64 + 32, &(TABLE_CAP + 1).to_ne_bytes());
        let e = check(&b).unwrap_err();
        assert!(matches!(e, Refusal::Damaged(_)), "{e}");
    }

    #[test]
    fn this_test_binary_is_an_executable() {
        let e = inspect(Path::new("/proc/self/exe")).unwrap_err();
        assert!(e.to_string().starts_with("an executable"), "{e}");
    }
}
