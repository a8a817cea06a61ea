//! Files written whole or not at all: a checkpoint or a model that a crash, a full disk or a second
//! writer must never leave half written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically: a temporary file beside it (same directory, so the
/// rename stays on one file system; the process id in its name, so two processes writing one
/// path never share it), flushed to disk, then renamed over `path`. A reader sees the old file
/// or the new one, never a part; on an error the temporary file is removed and `path` is as it
/// was.
///
/// # Errors
///
/// The I/O error of creating, writing, syncing or renaming.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_nothing_beside_it() {
        let dir = std::env::temp_dir().join(format!("edgecfl-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("checkpoint.json");
        write(&path, b"old").unwrap();
        write(&path, b"new contents").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new contents");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["checkpoint.json"]);
        // A path whose directory is missing: an error, and no temporary file anywhere.
        assert!(write(&dir.join("missing/x.json"), b"x").is_err());
        // A directory where the file should go: the rename fails, the temporary file is removed.
        std::fs::create_dir_all(dir.join("taken")).unwrap();
        assert!(write(&dir.join("taken"), b"x").is_err());
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["checkpoint.json", "taken"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
