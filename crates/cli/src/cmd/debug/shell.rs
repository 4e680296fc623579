//! The interactive prompt of `ext4kit debug` on a terminal: line editing
//! and history (rustyline), and Tab completion of command names and of
//! paths inside the image, as debugfs's readline prompt offers.

use ext4kit_engine::Filesystem;
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

/// Completions offered for one word at most: a directory of millions of
/// names is read only until this many match.
const MAX_CANDIDATES: usize = 1000;

/// Command names completed in the first word.
pub const COMMANDS: &[&str] = &[
    "blocks",
    "bmap",
    "dump_extents",
    "dx_hash",
    "ex",
    "ffb",
    "ffi",
    "freeb",
    "freei",
    "help",
    "htree",
    "icheck",
    "imap",
    "link",
    "logdump",
    "ncheck",
    "quit",
    "set_bg",
    "set_inode_field",
    "set_super_value",
    "setb",
    "seti",
    "sif",
    "ssv",
    "unlink",
];

/// What completes a word: the open image.
pub struct Complete<'a> {
    pub fs: &'a Filesystem,
}

impl Completer for Complete<'_> {
    type Candidate = String;

    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<String>)> {
        let start = line[..pos].rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &line[start..pos];
        if start == 0 {
            let c = COMMANDS.iter().filter(|c| c.starts_with(word)).map(|c| c.to_string());
            return Ok((start, c.collect()));
        }
        Ok((start, paths(self.fs, word)))
    }
}

/// Names in the image completing `word` (a path; relative ones start at
/// the root), directories with a trailing `/`.
pub fn paths(fs: &Filesystem, word: &str) -> Vec<String> {
    let (dir, prefix) = word.rsplit_once('/').map_or(("", word), |(d, p)| (d, p));
    let Ok(inode) = fs.resolve(format!("/{dir}").as_bytes()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let _ = fs.read_dir_each(&inode, |e| {
        if e.name.starts_with(prefix.as_bytes()) && e.name != b"." && e.name != b".." {
            let slash = if e.file_type == Some(ext4kit_format::inode::FileType::Directory) {
                "/"
            } else {
                ""
            };
            let lead = if word.contains('/') {
                format!("{dir}/")
            } else {
                String::new()
            };
            out.push(format!("{lead}{}{slash}", String::from_utf8_lossy(&e.name)));
        }
        Ok(out.len() < MAX_CANDIDATES)
    });
    out.sort();
    out
}

impl Hinter for Complete<'_> {
    type Hint = String;
}
impl Highlighter for Complete<'_> {}
impl Validator for Complete<'_> {}
impl Helper for Complete<'_> {}

/// Reads lines with editing, history and completion until end of input
/// or `quit`; `run` executes each.
pub fn prompt(fs: &Filesystem, mut run: impl FnMut(&str) -> anyhow::Result<bool>) -> anyhow::Result<()> {
    let mut ed: Editor<Complete<'_>, DefaultHistory> = Editor::new()?;
    ed.set_helper(Some(Complete { fs }));
    loop {
        match ed.readline("ext4kit debug: ") {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = ed.add_history_entry(line.as_str());
                }
                if !run(&line)? {
                    return Ok(());
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use ext4kit_engine::device::FileDevice;
    use ext4kit_engine::{Filesystem, OpenOptions};

    /// Paths complete from the root and inside directories, directories
    /// with a slash; commands complete in the first word.
    #[test]
    fn completes_commands_and_image_paths() {
        let Some(_) = ext4kit_testkit::tools::skip_unless(ext4kit_testkit::tools::require_tools(&["mke2fs"])) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("docs/deep")).unwrap();
        for f in ["docs/a.txt", "docs/b.txt", "dog"] {
            std::fs::write(src.join(f), b"x").unwrap();
        }
        let img = dir.path().join("i.img");
        std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
        let out = ext4kit_testkit::tools::run(
            "mke2fs",
            &["-q", "-F", "-d", src.to_str().unwrap(), img.to_str().unwrap()],
        );
        assert!(out.unwrap().success());
        let dev = FileDevice::open(&img, false).unwrap();
        let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
        assert_eq!(super::paths(&fs, "do"), ["docs/", "dog"]);
        assert_eq!(
            super::paths(&fs, "/docs/"),
            ["/docs/a.txt", "/docs/b.txt", "/docs/deep/"]
        );
        assert_eq!(super::paths(&fs, "docs/d"), ["docs/deep/"]);
        assert!(super::paths(&fs, "nowhere/x").is_empty());
        let c: Vec<_> = super::COMMANDS.iter().filter(|c| c.starts_with("se")).collect();
        assert_eq!(c, [&"set_bg", &"set_inode_field", &"set_super_value", &"setb", &"seti"]);
    }
}
