//! jbd2 parsing against a journal the kernel wrote: loop-mount, write and
//! sync, copy the image while still mounted, then scan the journal inode.

mod e2tools;

use e2tools::{LoopMount, blocks_of, have_tools, mkfs, read_block, run};
use ext4kit_format::journal::descriptor::{self, Tag};
use ext4kit_format::journal::superblock::RawJournalSuperblock;
use ext4kit_format::journal::{BlockType, RawJournalHeader, commit, revoke};

#[test]
fn kernel_journal_blocks_parse_and_verify() {
    let test = "kernel_journal_blocks";
    if !have_tools(test, &["mkfs.ext4", "debugfs", "mount", "umount", "sync"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    mkfs(&img, &["-b", "4096"], "32M");
    let Some(mnt) = LoopMount::new(test, &img) else {
        return;
    };
    for i in 0..20 {
        std::fs::write(mnt.dir.join(format!("f{i}")), vec![i as u8; 5000]).unwrap();
    }
    std::fs::create_dir(mnt.dir.join("d")).unwrap();
    std::fs::remove_file(mnt.dir.join("f3")).unwrap();
    run(&mut std::process::Command::new("sync"));
    let copy = tmp.path().join("copy");
    std::fs::copy(&img, &copy).unwrap();
    mnt.unmount();

    let journal = blocks_of(&copy, "<8>");
    assert!(!journal.is_empty());
    let sb = RawJournalSuperblock::parse(&read_block(&copy, journal[0])).unwrap();
    sb.verify_checksum().unwrap();
    let p = sb.params().unwrap();
    assert!(p.has_csum_v3(), "expected journal_checksum_v3 from the kernel");

    let (mut descriptors, mut commits, mut data_checked) = (0, 0, 0);
    for (i, &phys) in journal.iter().enumerate().skip(1) {
        let block = read_block(&copy, phys);
        let Ok(h) = RawJournalHeader::parse(&block) else {
            continue;
        };
        match h.block_type() {
            Some(BlockType::Descriptor) => {
                descriptor::verify_checksum(&block, &p).unwrap();
                let (seq, tags) = descriptor::tags(&block, &p).unwrap();
                let tags: Vec<Tag> = tags.map(Result::unwrap).collect();
                assert!(!tags.is_empty());
                for (k, tag) in tags.iter().enumerate() {
                    let data = read_block(&copy, journal[i + 1 + k]);
                    descriptor::verify_data(&p, tag, seq, &data).unwrap();
                    data_checked += 1;
                }
                descriptors += 1;
            }
            Some(BlockType::Commit) => {
                commit::verify_checksum(&p, &block).unwrap();
                let c = commit::RawCommitHeader::parse(&block).unwrap();
                assert!(c.h_commit_sec.get() > 1_600_000_000);
                commits += 1;
            }
            Some(BlockType::Revoke) => {
                revoke::verify_checksum(&block, &p).unwrap();
                revoke::revoked(&block, &p).unwrap().1.for_each(drop);
            }
            _ => {}
        }
    }
    eprintln!("journal: {descriptors} descriptors, {commits} commits, {data_checked} data blocks");
    assert!(descriptors > 0 && commits > 0 && data_checked > 0);
}
