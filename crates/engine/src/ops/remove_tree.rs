//! Removing a whole tree (`rm -r`): every entry below a directory, then the
//! directory, as one [`Batch`]. A tree whose removal fits in one commit of
//! the batch goes all at once or not at all; a larger one commits in
//! chunks, and a failure says how many entries are gone and where the walk
//! stopped ([`RemoveTreeError`]).
//!
//! The walk keeps its own stack instead of recursing, so the depth of the
//! tree (ext4 sets no limit: a chain of directories can be as deep as the
//! inode count allows) costs heap, one small frame per level, never the
//! thread's stack.

use std::collections::HashSet;

use ext4kit_format::inode::FileType;

use crate::batch::{Batch, BatchOptions};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// A tree removal that stopped part-way.
#[derive(Debug)]
pub struct RemoveTreeError {
    /// Why it stopped.
    pub error: Error,
    /// Entries removed for good (committed). 0: the image is as it was.
    pub removed: u64,
    /// The entry being removed when it stopped, as a path below the
    /// directory the tree was removed from (`top/a/b`). It, the directories
    /// above it up to `top`, and whatever the walk had not reached remain.
    pub stopped_at: Vec<u8>,
}

impl std::fmt::Display for RemoveTreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = String::from_utf8_lossy(&self.stopped_at);
        if self.removed == 0 {
            write!(f, "{at}: {}; nothing was removed", self.error)
        } else {
            write!(
                f,
                "{at}: {}; {} entries were removed before it, {at} and the rest of the tree remain",
                self.error, self.removed
            )
        }
    }
}

/// The message already says [`RemoveTreeError::error`]; it is not given
/// again as the source, so that a chain of messages names it once.
impl std::error::Error for RemoveTreeError {}

/// One directory on the walk's stack.
struct Level {
    ino: u32,
    /// Its name in its parent (the level before it on the stack).
    name: Vec<u8>,
    /// Subdirectories still to empty; `None` until it has been listed
    /// (listing removes everything else in it).
    subdirs: Option<Vec<(Vec<u8>, u32)>>,
}

impl Filesystem {
    /// Removes `name` from directory `parent` with everything below it:
    /// `rm -r`. A non-directory is simply unlinked. Returns the number of
    /// entries removed, `name` included.
    ///
    /// Runs as one [`Batch`] with the default [`BatchOptions`]: a tree
    /// of up to 16,384 entries (and 64 MiB of changed metadata) is removed
    /// in a single commit, whole or not at all — on an image with a
    /// journal, across a crash too.
    ///
    /// # Errors
    /// What [`Filesystem::unlink`] and [`Filesystem::rmdir`] return, in a
    /// [`RemoveTreeError`] that says how far the removal got; `.` and `..`
    /// are refused as names before anything changes.
    pub fn remove_tree(&self, parent: u32, name: &[u8]) -> std::result::Result<u64, RemoveTreeError> {
        self.remove_tree_with(parent, name, BatchOptions::default())
    }

    /// [`Filesystem::remove_tree`] committing as `opts` say.
    ///
    /// # Errors
    /// As [`Filesystem::remove_tree`].
    pub fn remove_tree_with(
        &self,
        parent: u32,
        name: &[u8],
        opts: BatchOptions,
    ) -> std::result::Result<u64, RemoveTreeError> {
        let mut batch = self.batch_with(opts).map_err(|error| RemoveTreeError {
            error,
            removed: 0,
            stopped_at: name.to_vec(),
        })?;
        let mut walk = Walk {
            batch: &mut batch,
            stack: Vec::new(),
            on_stack: HashSet::new(),
            leaf: name.to_vec(),
        };
        let r = walk.run(parent, name);
        let stopped_at = walk.path();
        match r.and_then(|()| batch.commit()) {
            Ok(()) => Ok(batch.committed()),
            // Dropping the batch discards what its last commit did not hold.
            Err(error) => Err(RemoveTreeError {
                error,
                removed: batch.committed(),
                stopped_at,
            }),
        }
    }
}

struct Walk<'b, 'a> {
    batch: &'b mut Batch<'a>,
    stack: Vec<Level>,
    /// Directories on the stack: a directory met again below itself is a
    /// loop only a corrupt image has.
    on_stack: HashSet<u32>,
    /// Name of the entry being removed, below the top of the stack.
    leaf: Vec<u8>,
}

impl Walk<'_, '_> {
    fn run(&mut self, parent: u32, name: &[u8]) -> Result<()> {
        super::check_new_name(name)?;
        let top = self.batch.lookup(parent, name)?;
        if !self.batch.inode(top)?.is_dir() {
            return self.batch.unlink(parent, name);
        }
        self.push(top, name.to_vec())?;
        while let Some(level) = self.stack.last_mut() {
            let mut subdirs = match level.subdirs.take() {
                Some(s) => s,
                None => {
                    let dir = level.ino;
                    self.empty_but_subdirs(dir)?
                }
            };
            if let Some((sub_name, sub)) = subdirs.pop() {
                if let Some(level) = self.stack.last_mut() {
                    level.subdirs = Some(subdirs);
                }
                self.push(sub, sub_name)?;
            } else if let Some(done) = self.stack.pop() {
                self.on_stack.remove(&done.ino);
                let above = self.stack.last().map_or(parent, |l| l.ino);
                self.leaf = done.name;
                self.batch.rmdir(above, &self.leaf)?;
            }
        }
        Ok(())
    }

    fn push(&mut self, ino: u32, name: Vec<u8>) -> Result<()> {
        if !self.on_stack.insert(ino) {
            self.leaf = name;
            return Err(Error::inconsistent(
                Location::Inode(ino),
                "the directory is inside itself (a directory loop)",
            ));
        }
        self.stack.push(Level {
            ino,
            name,
            subdirs: None,
        });
        Ok(())
    }

    /// Unlinks every non-directory in `dir`; returns its subdirectories.
    fn empty_but_subdirs(&mut self, dir: u32) -> Result<Vec<(Vec<u8>, u32)>> {
        let mut subdirs = Vec::new();
        for e in self.batch.read_dir(dir)? {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let is_dir = match e.file_type {
                Some(ft) => ft == FileType::Directory,
                None => self.batch.inode(e.ino)?.is_dir(),
            };
            if is_dir {
                subdirs.push((e.name, e.ino));
            } else {
                self.leaf = e.name;
                self.batch.unlink(dir, &self.leaf)?;
            }
        }
        // Popped from the end: the first listed is removed first.
        subdirs.reverse();
        Ok(subdirs)
    }

    /// Path of the entry being removed: the stack's names, then the leaf.
    fn path(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for name in self.stack.iter().map(|l| &l.name).chain([&self.leaf]) {
            if !out.is_empty() {
                out.push(b'/');
            }
            out.extend_from_slice(name);
        }
        out
    }
}
