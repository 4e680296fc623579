//! TEMPORARY: stand-ins for engine calls being written in parallel
//! (open-file tracking, fallocate, seek, flags, atime, unmount). Inherent
//! engine methods take precedence, so this goes away when they land.
#![allow(missing_docs, dead_code)]

use ext4kit_engine::{Error, Filesystem, Result};

pub struct FallocMode;
impl FallocMode {
    pub fn from_linux_flags(_f: u32) -> Result<Self> {
        Err(Error::Unsupported("fallocate".into()))
    }
}
pub enum AtimePolicy {
    NoAtime,
    Relatime,
    Strict,
}

pub trait PendingApi {
    fn open_file(&self, _ino: u32) -> Result<()> {
        Ok(())
    }
    fn release_file(&self, _ino: u32) -> Result<()> {
        Ok(())
    }
    fn touch_atime(&self, _ino: u32, _p: AtimePolicy) -> Result<()> {
        Ok(())
    }
    fn fallocate(&self, _ino: u32, _o: u64, _l: u64, _m: FallocMode) -> Result<()> {
        Err(Error::Unsupported("fallocate".into()))
    }
    fn seek_data(&self, _ino: u32, _o: u64) -> Result<u64> {
        Err(Error::Unsupported("seek".into()))
    }
    fn seek_hole(&self, _ino: u32, _o: u64) -> Result<u64> {
        Err(Error::Unsupported("seek".into()))
    }
    fn set_flags(&self, _ino: u32, _f: u32, _p: bool) -> Result<()> {
        Err(Error::Unsupported("flags".into()))
    }
    fn unmount(self) -> Result<()>
    where
        Self: Sized,
    {
        Ok(())
    }
}
impl PendingApi for Filesystem {}
