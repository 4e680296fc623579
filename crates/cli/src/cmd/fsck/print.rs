//! What `fsck` prints: findings pass by pass, the summary lines e2fsck
//! prints, and the `--json` document.

use anyhow::Result;
use ext4kit_fsck::repair::Outcome;
use ext4kit_fsck::{self as fsck, Fatal, Report};
use serde_json::json;

use super::{Args, PASS_NAMES};

/// Prints a check-only run; a reader that stopped reading (`| head`) does
/// not change the verdict.
pub(super) fn check_result(a: &Args, r: &Result<Report, Fatal>, code: i32) -> Result<()> {
    let printed = if a.json {
        check_json(a, r, code)
    } else {
        check_text(a, r)
    };
    ignore_broken_pipe(printed)
}

/// Prints a repair run.
pub(super) fn repair_result(a: &Args, r: &Result<Outcome, Fatal>, code: i32) -> Result<()> {
    let printed = if a.json {
        repair_json(a, r, code)
    } else {
        repair_text(a, r)
    };
    ignore_broken_pipe(printed)
}

fn ignore_broken_pipe(printed: Result<()>) -> Result<()> {
    match printed {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn check_json(a: &Args, r: &Result<Report, Fatal>, code: i32) -> Result<()> {
    let image = a.image.display().to_string();
    let v = match r {
        Ok(rep) => json!({"image": image, "exit_code": code, "check_only": true, "cancelled": false, "report": rep}),
        Err(Fatal::Cancelled(rep)) => {
            json!({"image": image, "exit_code": code, "check_only": true, "cancelled": true, "report": rep})
        }
        Err(e) => json!({"image": image, "exit_code": code, "check_only": true, "error": e.to_string()}),
    };
    outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn repair_json(a: &Args, r: &Result<Outcome, Fatal>, code: i32) -> Result<()> {
    let image = a.image.display().to_string();
    let v = match r {
        Ok(o) => json!({
            "image": image,
            "exit_code": code,
            "check_only": false,
            "journal": o.journal,
            "runs": o.runs,
            "verdict": o.verdict,
            "fixed": o.fixed(),
            "written": {"pages": o.written.pages, "bytes": o.written.bytes},
            "undo": o.undo.map(|u| json!({"blocks": u.blocks, "keys": u.keys})),
        }),
        Err(Fatal::Cancelled(rep)) => json!({
            "image": image, "exit_code": code, "check_only": false, "cancelled": true,
            "written": {"pages": 0, "bytes": 0}, "verdict": rep,
        }),
        Err(e) => json!({"image": image, "exit_code": code, "check_only": false, "error": e.to_string()}),
    };
    outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn check_text(a: &Args, r: &Result<Report, Fatal>) -> Result<()> {
    let name = a.image.display().to_string();
    let rep = match r {
        Ok(rep) => rep,
        Err(Fatal::Cancelled(rep)) => {
            print_findings(rep)?;
            outln!("{name}: check cancelled (nothing was changed)");
            return Ok(());
        }
        Err(e) => {
            eprintln!("ext4kit fsck: {name}: {e}");
            return Ok(());
        }
    };
    if rep.skipped_clean {
        outln!(
            "{name}: clean, {} inodes, {} blocks",
            rep.inodes_total,
            rep.blocks_total
        );
        return Ok(());
    }
    print_findings(rep)?;
    summary(&name, rep)?;
    if rep.errors() > 0 {
        outln!(
            "{name}: ********** WARNING: file system still has errors ({} found; check-only run, nothing changed) **********",
            rep.errors()
        );
    }
    Ok(())
}

fn repair_text(a: &Args, r: &Result<Outcome, Fatal>) -> Result<()> {
    let name = a.image.display().to_string();
    let o = match r {
        Ok(o) => o,
        Err(Fatal::Cancelled(rep)) => {
            print_findings(rep)?;
            outln!("{name}: repair cancelled (nothing was changed)");
            return Ok(());
        }
        Err(e) => {
            eprintln!("ext4kit fsck: {name}: {e}");
            return Ok(());
        }
    };
    if let Some(j) = &o.journal {
        outln!("{name}: journal {j}");
    }
    for (i, rep) in o.runs.iter().enumerate() {
        if i > 0 {
            outln!("Restarting: run {} of the passes, after repairs…", i + 1);
        }
        print_findings(rep)?;
    }
    let v = &o.verdict;
    if v.skipped_clean {
        outln!("{name}: clean, {} inodes, {} blocks", v.inodes_total, v.blocks_total);
        return Ok(());
    }
    if !o.runs.is_empty() && !v.findings.is_empty() {
        outln!("Final run:");
    }
    print_findings(v)?;
    summary(&name, v)?;
    if v.halted && a.preen {
        outln!("{name}: UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY (without -p): preen repairs only what is safe");
    }
    if let (Some(u), Some(path)) = (o.undo, &a.undo) {
        outln!(
            "{name}: {} blocks saved in {} (e2undo {} {name} restores them)",
            u.blocks,
            path.display(),
            path.display()
        );
    }
    if o.written.pages > 0 {
        outln!(
            "\n{name}: ***** FILE SYSTEM WAS MODIFIED ***** ({} repairs, {} bytes written)",
            o.fixed(),
            o.written.bytes
        );
    }
    if v.unfixed_errors() > 0 {
        outln!(
            "{name}: ********** WARNING: file system still has errors ({} left unrepaired) **********",
            v.unfixed_errors()
        );
    }
    Ok(())
}

fn summary(name: &str, rep: &Report) -> Result<()> {
    outln!(
        "{name}: {}/{} files, {}/{} blocks",
        rep.inodes_used,
        rep.inodes_total,
        rep.blocks_used,
        rep.blocks_total
    );
    Ok(())
}

fn print_findings(rep: &Report) -> Result<()> {
    for n in &rep.notes {
        outln!("Note: {n}");
    }
    let mut pass = u8::MAX;
    for f in &rep.findings {
        if f.pass != pass {
            pass = f.pass;
            outln!("{}", PASS_NAMES.get(usize::from(pass)).copied().unwrap_or("Pass ?"));
        }
        let mut at = String::new();
        if let Some(i) = f.inode {
            at.push_str(&format!(" inode {i}"));
        }
        if let Some(b) = f.block {
            at.push_str(&format!(" block {b}"));
        }
        if let Some(g) = f.group {
            at.push_str(&format!(" group {g}"));
        }
        let sev = if f.severity == fsck::Severity::Warning {
            "warning "
        } else {
            ""
        };
        let what = if f.fixed {
            format!("{}: FIXED", f.would)
        } else {
            format!("would {}; not done", f.would)
        };
        outln!(
            "  {sev}[{:#08x} {}]{at}: {} ({what})",
            f.code.number,
            f.code.name,
            f.message
        );
    }
    if rep.dropped > 0 {
        outln!("  … and {} more findings not listed", rep.dropped);
    }
    Ok(())
}
