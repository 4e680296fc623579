//! `rename(2)` and `renameat2` (`ext4_rename`, `ext4_cross_rename`): plain
//! moves, replacing an existing name, `RENAME_NOREPLACE`, and
//! `RENAME_EXCHANGE`; a directory that changes parent gets its ".." and both
//! parents' link counts fixed.

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::write::{set_times, touch_ctime};
use crate::inode::{Inode, ROOT_INO};
use crate::txn::Txn;

/// `renameat2` flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with [`Error::Exists`] rather than replace (`RENAME_NOREPLACE`).
    pub noreplace: bool,
    /// Swap the two names, both of which must exist (`RENAME_EXCHANGE`).
    pub exchange: bool,
}

impl Filesystem {
    /// Renames `old_parent/old_name` to `new_parent/new_name`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Exists`] (noreplace), [`Error::IsDir`] /
    /// [`Error::NotDir`] for a type mismatch with the replaced name,
    /// [`Error::NotEmpty`], [`Error::InvalidArgument`] for moving a directory
    /// into itself, [`Error::NotPermitted`] when a name or inode involved is
    /// immutable or append-only. Nothing changes on error.
    pub fn rename(
        &self,
        old_parent: u32,
        old_name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let r = self.rename_in_txn(old_parent, old_name, new_parent, new_name, flags);
        self.noting_errors("rename", r)
    }

    fn rename_in_txn(
        &self,
        old_parent: u32,
        old_name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        super::check_new_name(old_name)?;
        super::check_new_name(new_name)?;
        let [old_disk, new_disk] = self.rename_disk_names(old_parent, old_name, new_parent, new_name)?;
        let (old_name, new_name): (&[u8], &[u8]) = (&old_disk, &new_disk);
        self.write_back_replacing(old_parent, old_name, new_parent, new_name)?;
        let mut txn = Txn::begin(self)?;
        // Every lookup first, on the directories as on disk.
        let src_ino = self.lookup_disk(&txn.inode(old_parent)?, old_name)?;
        let dst_ino = match self.lookup_disk(&txn.inode(new_parent)?, new_name) {
            Ok(ino) => Some(ino),
            Err(Error::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        if old_parent != new_parent {
            self.check_permitted_context(&txn.inode(new_parent)?, &txn.inode(src_ino)?)?;
            if let Some(d) = dst_ino.filter(|_| flags.exchange) {
                self.check_permitted_context(&txn.inode(old_parent)?, &txn.inode(d)?)?;
            }
        }
        let shown = || String::from_utf8_lossy(new_name).into_owned();
        // As do_renameat2: an existing target under NOREPLACE is EEXIST
        // before any other check (moving into itself included).
        if flags.noreplace && dst_ino.is_some() {
            return Err(Error::Exists(shown()));
        }
        if dst_ino != Some(src_ino) {
            check_flags(&txn, (old_parent, src_ino), (new_parent, dst_ino))?;
        }
        if txn.inode(src_ino)?.is_dir() && old_parent != new_parent {
            self.refuse_loop(&txn, src_ino, new_parent)?;
        }
        if let Some(d) = dst_ino
            && flags.exchange
            && txn.inode(d)?.is_dir()
            && old_parent != new_parent
        {
            self.refuse_loop(&txn, d, old_parent)?;
        }
        let src = txn.inode(src_ino)?;
        let dst = dst_ino.map(|d| txn.inode(d)).transpose()?;
        txn.check_project_move(&txn.inode(new_parent)?, &src)?;
        if let Some(d) = dst.as_ref().filter(|_| flags.exchange) {
            txn.check_project_move(&txn.inode(old_parent)?, d)?;
        }
        match dst {
            None if flags.exchange => Err(Error::NotFound(shown())),
            Some(_) if flags.noreplace => Err(Error::Exists(shown())),
            Some(d) if d.ino == src.ino => Ok(()),
            Some(d) if flags.exchange => {
                exchange(&mut txn, (old_parent, old_name, src), (new_parent, new_name, d))?;
                txn.commit()
            }
            dst => {
                move_entry(&mut txn, (old_parent, old_name, src), (new_parent, new_name), dst)?;
                txn.commit()
            }
        }
    }

    /// Refuses to move directory `moving` under `target` when `target` is
    /// `moving` or one of its descendants.
    fn refuse_loop(&self, txn: &Txn<'_>, moving: u32, mut target: u32) -> Result<()> {
        for _ in 0..self.geo.inodes_count {
            if target == moving {
                return Err(Error::InvalidArgument("cannot move a directory into itself".into()));
            }
            if target == ROOT_INO {
                return Ok(());
            }
            target = self.lookup(&txn.inode(target)?, b"..")?;
        }
        Err(Error::InvalidArgument("directory parents form a loop".into()))
    }
}

/// The VFS's `may_delete` / `may_create` flag checks: the source and a
/// replaced target, and the directories they leave, must be neither
/// immutable nor append-only; the directory gaining a name must not be
/// immutable.
fn check_flags(txn: &Txn<'_>, from: (u32, u32), to: (u32, Option<u32>)) -> Result<()> {
    use super::flags::{require_changeable, require_mutable};
    require_changeable(&txn.inode(from.0)?)?;
    require_changeable(&txn.inode(from.1)?)?;
    require_mutable(&txn.inode(to.0)?)?;
    super::require_live(&txn.inode(to.0)?)?;
    if let Some(d) = to.1 {
        require_changeable(&txn.inode(to.0)?)?;
        require_changeable(&txn.inode(d)?)?;
    }
    Ok(())
}

fn code(inode: &Inode) -> Result<u8> {
    Ok(inode.file_type()?.dirent_code())
}

fn adjust_links(txn: &mut Txn<'_>, dir: u32, delta: i32) -> Result<()> {
    let mut d = txn.inode(dir)?;
    let links = i32::from(d.raw.links());
    // dir_nlink: a count of 1 means "too many to count" and stays so.
    if links != 1 {
        d.raw.i_links_count.set((links + delta).clamp(2, 65000) as u16);
    }
    set_times(&mut d.raw, clock::now(), false);
    txn.write_inode(&mut d)
}

fn move_entry(txn: &mut Txn<'_>, from: (u32, &[u8], Inode), to: (u32, &[u8]), dst: Option<Inode>) -> Result<()> {
    let (op, oname, mut src) = from;
    let (np, nname) = to;
    if let Some(d) = &dst {
        match (src.is_dir(), d.is_dir()) {
            (true, false) => return Err(Error::NotDir(String::from_utf8_lossy(nname).into_owned())),
            (false, true) => return Err(Error::IsDir(String::from_utf8_lossy(nname).into_owned())),
            (true, true) if !txn.dir_is_empty(d)? => {
                return Err(Error::NotEmpty(String::from_utf8_lossy(nname).into_owned()));
            }
            _ => {}
        }
    }
    let dirs_before = (txn.inode(op)?, txn.inode(np)?);
    let replaced = dst.as_ref().map(|d| (d.ino, d.is_dir(), d.raw.links()));
    // The new name first, then the old one goes, as ext4_rename orders
    // them (which decides where the names land in an inline directory).
    match &dst {
        Some(_) => txn.set_dir_name(np, nname, src.ino, code(&src)?)?,
        None => {
            let mut new_dir = txn.inode(np)?;
            txn.add_dir_name(&mut new_dir, nname, src.ino, code(&src)?, None)?;
            txn.write_inode(&mut new_dir)?;
        }
    }
    txn.remove_dir_name(op, oname)?;
    if let Some(mut d) = dst {
        super::remove::drop_link(txn, &mut d)?;
        if d.is_dir() {
            adjust_links(txn, np, -1)?;
        }
    }
    if src.is_dir() && op != np {
        txn.set_dir_name(src.ino, b"..", np, 2)?;
        src = txn.inode(src.ino)?;
        adjust_links(txn, op, -1)?;
        adjust_links(txn, np, 1)?;
    } else {
        adjust_links(txn, op, 0)?;
        if op != np {
            adjust_links(txn, np, 0)?;
        }
    }
    fc_note_move(txn, dirs_before, (oname, nname), src.ino, replaced)?;
    touch_ctime(&mut src.raw, clock::now());
    txn.write_inode(&mut src)
}

/// Notes a rename for fast commits as `ext4_rename` does: a replaced
/// name's `UNLINK`, the new name's `LINK`, the old name's `UNLINK`. A
/// directory's move needs a full commit (a replay cannot change "..",
/// EXT4_FC_REASON_RENAME_DIR), as does replacing a last link (see
/// [`Txn::fc_note_unlink`]).
fn fc_note_move(
    txn: &mut Txn<'_>,
    before: (Inode, Inode),
    names: (&[u8], &[u8]),
    src: u32,
    replaced: Option<(u32, bool, u16)>,
) -> Result<()> {
    use crate::journal::fast_commit::{NameChange, dentry};
    let (op, np) = (before.0.ino, before.1.ino);
    if txn.inode(src)?.is_dir() {
        txn.fc_ineligible("directory renamed");
        return Ok(());
    }
    let after = (txn.inode(op)?, txn.inode(np)?);
    if let Some((d, is_dir, links)) = replaced {
        if is_dir || links <= 1 {
            txn.fc_ineligible("last link replaced");
            return Ok(());
        }
        txn.fc_name(&before.1, &after.1, NameChange::Unlink(dentry(np, d, names.1)));
    }
    txn.fc_name(&before.1, &after.1, NameChange::Link(dentry(np, src, names.1)));
    txn.fc_name(&before.0, &after.0, NameChange::Unlink(dentry(op, src, names.0)));
    Ok(())
}

fn exchange(txn: &mut Txn<'_>, a: (u32, &[u8], Inode), b: (u32, &[u8], Inode)) -> Result<()> {
    let (ap, aname, mut ai) = a;
    let (bp, bname, mut bi) = b;
    // EXT4_FC_REASON_CROSS_RENAME.
    txn.fc_ineligible("cross rename");
    txn.set_dir_name(ap, aname, bi.ino, code(&bi)?)?;
    txn.set_dir_name(bp, bname, ai.ino, code(&ai)?)?;
    if ap != bp {
        if ai.is_dir() {
            txn.set_dir_name(ai.ino, b"..", bp, 2)?;
            ai = txn.inode(ai.ino)?;
        }
        if bi.is_dir() {
            txn.set_dir_name(bi.ino, b"..", ap, 2)?;
            bi = txn.inode(bi.ino)?;
        }
        let delta = i32::from(bi.is_dir()) - i32::from(ai.is_dir());
        adjust_links(txn, ap, delta)?;
        adjust_links(txn, bp, -delta)?;
    } else {
        adjust_links(txn, ap, 0)?;
    }
    let now = clock::now();
    touch_ctime(&mut ai.raw, now);
    touch_ctime(&mut bi.raw, now);
    txn.write_inode(&mut ai)?;
    txn.write_inode(&mut bi)
}
