//! Pass 0, the resize inode (inode 7, `resize_inode`): a double-indirect
//! block whose entries are the primary reserved GDT blocks, each of which
//! lists that block's copies in the backup groups — the layout e2fsprogs
//! builds so that online resize can grow the descriptor table. e2fsck's
//! `check_resize_inode` rebuilds the inode when it does not match.

use ext4kit_format::inode::RawInode;

use crate::fs::RawFs;

fn word(b: &[u8], i: usize) -> u64 {
    b.get(i * 4..i * 4 + 4)
        .map_or(0, |w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
}

/// Checks the resize inode against the reserved GDT layout.
///
/// # Errors
/// What does not match, in words.
pub fn check(fs: &RawFs, raw: &RawInode) -> Result<(), String> {
    let rsv = u64::from(fs.sb.s_reserved_gdt_blocks.get());
    let ib: Vec<u64> = (0..15).map(|i| word(&raw.i_block, i)).collect();
    if ib.iter().enumerate().any(|(i, &b)| i != 13 && b != 0) {
        return Err("only the double-indirect pointer may be set".into());
    }
    if rsv == 0 {
        return Ok(());
    }
    let dind = ib[13];
    if !fs.valid_block(dind) {
        return Err(format!("double-indirect block {dind} is invalid"));
    }
    let buf = fs.read_block(dind).map_err(|e| e.to_string())?;
    let per = (fs.bs() / 4) as u64;
    let gdt = fs.gdt_blocks();
    let first = fs.group_base(0) + 1 + gdt;
    let backups: Vec<u32> = (1..fs.geo.group_count).filter(|&g| fs.has_super(g)).collect();
    for j in 0..rsv.min(per) {
        let pblk = first + j;
        let at = ((gdt + j) % per) as usize;
        if word(&buf, at) != pblk {
            return Err(format!("entry {at} of block {dind} should be {pblk}"));
        }
        let ind = fs.read_block(pblk).map_err(|e| e.to_string())?;
        for (k, &g) in backups.iter().enumerate().take(per as usize) {
            // libext2fs's `ext2fs_create_resize_inode` offsets the primary's
            // block by whole groups (one block past the backup's reserved
            // GDT block on a 1 KiB-block bigalloc file system).
            let want = pblk + u64::from(g) * u64::from(fs.geo.blocks_per_group);
            if word(&ind, k) != want {
                return Err(format!("reserved GDT block {pblk} entry {k} should be {want}"));
            }
        }
    }
    Ok(())
}
