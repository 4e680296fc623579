//! Undo files: `-z FILE` on `mkfs`, `tune`, `resize` (and `fsck`) saves
//! what the command overwrites in e2fsprogs' `E2UNDO02` format, and
//! `ext4kit undo FILE IMAGE` puts the image back byte for byte. Both
//! directions with e2fsprogs: `e2undo` replays our files, `ext4kit undo`
//! replays those of `mke2fs -z`, `tune2fs -z`, `resize2fs -z` and
//! `e2fsck -z`. A damaged undo file, or one made for another image, is
//! refused with the image untouched. Every image written is e2fsck -fn
//! clean where it should be.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::tools::{assert_fsck_clean, e2fsck_fn, require_tools, run_ok};

fn have_tools() -> bool {
    match require_tools(&[
        "mkfs.ext4",
        "e2fsck",
        "e2undo",
        "tune2fs",
        "resize2fs",
        "debugfs",
        "dumpe2fs",
    ]) {
        Ok(()) => true,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "CI must have e2fsprogs: {why}");
            ext4kit_testkit::skipped!("{why}");
            false
        }
    }
}

fn ext4kit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit")).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An image of `fs_size` made by mkfs.ext4 from a tree of 40 files, in a
/// file of `file_size`.
fn populated(dir: &Path, extra: &[&str], fs_size: &str, file_size: u64) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..40u32 {
        let byte = (i * 7 % 251) as u8;
        std::fs::write(src.join(format!("sub/f{i}")), vec![byte; 2500 * i as usize]).unwrap();
    }
    let img = dir.join("u.img");
    let mut args = vec!["-q", "-F"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-d", s(&src), s(&img), fs_size]);
    run_ok("mkfs.ext4", &args).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(file_size).unwrap();
    img
}

fn e2undo(undo: &Path, img: &Path) {
    run_ok("e2undo", &[s(undo), s(img)]).unwrap();
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn mkfs_over_a_populated_image_is_undone_byte_for_byte() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "64M", 64 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("mkfs.undo");
    ok(&["mkfs", "-q", "-F", "-z", s(&undo), s(&img)]);
    assert!(bytes(&img) != before, "mkfs changed nothing");
    assert_fsck_clean(&img).unwrap();
    let dry = ok(&["undo", "-n", s(&undo), s(&img)]);
    assert!(dry.contains("would be written"), "{dry}");
    assert!(bytes(&img) != before, "a dry run wrote");
    ok(&["undo", s(&undo), s(&img)]);
    assert!(bytes(&img) == before, "ext4kit undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
    // The same with e2undo replaying our file.
    let undo2 = dir.path().join("mkfs2.undo");
    ok(&["mkfs", "-q", "-F", "-t", "ext2", "-z", s(&undo2), s(&img)]);
    e2undo(&undo2, &img);
    assert!(bytes(&img) == before, "e2undo did not restore the image");
}

#[test]
fn tune_feature_changes_are_undone_by_both() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &["-O", "^metadata_csum,uninit_bg"], "32M", 32 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("tune.undo");
    let z = s(&undo);
    ok(&[
        "tune",
        "-z",
        z,
        "-O",
        "^dir_index",
        "-O",
        "metadata_csum",
        "-L",
        "undone",
        s(&img),
    ]);
    assert!(bytes(&img) != before);
    assert_fsck_clean(&img).unwrap();
    ok(&["undo", "-v", z, s(&img)]);
    assert!(bytes(&img) == before, "ext4kit undo did not restore the image");
    let undo2 = dir.path().join("tune2.undo");
    ok(&[
        "tune",
        "-z",
        s(&undo2),
        "-O",
        "metadata_csum",
        "-e",
        "remount-ro",
        s(&img),
    ]);
    assert_fsck_clean(&img).unwrap();
    e2undo(&undo2, &img);
    assert!(bytes(&img) == before, "e2undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_resize_grow_is_undone() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The file is already the new size: undo puts blocks back but never
    // shortens a file (neither does e2undo).
    let img = populated(dir.path(), &[], "32M", 96 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("resize.undo");
    ok(&["resize", "-z", s(&undo), s(&img)]);
    assert!(bytes(&img) != before);
    assert_fsck_clean(&img).unwrap();
    ok(&["undo", s(&undo), s(&img)]);
    assert!(bytes(&img) == before, "ext4kit undo did not restore the image");
    let undo2 = dir.path().join("resize2.undo");
    ok(&["resize", "-z", s(&undo2), s(&img), "64M"]);
    e2undo(&undo2, &img);
    assert!(bytes(&img) == before, "e2undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_fsck_repair_is_undone() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 32 << 20);
    run_ok("debugfs", &["-w", "-R", "set_bg 1 free_blocks_count 17", s(&img)]).unwrap();
    run_ok("debugfs", &["-w", "-R", "freeb 9000 20", s(&img)]).unwrap();
    assert_eq!(e2fsck_fn(&img).unwrap().code, 4, "the damage is real");
    let damaged = bytes(&img);
    let undo = dir.path().join("fsck.undo");
    let out = ext4kit(&["fsck", "-fy", "-z", s(&undo), s(&img)]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert_fsck_clean(&img).unwrap();
    ok(&["undo", s(&undo), s(&img)]);
    assert!(
        bytes(&img) == damaged,
        "ext4kit undo did not bring the damaged image back"
    );
    // e2fsck's undo file, replayed by ext4kit undo.
    let e2undo_file = dir.path().join("e2fsck.undo");
    let e = ext4kit_testkit::tools::run("e2fsck", &["-fy", "-z", s(&e2undo_file), s(&img)]).unwrap();
    assert_eq!(e.code, Some(1), "{}", e.combined());
    assert_fsck_clean(&img).unwrap();
    ok(&["undo", s(&e2undo_file), s(&img)]);
    assert!(bytes(&img) == damaged, "ext4kit undo did not undo e2fsck");
}

#[test]
fn e2fsprogs_undo_files_replay_with_ext4kit_undo() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 64 << 20);
    let before = bytes(&img);
    let steps: [(&str, &[&str]); 3] = [
        ("mke2fs", &["-q", "-F", "-t", "ext4"]),
        ("tune2fs", &["-O", "^has_journal,metadata_csum", "-L", "x"]),
        ("resize2fs", &["-f"]),
    ];
    for (tool, args) in steps {
        let undo = dir.path().join(format!("{tool}.undo"));
        let mut argv: Vec<&str> = args.to_vec();
        argv.extend_from_slice(&["-z", s(&undo), s(&img)]);
        run_ok(tool, &argv).unwrap();
        assert!(bytes(&img) != before, "{tool} changed nothing");
        ok(&["undo", s(&undo), s(&img)]);
        assert!(bytes(&img) == before, "ext4kit undo did not undo {tool}");
    }
    assert_fsck_clean(&img).unwrap();
}

/// Runs `ext4kit undo` expecting a refusal whose message contains `why`,
/// and the image unchanged.
fn refused(undo: &Path, img: &Path, why: &str) {
    let before = bytes(img);
    let out = ext4kit(&["undo", s(undo), s(img)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{} was replayed", undo.display());
    assert!(err.contains(why), "expected {why:?} in: {err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(bytes(img) == before, "a refused undo file changed the image");
}

#[test]
fn damaged_or_foreign_undo_files_are_refused_and_the_image_untouched() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 32 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("good.undo");
    ok(&["tune", "-z", s(&undo), "-O", "^dir_index", "-L", "changed", s(&img)]);
    let good = bytes(&undo);
    let after = bytes(&img);
    let bad = dir.path().join("bad.undo");
    let variant = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        edit(&mut b);
        std::fs::write(&bad, b).unwrap();
    };
    variant(&|b| b.truncate(b.len() / 2));
    refused(&bad, &img, "corrupt undo file");
    variant(&|b| b.truncate(100));
    refused(&bad, &img, "not an undo file");
    variant(&|b| b[9] ^= 1);
    refused(&bad, &img, "header_crc");
    variant(&|b| {
        let n = b.len();
        b[n - 10] ^= 0xff;
    });
    refused(&bad, &img, "checksum error in the saved file-system block");
    variant(&|b| b[3000] ^= 1);
    refused(&bad, &img, "crc");
    // Made for the image before another change: the superblock differs.
    ok(&["tune", "-L", "again", s(&img)]);
    refused(&undo, &img, "superblock doesn't match");
    // Forced, it replays (and marks the image for a check).
    ok(&["undo", "-f", s(&undo), s(&img)]);
    assert!(bytes(&img) != after);
    let e = e2fsck_fn(&img).unwrap();
    assert!(e.code != 8, "{}", e.output);
    // Restored from a fresh copy, the good file still works.
    std::fs::write(&img, &after).unwrap();
    ok(&["undo", s(&undo), s(&img)]);
    assert!(bytes(&img) == before);
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn an_existing_undo_file_is_not_overwritten_and_a_failed_command_leaves_none() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 32 << 20);
    let undo = dir.path().join("taken.undo");
    std::fs::write(&undo, b"precious").unwrap();
    let out = ext4kit(&["tune", "-z", s(&undo), "-L", "x", s(&img)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    assert_eq!(bytes(&undo), b"precious");
    let fresh = dir.path().join("fresh.undo");
    let out = ext4kit(&["tune", "-z", s(&fresh), "-O", "no_such_feature", s(&img)]);
    assert!(!out.status.success());
    assert!(!fresh.exists(), "a tune that wrote nothing left an undo file");
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn an_unfinished_undo_file_replays_and_marks_the_image_for_a_check() {
    use ext4kit_format::undo::{HEADER_SIZE, UndoHeader};
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 32 << 20);
    let undo = dir.path().join("cut.undo");
    ok(&["tune", "-z", s(&undo), "-O", "^dir_index", "-L", "cut", s(&img)]);
    // As a command interrupted after its last write would leave it.
    let mut file = bytes(&undo);
    let (mut h, crc) = UndoHeader::decode(&file).unwrap();
    assert!(crc.is_ok() && h.finished());
    h.state = 0;
    file[..HEADER_SIZE].copy_from_slice(&h.encode());
    std::fs::write(&undo, file).unwrap();
    let out = ext4kit(&["undo", s(&undo), s(&img)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("incomplete undo record"));
    let sb = run_ok("dumpe2fs", &["-h", s(&img)]).unwrap().stdout;
    assert!(sb.contains("Filesystem volume name:   <none>"), "{sb}");
    assert!(sb.contains("not clean"), "{sb}");
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn one_undo_file_undoes_a_series_of_commands_from_either_suite() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 64 << 20);
    let before = bytes(&img);
    // ext4kit, then e2fsprogs, then ext4kit again, into one file.
    let undo = dir.path().join("series.undo");
    let z = s(&undo);
    ok(&["tune", "-z", z, "-O", "^dir_index", "-L", "one", s(&img)]);
    run_ok("tune2fs", &["-z", z, "-L", "two", s(&img)]).unwrap();
    ok(&["resize", "-z", z, s(&img)]);
    assert_fsck_clean(&img).unwrap();
    ok(&["undo", z, s(&img)]);
    assert!(bytes(&img) == before, "ext4kit undo did not undo the series");
    // e2fsprogs first, ext4kit after, replayed by e2undo.
    let undo2 = dir.path().join("series2.undo");
    let z2 = s(&undo2);
    run_ok("tune2fs", &["-z", z2, "-O", "^dir_index", s(&img)]).unwrap();
    ok(&["tune", "-z", z2, "-L", "three", s(&img)]);
    ok(&["mkfs", "-q", "-F", "-z", z2, s(&img)]);
    e2undo(&undo2, &img);
    assert!(bytes(&img) == before, "e2undo did not undo the series");
    // A file made for the image as it was before is not continued.
    let stale = dir.path().join("stale.undo");
    ok(&["tune", "-z", s(&stale), "-L", "four", s(&img)]);
    ok(&["tune", "-L", "five", s(&img)]);
    let out = ext4kit(&["tune", "-z", s(&stale), "-L", "six", s(&img)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not this image's undo file"));
    assert_fsck_clean(&img).unwrap();
}

/// `debug -w -z`: every raw write (superblock field, inode field, group
/// descriptor, bitmaps, links) is saved first, so the image comes back
/// byte for byte and clean, with either replayer.
#[test]
fn debug_writes_are_undone_byte_for_byte() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "16M", 16 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("debug.undo");
    let cmds = dir.path().join("cmds");
    std::fs::write(
        &cmds,
        "ssv mnt_count 9\nsif /sub/f3 mode 0100600\nset_bg 1 itable_unused 3\n\
         setb 9000 4\nfreei 20\nlink /sub/f5 /f5again\nunlink /sub/f7\n",
    )
    .unwrap();
    let z = s(&undo);
    ok(&["debug", "-w", "-z", z, s(&img), "-f", s(&cmds)]);
    assert!(bytes(&img) != before, "debug -w changed nothing");
    let header = ok(&["undo", "--header", z, s(&img)]);
    assert!(header.contains("state:\t\t0x1"), "not finished: {header}");
    ok(&["undo", z, s(&img)]);
    assert!(bytes(&img) == before, "ext4kit undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
    std::fs::remove_file(&undo).unwrap();
    ok(&["debug", "-w", "-z", z, s(&img), "ssv", "state", "0"]);
    e2undo(&undo, &img);
    assert!(bytes(&img) == before, "e2undo did not restore the image");
}

/// `-z` on the editing commands: a series (mkdir, write, chmod, mv, ln,
/// rm, fallocate --undo) into one undo file, each continuing the file the
/// one before finished, is undone in one replay, by e2undo too; a failed
/// command leaves the file as it was; a reading command refuses `-z`.
#[test]
fn a_series_of_edits_into_one_undo_file_is_undone() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "16M", 16 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("edits.undo");
    let (z, i) = (s(&undo), s(&img));
    let series = |z: &str| {
        ok(&["mkdir", "-z", z, i, "/new", "/new/deeper"]);
        let mut w = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
            .args(["write", "-z", z, i, "/new/data"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut w.stdin.take().unwrap(), &vec![0x5A; 300_000]).unwrap();
        assert!(w.wait().unwrap().success());
        ok(&["chmod", "-z", z, i, "600", "/sub/f2"]);
        ok(&["mv", "-z", z, i, "/sub/f4", "/new/f4"]);
        ok(&["ln", "-z", z, i, "-s", "/new/data", "/link"]);
        ok(&["rm", "-z", z, i, "/sub/f9"]);
        ok(&[
            "fallocate",
            "--undo",
            z,
            i,
            "/new/data",
            "-p",
            "-o",
            "4096",
            "-l",
            "65536",
        ]);
    };
    series(z);
    assert_fsck_clean(&img).unwrap();
    assert!(bytes(&img) != before, "the edits changed nothing");
    // A command that fails before writing leaves the file finished.
    assert!(!ext4kit(&["mkdir", "-z", z, i, "/new"]).status.success());
    let header = ok(&["undo", "--header", z, i]);
    assert!(header.contains("state:\t\t0x1"), "not finished: {header}");
    let out = ext4kit(&["ls", "-z", z, i, "/"]);
    assert!(!out.status.success(), "ls took -z");
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not write"));
    ok(&["undo", z, i]);
    assert!(bytes(&img) == before, "ext4kit undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
    std::fs::remove_file(&undo).unwrap();
    series(z);
    e2undo(&undo, &img);
    assert!(bytes(&img) == before, "e2undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
}

/// `--undo-sync close` (one sync at the end, as e2fsprogs) makes the same
/// kind of file: mkfs, an edit and a tune into it, undone by e2undo; without
/// `-z` the option is refused.
#[test]
fn an_undo_file_synced_at_close_is_undone_too() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "16M", 16 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("close.undo");
    let (z, i) = (s(&undo), s(&img));
    ok(&["mkfs", "-q", "-F", "-z", z, "--undo-sync", "close", i]);
    ok(&["mkdir", "-z", z, "--undo-sync", "close", i, "/d"]);
    ok(&["tune", "-z", z, "--undo-sync", "close", "-L", "closed", i]);
    assert_fsck_clean(&img).unwrap();
    assert!(!ext4kit(&["mkdir", "--undo-sync", "close", i, "/e"]).status.success());
    e2undo(&undo, &img);
    assert!(bytes(&img) == before, "e2undo did not restore the image");
    assert_fsck_clean(&img).unwrap();
}

/// `fsck -z` continues the undo file the commands before left: damage
/// made with `debug -w -z`, repaired with `fsck -fy -z` into the same
/// file, and one replay (ours, or e2undo) gives back the image from before
/// the damage.
#[test]
fn fsck_continues_an_undo_file() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 32 << 20);
    let before = bytes(&img);
    let undo = dir.path().join("series.undo");
    let (z, i) = (s(&undo), s(&img));
    for replayer in ["ext4kit", "e2undo"] {
        ok(&["debug", "-w", "-z", z, i, "set_bg", "1", "free_blocks_count", "17"]);
        ok(&["debug", "-w", "-z", z, i, "freeb", "9000", "20"]);
        assert_eq!(e2fsck_fn(&img).unwrap().code, 4, "the damage is real");
        let out = ext4kit(&["fsck", "-fy", "-z", z, i]);
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
        assert!(String::from_utf8_lossy(&out.stdout).contains("blocks saved in"));
        assert_fsck_clean(&img).unwrap();
        if replayer == "ext4kit" {
            ok(&["undo", z, i]);
        } else {
            e2undo(&undo, &img);
        }
        assert!(
            bytes(&img) == before,
            "{replayer} did not undo the damage and the repair"
        );
        assert_fsck_clean(&img).unwrap();
        std::fs::remove_file(&undo).unwrap();
    }
}

/// `undo -z`: an undo undone, both ways with e2undo (our undo's undo
/// file replayed by e2undo, e2undo -z's replayed by us), each step
/// byte for byte; and neither the replayed file nor the image is taken
/// as the new undo file.
#[test]
fn an_undo_can_itself_be_undone_by_either_suite() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = populated(dir.path(), &[], "32M", 32 << 20);
    let before = bytes(&img);
    let t = dir.path().join("tune.undo");
    run_ok("tune2fs", &["-z", s(&t), "-O", "^metadata_csum", s(&img)]).unwrap();
    let after = bytes(&img);
    assert!(after != before, "tune2fs changed nothing");
    let back = dir.path().join("back.undo");
    for refused in [&t, &img] {
        let out = ext4kit(&["undo", "-z", s(refused), s(&t), s(&img)]);
        assert!(!out.status.success(), "-z {} taken", refused.display());
        assert!(bytes(&img) == after, "a refused -z wrote");
    }
    ok(&["undo", "-z", s(&back), s(&t), s(&img)]);
    assert!(bytes(&img) == before, "ext4kit undo -z did not undo");
    e2undo(&back, &img);
    assert!(bytes(&img) == after, "e2undo of ext4kit's -z file did not redo");
    run_ok("e2undo", &["-z", s(&dir.path().join("e2.undo")), s(&t), s(&img)]).unwrap();
    assert!(bytes(&img) == before, "e2undo -z did not undo");
    ok(&["undo", s(&dir.path().join("e2.undo")), s(&img)]);
    assert!(bytes(&img) == after, "ext4kit undo of e2undo's -z file did not redo");
    assert_fsck_clean(&img).unwrap();
}

/// `undo -o`: a file system 1 MiB into its file. mke2fs `-E offset=`
/// records the offset in its undo file, which we follow (and `-z` records
/// it again, for e2undo); an undo file made without one is replayed at
/// `-o`, as e2undo -o does.
#[test]
fn undo_follows_the_file_systems_offset() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = populated(dir.path(), &[], "32M", 32 << 20);
    let plain = bytes(&fs);
    let img = dir.path().join("off.img");
    let mut disk: Vec<u8> = (0..1u32 << 20).map(|i| (i * 31 % 251) as u8).collect();
    disk.extend_from_slice(&plain);
    std::fs::write(&img, &disk).unwrap();
    let m = dir.path().join("mke2fs.undo");
    run_ok(
        "mke2fs",
        &[
            "-q",
            "-F",
            "-t",
            "ext4",
            "-z",
            s(&m),
            "-E",
            "offset=1048576",
            s(&img),
            "32M",
        ],
    )
    .unwrap();
    let after = bytes(&img);
    assert!(after != disk, "mke2fs changed nothing");
    assert!(ok(&["undo", "--header", s(&m), s(&img)]).contains("fs offset:\t1048576"));
    let back = dir.path().join("back.undo");
    ok(&["undo", "-z", s(&back), s(&m), s(&img)]);
    assert!(
        bytes(&img) == disk,
        "the offset recorded in the undo file was not followed"
    );
    assert!(ok(&["undo", "--header", s(&back), s(&img)]).contains("fs offset:\t1048576"));
    e2undo(&back, &img);
    assert!(bytes(&img) == after, "e2undo of our -z file at an offset");
    // A file made for the bare file system, replayed 1 MiB in.
    let t = dir.path().join("label.undo");
    let bare = dir.path().join("u.img");
    run_ok("tune2fs", &["-z", s(&t), "-L", "moved", s(&bare)]).unwrap();
    let mut labelled = disk[..1 << 20].to_vec();
    labelled.extend_from_slice(&bytes(&bare));
    for tool in ["ext4kit", "e2undo"] {
        std::fs::write(&img, &labelled).unwrap();
        if tool == "e2undo" {
            run_ok("e2undo", &["-o", "1048576", s(&t), s(&img)]).unwrap();
        } else {
            ok(&["undo", "-o", "1048576", s(&t), s(&img)]);
        }
        assert!(bytes(&img) == disk, "{tool} -o did not restore the image");
    }
    assert_fsck_clean(&bare).unwrap();
}
