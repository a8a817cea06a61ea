//! A scratch file that holds a client's training images on disk instead of in memory (the
//! edge client's `--spill-above`): a board that is handed a large shard (all of Fashion-MNIST is
//! 47 MB of images) keeps only its labels in memory and reads each mini-batch's images back by
//! offset. The file has no name once created on Unix (unlinked while open, so nothing is left
//! behind, whatever way the process ends); elsewhere it is removed when dropped.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Scratch files made by this process, for unique names.
static MADE: AtomicU64 = AtomicU64::new(0);

/// An anonymous scratch file read and written by offset.
#[derive(Debug)]
pub struct SpillFile {
    file: File,
    /// The path while it still has one (removed on drop).
    path: Option<PathBuf>,
}

impl SpillFile {
    /// Creates a new, empty scratch file in `dir`.
    ///
    /// # Errors
    ///
    /// The file cannot be created there (no such directory, not writable).
    pub fn create(dir: &Path) -> io::Result<SpillFile> {
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("edgecfl-images-{}-{n}.bin", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        // On Unix the open file outlives its name: nothing is left behind after a crash.
        let path = if cfg!(unix) && std::fs::remove_file(&path).is_ok() {
            None
        } else {
            Some(path)
        };
        Ok(SpillFile { file, path })
    }

    /// Writes all of `buf` at byte `offset`.
    ///
    /// # Errors
    ///
    /// The write failed (disk full).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
        }
        #[cfg(windows)]
        {
            let mut done = 0;
            while done < buf.len() {
                done += std::os::windows::fs::FileExt::seek_write(
                    &self.file,
                    &buf[done..],
                    offset + done as u64,
                )?;
            }
            Ok(())
        }
    }

    /// Fills `buf` from byte `offset`.
    ///
    /// # Errors
    ///
    /// The read failed or the file ends before `buf` is full.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
        }
        #[cfg(windows)]
        {
            let mut done = 0;
            while done < buf.len() {
                let n = std::os::windows::fs::FileExt::seek_read(
                    &self.file,
                    &mut buf[done..],
                    offset + done as u64,
                )?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                done += n;
            }
            Ok(())
        }
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_bytes_read_back_by_offset_and_no_file_is_left() {
        let dir = std::env::temp_dir().join(format!("edgecfl-spill-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        {
            let f = SpillFile::create(&dir).unwrap();
            f.write_at(&[5, 6, 7], 10).unwrap();
            f.write_at(&[1, 2], 0).unwrap();
            let mut buf = [9u8; 4];
            f.read_at(&mut buf, 9).unwrap();
            assert_eq!(buf, [0, 5, 6, 7], "a gap reads as zeros");
            f.read_at(&mut buf[..2], 0).unwrap();
            assert_eq!(&buf[..2], [1, 2]);
            let mut past = [0u8; 2];
            assert!(
                f.read_at(&mut past, 12).is_err(),
                "past the end is an error"
            );
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
        assert!(
            SpillFile::create(&dir).is_err(),
            "a missing directory is an error"
        );
    }
}
