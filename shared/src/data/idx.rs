//! A reader for the IDX file format of (Fashion-)MNIST, plain or gzip'd.
//!
//! An IDX file is a big-endian header followed by the data:
//!
//! | bytes | meaning |
//! | --- | --- |
//! | 0..4 | magic: two zero bytes, the element type (`0x08` = unsigned byte), the number of dimensions |
//! | 4..4+4d | the `d` dimension sizes, each a big-endian `u32` |
//! | rest | the elements in row-major order |
//!
//! Only the two kinds Fashion-MNIST uses are accepted: images (`0x00000803`, `count × rows × cols`
//! bytes) and labels (`0x00000801`, `count` bytes). The data must be exactly as long as the header
//! says: a short file is [`IdxError::Truncated`], extra bytes are [`IdxError::TrailingData`].
//!
//! Gzip is recognised by its magic bytes (`1f 8b`), not by the file name, so `foo.gz` holding plain
//! IDX and `foo` holding gzip both work. The reader never trusts the header for allocation: it
//! reads at most the announced length plus one byte, so a corrupt header cannot make it reserve
//! gigabytes. Every error names the file it came from; no input makes it panic.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

/// Magic number of an IDX file of unsigned-byte images (three dimensions).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned-byte labels (one dimension).
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// The two magic bytes that open a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Errors from reading an IDX file. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdxError {
    /// The file does not exist.
    #[error("IDX file {} not found", path.display())]
    NotFound {
        /// The path that was looked up.
        path: PathBuf,
    },
    /// The file could not be opened or read (other than not existing), or its gzip stream is
    /// corrupt.
    #[error("cannot read IDX file {}: {source}", path.display())]
    Io {
        /// The file being read.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not start with the expected magic number.
    #[error(
        "{} is not the expected IDX file: magic {found:#010x}, expected {expected:#010x}",
        path.display()
    )]
    WrongMagic {
        /// The file being read.
        path: PathBuf,
        /// The magic number that was expected.
        expected: u32,
        /// The first four bytes of the (decompressed) file, big-endian; fewer than four bytes are
        /// reported as [`IdxError::Truncated`] instead.
        found: u32,
    },
    /// The header announces a size that does not fit in memory addresses.
    #[error("{}: IDX dimensions {dims:?} are too large", path.display())]
    TooLarge {
        /// The file being read.
        path: PathBuf,
        /// The dimensions from the header.
        dims: Vec<u32>,
    },
    /// The file ends before the header or the data it announces is complete.
    #[error(
        "{} is truncated: expected {expected} bytes (header included), found {found}",
        path.display()
    )]
    Truncated {
        /// The file being read.
        path: PathBuf,
        /// The number of (decompressed) bytes the header announces, header included.
        expected: u64,
        /// The number of (decompressed) bytes actually present.
        found: u64,
    },
    /// The file holds more data than its header announces.
    #[error("{} has data after the {expected} bytes its header announces", path.display())]
    TrailingData {
        /// The file being read.
        path: PathBuf,
        /// The number of (decompressed) bytes the header announces, header included.
        expected: u64,
    },
}

/// A set of unsigned-byte images read from an IDX file (magic `0x00000803`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxImages {
    /// Number of images.
    pub count: usize,
    /// Rows of each image.
    pub rows: usize,
    /// Columns of each image.
    pub cols: usize,
    /// `count × rows × cols` pixels, image after image, each image row-major.
    pub pixels: Vec<u8>,
}

/// Reads an IDX image file (plain or gzip'd) from disk.
///
/// # Errors
///
/// [`IdxError::NotFound`] if the file does not exist, [`IdxError::WrongMagic`] if it is not an
/// unsigned-byte image file, [`IdxError::Truncated`] / [`IdxError::TrailingData`] if its length
/// does not match its header, [`IdxError::Io`] for other read or gzip failures.
pub fn read_images(path: &Path) -> Result<IdxImages, IdxError> {
    let file = open(path)?;
    decode_images(file, path)
}

/// Reads an IDX label file (plain or gzip'd) from disk.
///
/// # Errors
///
/// As for [`read_images`], with magic `0x00000801`.
pub fn read_labels(path: &Path) -> Result<Vec<u8>, IdxError> {
    let file = open(path)?;
    decode_labels(file, path)
}

/// Decodes IDX images (plain or gzip'd) from a reader, e.g. a byte slice embedded in the binary.
///
/// `path` is used only to name the source in errors.
///
/// # Errors
///
/// As for [`read_images`] (never [`IdxError::NotFound`]).
pub fn decode_images(reader: impl Read, path: &Path) -> Result<IdxImages, IdxError> {
    let (dims, pixels) = decode(reader, path, IMAGES_MAGIC)?;
    // `decode` checked that the product of the dimensions fits in usize.
    let [count, rows, cols] = [dims[0], dims[1], dims[2]].map(|d| d as usize);
    Ok(IdxImages {
        count,
        rows,
        cols,
        pixels,
    })
}

/// Decodes IDX labels (plain or gzip'd) from a reader.
///
/// `path` is used only to name the source in errors.
///
/// # Errors
///
/// As for [`read_labels`] (never [`IdxError::NotFound`]).
pub fn decode_labels(reader: impl Read, path: &Path) -> Result<Vec<u8>, IdxError> {
    decode(reader, path, LABELS_MAGIC).map(|(_, labels)| labels)
}

fn open(path: &Path) -> Result<BufReader<File>, IdxError> {
    match File::open(path) {
        Ok(f) => Ok(BufReader::new(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(IdxError::NotFound {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(IdxError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Sniffs gzip, then parses the header and reads exactly the announced data.
fn decode(mut reader: impl Read, path: &Path, magic: u32) -> Result<(Vec<u32>, Vec<u8>), IdxError> {
    let io_err = |source| IdxError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut sniff = [0u8; 2];
    let sniffed = read_up_to(&mut reader, &mut sniff).map_err(io_err)?;
    let head = &sniff[..sniffed];
    if head == GZIP_MAGIC {
        decode_plain(MultiGzDecoder::new(head.chain(reader)), path, magic)
    } else {
        decode_plain(head.chain(reader), path, magic)
    }
}

fn decode_plain(
    mut reader: impl Read,
    path: &Path,
    magic: u32,
) -> Result<(Vec<u32>, Vec<u8>), IdxError> {
    let io_err = |source| IdxError::Io {
        path: path.to_path_buf(),
        source,
    };
    let truncated = |expected: u64, found: usize| IdxError::Truncated {
        path: path.to_path_buf(),
        expected,
        found: found as u64,
    };

    let mut word = [0u8; 4];
    let n = read_up_to(&mut reader, &mut word).map_err(io_err)?;
    if n < 4 {
        return Err(truncated(4, n));
    }
    let found = u32::from_be_bytes(word);
    if found != magic {
        return Err(IdxError::WrongMagic {
            path: path.to_path_buf(),
            expected: magic,
            found,
        });
    }

    let ndims = (magic & 0xff) as usize;
    let header_len = 4 + 4 * ndims;
    let mut dims = Vec::with_capacity(ndims);
    for i in 0..ndims {
        let n = read_up_to(&mut reader, &mut word).map_err(io_err)?;
        if n < 4 {
            return Err(truncated(header_len as u64, 4 + 4 * i + n));
        }
        dims.push(u32::from_be_bytes(word));
    }

    let too_large = || IdxError::TooLarge {
        path: path.to_path_buf(),
        dims: dims.clone(),
    };
    let data_len = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or_else(too_large)?;
    let total = data_len.checked_add(header_len).ok_or_else(too_large)? as u64;

    // Read at most one byte more than announced: enough to detect trailing data without letting a
    // corrupt header drive a huge allocation up front.
    let mut data = Vec::new();
    reader
        .by_ref()
        .take(data_len as u64 + 1)
        .read_to_end(&mut data)
        .map_err(io_err)?;
    if data.len() < data_len {
        return Err(truncated(total, header_len + data.len()));
    }
    if data.len() > data_len {
        return Err(IdxError::TrailingData {
            path: path.to_path_buf(),
            expected: total,
        });
    }
    Ok((dims, data))
}

/// Reads until `buf` is full or the reader ends; returns the number of bytes read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels_file(labels: &[u8]) -> Vec<u8> {
        let mut v = LABELS_MAGIC.to_be_bytes().to_vec();
        v.extend_from_slice(&(labels.len() as u32).to_be_bytes());
        v.extend_from_slice(labels);
        v
    }

    #[test]
    fn plain_and_gzip_labels() {
        let plain = labels_file(&[1, 2, 3]);
        let p = Path::new("mem");
        assert_eq!(decode_labels(&plain[..], p).unwrap(), vec![1, 2, 3]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &plain).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(decode_labels(&gz[..], p).unwrap(), vec![1, 2, 3]);
        // Truncated gzip stream: an error, not a panic.
        assert!(decode_labels(&gz[..gz.len() / 2], p).is_err());
    }

    #[test]
    fn huge_header_is_not_trusted() {
        let mut v = IMAGES_MAGIC.to_be_bytes().to_vec();
        for d in [u32::MAX, u32::MAX, u32::MAX] {
            v.extend_from_slice(&d.to_be_bytes());
        }
        let err = decode_images(&v[..], Path::new("mem")).unwrap_err();
        assert!(matches!(err, IdxError::TooLarge { .. }), "{err}");
        let mut v = IMAGES_MAGIC.to_be_bytes().to_vec();
        for d in [60_000u32, 28, 28] {
            v.extend_from_slice(&d.to_be_bytes());
        }
        let err = decode_images(&v[..], Path::new("mem")).unwrap_err();
        assert!(
            matches!(
                err,
                IdxError::Truncated {
                    expected: 47_040_016,
                    found: 16,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn empty_input_is_truncated() {
        let err = decode_labels(&[][..], Path::new("mem")).unwrap_err();
        assert!(matches!(err, IdxError::Truncated { found: 0, .. }), "{err}");
    }
}
