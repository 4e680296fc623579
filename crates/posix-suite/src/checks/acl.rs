//! POSIX ACLs through the `setfacl`/`getfacl` tools (package `acl`), and
//! their effect on what an unprivileged uid may open.

use std::path::Path;
use std::process::Command;

use nix::errno::Errno;

use crate::suite::{Ctx, USER};
use crate::util::{At, CheckResult, Failure, write_file};
use crate::{ensure, fail};

fn tool(name: &str, args: &[&str], path: &Path) -> Result<String, Failure> {
    let out = match Command::new(name).args(args).arg(path).env("LC_ALL", "C").output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::Skip(format!("`{name}` not installed (package acl)")));
        }
        Err(e) => fail!("{name}: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if text.contains("Operation not supported") {
            return Err(Failure::Skip(format!(
                "{name}: ACLs not supported here (EOPNOTSUPP): {}",
                text.trim()
            )));
        }
        fail!("{name} {args:?}: {}", text.trim());
    }
    Ok(text)
}

fn chmod(p: &Path, mode: u32) -> CheckResult {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).at("chmod")
}

pub(crate) fn posix_acl(c: &Ctx) -> CheckResult {
    c.need_user()?;
    let f = c.p("f");
    write_file(&f, b"secret")?;
    chmod(&f, 0o600)?;
    let path = f.to_str().unwrap_or_default();
    ensure!(
        c.user(&["read", path])? == Err(Errno::EACCES),
        "uid {USER} reads a 0600 root file without ACL"
    );
    tool("setfacl", &["-m", &format!("u:{USER}:r")], &f)?;
    let acl = tool("getfacl", &["-cn"], &f)?;
    ensure!(
        acl.contains(&format!("user:{USER}:r--")),
        "getfacl lacks the entry: {acl}"
    );
    ensure!(
        c.user(&["read", path])? == Ok("secret".into()),
        "ACL u:{USER}:r does not grant read"
    );
    ensure!(
        c.user(&["write", path, "x"])? == Err(Errno::EACCES),
        "ACL r-- granted write"
    );
    // The mask limits named entries; chmod g-r sets the mask.
    chmod(&f, 0o600)?;
    let acl = tool("getfacl", &["-cn"], &f)?;
    ensure!(acl.contains("mask::---"), "chmod did not set the ACL mask: {acl}");
    ensure!(c.user(&["read", path])? == Err(Errno::EACCES), "mask --- did not deny");
    tool("setfacl", &["-m", "m::r"], &f)?;
    ensure!(c.user(&["read", path])?.is_ok(), "mask r did not re-grant");
    tool("setfacl", &["-b"], &f)?;
    ensure!(
        c.user(&["read", path])? == Err(Errno::EACCES),
        "setfacl -b did not remove the grant"
    );
    // Default ACLs on a directory are inherited by new files and subdirs.
    let d = c.p("d");
    std::fs::create_dir(&d).at("mkdir")?;
    tool("setfacl", &["-d", "-m", &format!("u:{USER}:rw")], &d)?;
    write_file(&d.join("child"), b"inherited")?;
    let acl = tool("getfacl", &["-cn"], &d.join("child"))?;
    ensure!(
        acl.contains(&format!("user:{USER}:rw-")),
        "default ACL not inherited: {acl}"
    );
    std::fs::create_dir(d.join("sub")).at("mkdir sub")?;
    let acl = tool("getfacl", &["-cn"], &d.join("sub"))?;
    ensure!(
        acl.contains(&format!("default:user:{USER}:rw-")),
        "subdir lacks the default ACL: {acl}"
    );
    let child = d.join("child");
    ensure!(
        c.user(&["read", child.to_str().unwrap_or_default()])? == Ok("inherited".into()),
        "inherited ACL access"
    );
    Ok(())
}
