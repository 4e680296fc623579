//! `ext4kit image IMAGE OUT`: a metadata-only copy for bug reports, as
//! e2image writes one — `-r` sparse raw, `-Q` QCOW2, `-a` with file data,
//! `-s` with directory names scrambled; `-r` on a QCOW2 input converts it
//! back to raw. As e2image, a raw image goes to standard output with `-`,
//! into an existing file or device in place (`-c`: only the blocks that
//! differ), at byte `-O` of the output from byte `-o` of the input, or,
//! given one file and an offset, moves the file system within that file;
//! `-p` shows progress, `-n` only lists the blocks it would write. The
//! walk and the writers live in `ext4kit_engine::image`.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::{FileDevice, InUse, OffsetDevice};
use ext4kit_engine::image::{self, ImageOptions, RawBlock, RawOptions, RawSink, RawStats};
use ext4kit_engine::{DirtyJournal, Filesystem, OpenOptions, SuperblockAt};

use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `image`.
#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("form").required(true).args(["raw", "qcow2"]))]
pub struct Args {
    /// The file system image (or block device), or with -r a QCOW2 image
    /// to turn back into raw.
    image: PathBuf,
    /// The image file to write (a raw image into an existing file or
    /// device is written in place; `-` is standard output, raw only).
    /// Left out with -ra and -o or -O: the file system is moved within
    /// IMAGE.
    out: Option<PathBuf>,
    /// Write a sparse raw image: each block at its own offset, the rest holes.
    #[arg(short = 'r')]
    raw: bool,
    /// Write a QCOW2 image (clusters of one block), as e2image -Q.
    #[arg(short = 'Q')]
    qcow2: bool,
    /// Include file data too, not only metadata.
    #[arg(short = 'a')]
    all_data: bool,
    /// Replace directory entry names by stand-ins of the same length.
    #[arg(short = 's')]
    scramble: bool,
    /// Read the file system through the backup superblock at this block
    /// and copy it and its descriptors too, as e2image -b.
    #[arg(short = 'b', value_name = "BLOCK")]
    superblock: Option<u64>,
    /// The block size -b counts in (without it each size is tried).
    #[arg(short = 'B', value_name = "SIZE", requires = "superblock", value_parser = crate::open::parse_block_size)]
    block_size: Option<u32>,
    /// Byte offset of the file system in IMAGE (raw only).
    #[arg(short = 'o', value_name = "SRC_OFFSET", default_value_t = 0, value_parser = parse_number)]
    src_offset: u64,
    /// Byte offset of the image in OUT (raw only).
    #[arg(short = 'O', value_name = "DEST_OFFSET", default_value_t = 0, value_parser = parse_number)]
    dest_offset: u64,
    /// Read each block at its place in OUT first and write only those that
    /// differ (raw, not to standard output).
    #[arg(short = 'c')]
    check: bool,
    /// Write nothing: list the blocks that would be written.
    #[arg(short = 'n')]
    dry_run: bool,
    /// Show progress on standard error (raw only).
    #[arg(short = 'p')]
    progress: bool,
    /// Copy even a file system mounted read-write (the copy may then be
    /// inconsistent), as e2image -f.
    #[arg(short = 'f')]
    force: bool,
}

/// Numbers as e2image reads them (`strtoull(…, 0)`): decimal, 0x hex, 0 octal.
fn parse_number(s: &str) -> Result<u64, String> {
    let r = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8)
    } else {
        s.parse()
    };
    r.map_err(|e| format!("{s}: {e}"))
}

/// e2image's refusals of option combinations.
fn check_args(a: &Args) -> Result<()> {
    let offsets = a.src_offset != 0 || a.dest_offset != 0;
    if offsets && !a.raw {
        bail!("offsets (-o, -O) are only allowed with raw images (-r)");
    }
    if a.out.is_none() {
        if !offsets {
            bail!("name the output image (only a move, -ra with -o or -O, takes one file)");
        }
        if !a.all_data {
            bail!("moving a file system within its file (-o/-O without an output) needs -a");
        }
        if a.scramble || a.superblock.is_some() {
            bail!("a file system moved within its file is copied as it is: no -s or -b");
        }
    }
    let stdout = a.out.as_deref() == Some(Path::new("-"));
    if a.check && (!a.raw || stdout) {
        bail!("-c needs a raw image (-r) written to a file or device, not to standard output");
    }
    if a.progress && !a.raw {
        bail!("-p is only supported with raw images (-r)");
    }
    if stdout && a.qcow2 {
        bail!("a QCOW2 image cannot be written to standard output: it needs random access");
    }
    Ok(())
}

/// Writes the image and says what went into it.
pub fn run(a: Args) -> Result<()> {
    check_args(&a)?;
    crate::open::refuse_export(
        &a.image,
        "image",
        "it reads the image file itself; copy the export to a file first (qemu-img convert)",
    )?;
    let input = File::open(&a.image).with_context(|| format!("cannot open {}", a.image.display()))?;
    let out_path = a.out.clone().unwrap_or_else(|| a.image.clone());
    let moving = a.out.is_none();
    if !moving && same_file(&a.image, &out_path) {
        bail!("{}: the output would overwrite the input", out_path.display());
    }
    if image::is_qcow2(&input) && a.src_offset == 0 {
        if !a.raw || a.all_data || a.scramble || a.superblock.is_some() || a.dest_offset != 0 || a.check {
            bail!(
                "{}: a QCOW2 image can only be turned back into raw (-r alone)",
                a.image.display()
            );
        }
        let out = create(&out_path)?;
        let n = image::qcow2_to_raw(&input, &out).with_context(|| format!("{}", a.image.display()))?;
        outln!("{}: {n} blocks restored from QCOW2", out_path.display());
        return Ok(());
    }
    drop(input);
    if !a.force
        && let Some(why) = written_elsewhere(&a.image)
    {
        bail!(
            "{}: {why}: an image of a file system mounted read-write can be inconsistent and useless \
             for debugging; -f copies it anyway",
            a.image.display()
        );
    }
    let fs = open_source(&a)?;
    let opts = ImageOptions {
        all_data: a.all_data,
        scramble: a.scramble,
    };
    let set = fs.metadata_blocks(&opts)?;
    for w in &set.warnings {
        eprintln!("ext4kit image: {w}");
    }
    if a.raw {
        return write_raw(&a, &fs, &set, &out_path, moving);
    }
    if a.dry_run {
        outln!("{}: {} blocks would be written", out_path.display(), set.count());
        return Ok(());
    }
    let out = create(&out_path)?;
    let stats = fs.write_qcow2_image(&set, &out)?;
    outln!(
        "{}: {} blocks of {} bytes chosen, {} written ({} all zeros), {} bytes",
        out_path.display(),
        stats.blocks,
        fs.block_size(),
        stats.written,
        stats.blocks - stats.written,
        stats.file_bytes
    );
    if a.scramble {
        outln!("names scrambled: {}, kept: {}", stats.names_scrambled, stats.names_kept);
    }
    Ok(())
}

/// Why the image may change under the copy, as e2image refuses: a kernel
/// mount that is not read-only, or another ext4kit writer's lock.
fn written_elsewhere(image: &Path) -> Option<String> {
    let dev = FileDevice::open(image, false).ok()?;
    match dev.in_use()? {
        InUse::Mounted { mount_point, .. } if mounted_read_only(mount_point) => None,
        InUse::Swap => None,
        other => Some(other.to_string()),
    }
}

/// True when /proc/mounts lists `dir` with the `ro` option.
fn mounted_read_only(dir: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return false;
    };
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && Path::new(f[1]) == dir && f[3].split(',').any(|o| o == "ro")
    })
}

/// The source, read-only, from `-o` on when given.
fn open_source(a: &Args) -> Result<Filesystem> {
    let args = ImageArgs {
        image: a.image.clone(),
        ignore_checksums: true,
        ignore_journal: true,
        superblock: a.superblock,
        block_size: a.block_size,
        journal: None,
        undo: Default::default(),
        keys: Vec::new(),
    };
    if a.src_offset == 0 {
        return open_ro(&args);
    }
    let dev = FileDevice::open(&a.image, false).context("cannot open the image")?;
    let dev = OffsetDevice::new(Box::new(dev), a.src_offset).with_context(|| format!("-o {}", a.src_offset))?;
    let opts = OpenOptions {
        verify_checksums: false,
        dirty_journal: DirtyJournal::ReadStale,
        superblock: a.superblock.map(|block| SuperblockAt::Block {
            block,
            block_size: a.block_size,
        }),
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev), opts)
        .with_context(|| format!("{}: no file system at byte {}", a.image.display(), a.src_offset))
}

/// `-r`: to standard output, a new file, an existing one in place, or the
/// source file itself (a move).
fn write_raw(a: &Args, fs: &Filesystem, set: &image::MetadataBlocks, out: &Path, moving: bool) -> Result<()> {
    let mut bar = Progress::new(a.progress, set.count());
    let dry = a.dry_run;
    let mut each = |b: RawBlock| {
        if dry && b.written {
            let _ = writeln!(std::io::stdout(), "Writing block {}", b.block);
        }
        bar.step();
    };
    let mut opts = RawOptions {
        dest_offset: a.dest_offset,
        skip_same: a.check,
        dry_run: dry,
        descending: moving && a.dest_offset > a.src_offset,
        existing: false,
    };
    let stats = if out == Path::new("-") {
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        fs.write_raw_image_to(set, RawSink::Stream(&mut lock), opts, &mut each)?
    } else {
        opts.existing = out.exists();
        let file = if dry {
            File::open(out).or_else(|_| File::open("/dev/null"))
        } else {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(out)
        }
        .with_context(|| format!("cannot open {}", out.display()))?;
        fs.write_raw_image_to(set, RawSink::File(&file), opts, &mut each)?
    };
    bar.finish(stats.blocks);
    report_raw(a, fs, out, &stats)
}

fn report_raw(a: &Args, fs: &Filesystem, out: &Path, s: &RawStats) -> Result<()> {
    let line = format!(
        "{}: {} blocks of {} bytes chosen, {} {} ({} all zeros, {} already there)",
        out.display(),
        s.blocks,
        fs.block_size(),
        s.written,
        if a.dry_run { "would be written" } else { "written" },
        s.zeros,
        s.same
    );
    // The image itself may be on standard output.
    let to_stdout = out == Path::new("-");
    if to_stdout {
        eprintln!("{line}");
    } else {
        outln!("{line}");
    }
    if a.check {
        outln!("{} blocks already contained the data to be copied", s.same);
    }
    if a.scramble {
        let names = format!("names scrambled: {}, kept: {}", s.names_scrambled, s.names_kept);
        if to_stdout {
            eprintln!("{names}");
        } else {
            outln!("{names}");
        }
    }
    Ok(())
}

/// `-p`: blocks copied of the set, redrawn on standard error at most once
/// a second, then e2image's closing line.
struct Progress {
    on: bool,
    total: u64,
    done: u64,
    start: Instant,
    last: Instant,
}

impl Progress {
    fn new(on: bool, total: u64) -> Self {
        let now = Instant::now();
        Self {
            on,
            total,
            done: 0,
            start: now,
            last: now,
        }
    }

    fn step(&mut self) {
        self.done += 1;
        if self.on && self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            eprint!(
                "\rCopying {} / {} blocks ({}%)",
                self.done,
                self.total,
                percent(self.done, self.total)
            );
        }
    }

    fn finish(&self, total: u64) {
        if !self.on {
            return;
        }
        let s = self.start.elapsed().as_secs();
        eprintln!(
            "\rCopied {} / {total} blocks ({}%) in {:02}:{:02}:{:02}       ",
            self.done,
            percent(self.done, total),
            s / 3600,
            s / 60 % 60,
            s % 60
        );
    }
}

fn percent(done: u64, total: u64) -> u64 {
    (done * 100).checked_div(total).unwrap_or(100)
}

fn create(path: &Path) -> Result<File> {
    File::create(path).with_context(|| format!("cannot create {}", path.display()))
}

/// True when both paths name one existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
