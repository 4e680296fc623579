//! Quotas kept by the engine on images made by mkfs.ext4 -O quota,project:
//! a workload across users, groups and projects, checked after each phase
//! with e2fsck -fn (which verifies every quota file's usage) and against
//! debugfs's `list_quota`; limits refuse with EDQUOT.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, Filesystem, NodeKind, QuotaLimits, ROOT_INO, RenameFlags, XattrSet, set_caller_uid};
use ext4kit_format::quota::QuotaType;
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs};

fn image(dir: &Path) -> Option<std::path::PathBuf> {
    mkfs(dir, None, &["-O", "quota,project", "-I", "256", "-b", "4096"], "64M")
}

/// id -> (bytes, inodes) as debugfs lists them.
fn debugfs_usage(img: &Path, t: QuotaType) -> BTreeMap<u32, (u64, u64)> {
    let out = debugfs(img, &format!("list_quota {}", t.name())).expect("debugfs");
    out.lines()
        .filter_map(|l| {
            let w: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (w.len() == 7).then(|| (w[0] as u32, (w[1], w[4])))
        })
        .filter(|(_, u)| *u != (0, 0))
        .collect()
}

/// `None`: the image keeps no `t` quota.
fn engine_usage(fs: &Filesystem, t: QuotaType) -> Option<BTreeMap<u32, (u64, u64)>> {
    let (_, es) = fs.quota_entries(t).expect("read")?;
    let m = es
        .into_iter()
        .map(|d| (d.id, (d.curspace, d.curinodes)))
        .filter(|(_, u)| *u != (0, 0))
        .collect();
    Some(m)
}

/// Unmounts, checks the image clean and the usage as debugfs reads it.
fn check(fs: Filesystem, img: &Path) -> Vec<BTreeMap<u32, (u64, u64)>> {
    fs.sync().expect("sync");
    let ours: Vec<_> = QuotaType::ALL.iter().map(|&t| engine_usage(&fs, t)).collect();
    fs.unmount().expect("unmount");
    assert_fsck_clean(img).expect("e2fsck -fn clean");
    for t in QuotaType::ALL {
        if let Some(u) = &ours[t as usize] {
            assert_eq!(&debugfs_usage(img, t), u, "{} usage", t.name());
        }
    }
    ours.into_iter().map(Option::unwrap_or_default).collect()
}

fn file(fs: &Filesystem, dir: u32, name: &str, uid: u32, gid: u32) -> u32 {
    let a = Attr { perm: 0o644, uid, gid };
    fs.create(dir, name.as_bytes(), NodeKind::Regular, a)
        .expect("create")
        .ino
}

#[test]
fn usage_follows_a_workload_and_e2fsck_agrees() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path()) else { return };
    let fs = open_rw(&img);
    let a = Attr {
        perm: 0o755,
        uid: 1000,
        gid: 100,
    };
    let p = fs.create(ROOT_INO, b"p", NodeKind::Directory, a).expect("mkdir").ino;
    fs.set_project(p, Some(7), Some(true)).expect("project");
    let f1 = file(&fs, p, "big", 1000, 100);
    fs.write(f1, 0, &vec![7u8; 300 << 10]).expect("write");
    let sub = fs.create(p, b"sub", NodeKind::Directory, a).expect("mkdir").ino;
    assert_eq!(fs.project(sub).expect("proj"), (7, true), "inherited");
    let f2 = file(&fs, ROOT_INO, "b", 1001, 101);
    fs.write(f2, 0, &vec![1u8; 64 << 10]).expect("write");
    fs.set_xattr(f2, b"user.big", &vec![2u8; 3000], XattrSet::Any)
        .expect("xattr block");
    let e = fs.link(f2, p, b"b").expect_err("other project");
    assert_eq!(e.errno(), libc::EXDEV);
    fs.link(f2, ROOT_INO, b"b2").expect("hard link");
    let u = check(fs, &img);
    assert_eq!(u[QuotaType::Project as usize][&7].1, 3, "p, big, sub");
    assert_eq!(
        u[QuotaType::User as usize][&1001].0,
        (64 << 10) + 4096,
        "data and xattr block"
    );

    let fs = open_rw(&img);
    let set = ext4kit_engine::SetAttr {
        uid: Some(1002),
        gid: Some(102),
        ..Default::default()
    };
    fs.setattr(f1, &set).expect("chown");
    fs.truncate(f1, 10 << 10).expect("truncate");
    fs.set_project(f2, Some(9), None).expect("project of b");
    fs.unlink(ROOT_INO, b"b").expect("unlink one name");
    let u = check(fs, &img);
    assert_eq!(u[QuotaType::User as usize][&1002], (12 << 10, 1));
    assert_eq!(u[QuotaType::Project as usize][&9], ((64 << 10) + 4096, 1));

    let fs = open_rw(&img);
    fs.unlink(ROOT_INO, b"b2").expect("unlink last name");
    fs.unlink(p, b"big").expect("unlink");
    let u = check(fs, &img);
    assert!(!u[QuotaType::User as usize].contains_key(&1001));
    assert!(!u[QuotaType::User as usize].contains_key(&1002));
}

/// Renames as `ext4_rename` and `ext4_cross_rename` allow them: into a
/// PROJINHERIT directory of another project is EXDEV (either side of an
/// exchange), within one project it moves no usage, and a replaced
/// target's charge is released with it.
#[test]
fn renames_keep_projects_apart_and_release_replaced_targets() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path()) else { return };
    let fs = open_rw(&img);
    let a = Attr {
        perm: 0o755,
        uid: 0,
        gid: 0,
    };
    let p = fs.create(ROOT_INO, b"p", NodeKind::Directory, a).expect("mkdir").ino;
    fs.set_project(p, Some(7), Some(true)).expect("project");
    let inside = file(&fs, p, "in", 1000, 100);
    fs.write(inside, 0, &vec![1u8; 40 << 10]).expect("write");
    let outside = file(&fs, ROOT_INO, "out", 1001, 101);
    fs.write(outside, 0, &vec![2u8; 20 << 10]).expect("write");
    let plain = RenameFlags::default();
    let e = fs
        .rename(ROOT_INO, b"out", p, b"out", plain)
        .expect_err("into project 7");
    assert_eq!(e.errno(), libc::EXDEV);
    let swap = RenameFlags {
        exchange: true,
        ..plain
    };
    let e = fs
        .rename(ROOT_INO, b"out", p, b"in", swap)
        .expect_err("exchange across");
    assert_eq!(e.errno(), libc::EXDEV);
    let sub = fs.create(p, b"sub", NodeKind::Directory, a).expect("mkdir").ino;
    fs.rename(p, b"in", sub, b"in", plain).expect("within project 7");
    let victim = file(&fs, ROOT_INO, "victim", 1002, 102);
    fs.write(victim, 0, &vec![3u8; 60 << 10]).expect("write");
    let u = check(fs, &img);
    assert_eq!(u[QuotaType::Project as usize][&7], ((40 << 10) + 2 * 4096, 3));
    assert_eq!(u[QuotaType::User as usize][&1002], (60 << 10, 1));

    let fs = open_rw(&img);
    fs.rename(ROOT_INO, b"out", ROOT_INO, b"victim", plain)
        .expect("replace");
    let u = check(fs, &img);
    assert!(!u[QuotaType::User as usize].contains_key(&1002), "{u:?}");
    assert!(!u[QuotaType::Group as usize].contains_key(&102), "{u:?}");
    assert_eq!(u[QuotaType::User as usize][&1001], (20 << 10, 1));
}

#[test]
fn limits_refuse_with_edquot_and_root_is_exempt() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path()) else { return };
    let fs = open_rw(&img);
    let hard = QuotaLimits {
        blocks_soft: 40,
        blocks_hard: 100,
        inodes_hard: 2,
        ..Default::default()
    };
    fs.set_quota_limits(QuotaType::User, 1000, hard).expect("limits");
    set_caller_uid(Some(1000));
    let f = file(&fs, ROOT_INO, "f", 1000, 100);
    let e = fs.write(f, 0, &vec![1u8; 200 << 10]).expect_err("past the hard limit");
    assert_eq!(e.errno(), libc::EDQUOT);
    fs.write(f, 0, &vec![1u8; 64 << 10]).expect("under the hard limit");
    let (_, es) = fs.quota_entries(QuotaType::User).unwrap().unwrap();
    let d = es.iter().find(|d| d.id == 1000).expect("entry");
    assert!(d.btime != 0, "over the soft limit: grace started");
    file(&fs, ROOT_INO, "g", 1000, 100);
    let e = fs
        .create(
            ROOT_INO,
            b"h",
            NodeKind::Regular,
            Attr {
                perm: 0o644,
                uid: 1000,
                gid: 100,
            },
        )
        .expect_err("inode hard limit");
    assert_eq!(e.errno(), libc::EDQUOT);
    set_caller_uid(Some(0));
    fs.write(f, 0, &vec![1u8; 200 << 10]).expect("root passes limits");
    set_caller_uid(None);
    let u = check(fs, &img);
    assert_eq!(u[QuotaType::User as usize][&1000], (200 << 10, 2));
    let out = debugfs(&img, "get_quota user 1000").expect("debugfs");
    assert!(out.contains("100") && out.contains("40"), "limits on disk: {out}");
}

/// Values in value inodes (`ea_inode`): the owner is charged the value's
/// blocks and one inode per entry, as e2fsck pass 1 counts them; shared
/// values charge each owner; the value inodes themselves are not charged.
#[test]
fn ea_inode_values_are_charged_as_e2fsck_counts_them() {
    let tmp = tempfile::tempdir().unwrap();
    let args = ["-O", "quota,ea_inode", "-I", "256", "-b", "4096"];
    let Some(img) = mkfs(tmp.path(), None, &args, "64M") else {
        return;
    };
    let big = |b: u8| vec![b; 9000];
    let fs = open_rw(&img);
    let f1 = file(&fs, ROOT_INO, "a", 1000, 100);
    fs.set_xattr(f1, b"user.v", &big(1), XattrSet::Any)
        .expect("large value");
    let u = check(fs, &img);
    assert_eq!(
        u[QuotaType::User as usize][&1000],
        (12 << 10, 2),
        "value blocks and one inode"
    );

    let fs = open_rw(&img);
    let f2 = file(&fs, ROOT_INO, "b", 1001, 101);
    fs.set_xattr(f2, b"user.v", &big(1), XattrSet::Any)
        .expect("shared value");
    for i in 0..6 {
        let name = format!("user.many{i}");
        fs.set_xattr(f2, name.as_bytes(), &big(10 + i), XattrSet::Any)
            .expect("more values, some named from the xattr block");
    }
    let u = check(fs, &img);
    assert_eq!(u[QuotaType::User as usize][&1001].1, 8, "the file and seven values");

    let fs = open_rw(&img);
    fs.set_xattr(f1, b"user.v", &vec![3u8; 5000], XattrSet::Replace)
        .expect("replace");
    fs.remove_xattr(f2, b"user.v").expect("remove");
    fs.remove_xattr(f2, b"user.many5").expect("remove");
    let u = check(fs, &img);
    assert_eq!(u[QuotaType::User as usize][&1000], (8 << 10, 2));
    assert_eq!(u[QuotaType::User as usize][&1001].1, 6);

    let fs = open_rw(&img);
    fs.unlink(ROOT_INO, b"a").expect("unlink owner");
    fs.unlink(ROOT_INO, b"b").expect("unlink owner");
    let u = check(fs, &img);
    assert!(!u[QuotaType::User as usize].contains_key(&1000));
    assert!(!u[QuotaType::User as usize].contains_key(&1001));
}
