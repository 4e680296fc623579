//! Opening images: feature policy, dirty journals, checksum failures and
//! truncated images each give the documented error, naming what and where.

mod common;

use common::{mkfs, open, open_rw, patch_sb};
use ext4kit_engine::{DirtyJournal, Error, Location, OpenOptions};
use ext4kit_format::features::IncompatFeatures;

#[test]
fn unknown_incompat_feature_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "8M") else {
        return;
    };
    patch_sb(&img, |sb| {
        sb.s_feature_incompat.set(sb.s_feature_incompat.get() | 1 << 30)
    });
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported(s) if s.contains("FEATURE_I30")),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EOPNOTSUPP);
}

/// A casefold image opens; one whose `s_encoding` has no known tables is
/// refused by name, as the kernel refuses to mount it.
#[test]
fn casefold_opens_and_an_unknown_encoding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "casefold"], "8M") else {
        return;
    };
    open(&img, OpenOptions::default()).unwrap();
    common::patch_sb(&img, |sb| sb.s_encoding.set(7));
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported(s) if s.contains("casefold encoding 7")),
        "{err}"
    );
}

/// Bigalloc images and external journal devices give the geometry fields
/// other meanings (bigalloc's `s_blocks_per_group` of 131072 is no error):
/// a bigalloc image opens for writing (`bigalloc_write.rs`), and a
/// journal device is refused by name instead of having a field called
/// corrupt.
#[test]
fn bigalloc_opens_and_journal_devices_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "bigalloc"], "256M") else {
        return;
    };
    let fs = open_rw(&img);
    assert_eq!(fs.read_only_reason(), None);
    let jd = dir.path().join("journal.dev");
    std::fs::File::create(&jd).unwrap().set_len(16 << 20).unwrap();
    let out = std::process::Command::new("mke2fs")
        .args(["-q", "-F", "-O", "journal_dev"])
        .arg(&jd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = open(&jd, OpenOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported(s) if s.contains("journal_dev") && s.contains("not a file system")),
        "{err}"
    );
}

#[test]
fn unknown_ro_compat_feature_means_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "8M") else {
        return;
    };
    patch_sb(&img, |sb| {
        sb.s_feature_ro_compat.set(sb.s_feature_ro_compat.get() | 1 << 29)
    });
    let fs = open(&img, OpenOptions::default()).unwrap();
    assert!(fs.read_only_reason().unwrap().contains("FEATURE_R29"));
    assert!(
        fs.read_dir(&fs.resolve(b"/").unwrap())
            .unwrap()
            .iter()
            .any(|e| e.name == b"lost+found")
    );
}

#[test]
fn dirty_journal_is_reported_unless_stale_reads_are_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "8M") else {
        return;
    };
    patch_sb(&img, |sb| {
        sb.s_feature_incompat
            .set(sb.s_feature_incompat.get() | IncompatFeatures::RECOVER.0)
    });
    let refuse = OpenOptions {
        dirty_journal: DirtyJournal::Refuse,
        ..OpenOptions::default()
    };
    assert!(matches!(open(&img, refuse), Err(Error::NeedsRecovery)));
    let opts = OpenOptions {
        dirty_journal: DirtyJournal::ReadStale,
        ..OpenOptions::default()
    };
    let fs = open(&img, opts).unwrap();
    assert!(fs.journal_info().needs_recovery);
    assert_eq!(fs.journal_info().superblock.as_ref().unwrap().start, 0);
}

#[test]
fn superblock_checksum_mismatch_names_the_superblock() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "8M") else {
        return;
    };
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(b"X", 1024 + 0x78).unwrap(); // s_volume_name, checksum not fixed
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadChecksum {
                at: Location::Superblock,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EBADMSG);
    let opts = OpenOptions {
        verify_checksums: false,
        ..OpenOptions::default()
    };
    assert_eq!(open(&img, opts).unwrap().superblock().volume_name(), "X");
}

#[test]
fn inode_checksum_mismatch_names_the_inode_and_can_be_overridden() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    let Some(img) = mkfs(dir.path(), Some(&src), &[], "8M") else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    let ino = fs.resolve(b"/f").unwrap().ino;
    let g = fs.geometry().clone();
    let table = fs.group_descs()[0].inode_table();
    drop(fs);
    let off = table * u64::from(g.block_size) + u64::from(ino - 1) * u64::from(g.inode_size);
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0o777u16 as u8], off + 0x60).unwrap(); // an unused extent slot of i_block
    let fs = open(&img, OpenOptions::default()).unwrap();
    let err = fs.resolve(b"/f").unwrap_err();
    assert!(
        matches!(err, Error::BadChecksum { at: Location::Inode(i), .. } if i == ino),
        "{err}"
    );
    let fs = open(
        &img,
        OpenOptions {
            verify_checksums: false,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert!(fs.resolve(b"/f").is_ok());
}

#[test]
fn truncated_image_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "8M") else {
        return;
    };
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(4 << 20).unwrap();
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("image holds only"), "{err}");
    f.set_len(100).unwrap();
    assert!(open(&img, OpenOptions::default()).is_err());
}

#[test]
fn not_an_ext_image_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("zeros");
    std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("not an ext2/ext3/ext4") && err.to_string().contains("zeros"),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EINVAL, "as the kernel's mount of another format");
}
