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
//!
//! [`read_images_selected`] reads only chosen images: it streams the file once, image by image,
//! and keeps the selected ones, so a client holding a shard of Fashion-MNIST never holds the
//! 47 MB of the full training images. It checks the file exactly as [`read_images`] does (magic,
//! length, trailing data), and returns the same bytes [`read_images`] would for those indices.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::spill::SpillFile;

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
    /// A selected image index is not below the number of images the header announces
    /// ([`read_images_selected`]).
    #[error("{}: image index {index} is out of range: the file holds {count} images", path.display())]
    IndexOutOfRange {
        /// The file being read.
        path: PathBuf,
        /// The first offending index (in the order given).
        index: usize,
        /// The number of images in the file.
        count: usize,
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

/// Sniffs gzip and hands the (decompressed) stream to `f`.
fn with_stream<T>(
    mut reader: impl Read,
    path: &Path,
    f: impl FnOnce(&mut dyn Read) -> Result<T, IdxError>,
) -> Result<T, IdxError> {
    let mut sniff = [0u8; 2];
    let sniffed = read_up_to(&mut reader, &mut sniff).map_err(|source| IdxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let head = &sniff[..sniffed];
    if head == GZIP_MAGIC {
        f(&mut MultiGzDecoder::new(head.chain(reader)))
    } else {
        f(&mut head.chain(reader))
    }
}

/// Sniffs gzip, then parses the header and reads exactly the announced data.
fn decode(reader: impl Read, path: &Path, magic: u32) -> Result<(Vec<u32>, Vec<u8>), IdxError> {
    with_stream(reader, path, |r| decode_plain(r, path, magic))
}

/// An IDX header: the dimensions, the header's length and the data's length in bytes.
struct Header {
    dims: Vec<u32>,
    header_len: usize,
    data_len: usize,
}

impl Header {
    /// Header plus data, in bytes.
    fn total(&self) -> u64 {
        (self.header_len + self.data_len) as u64
    }
}

fn io_error(path: &Path) -> impl Fn(io::Error) -> IdxError + '_ {
    move |source| IdxError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Parses the magic and the dimensions; checks that the data length fits in `usize`.
fn read_header(reader: &mut dyn Read, path: &Path, magic: u32) -> Result<Header, IdxError> {
    let truncated = |expected: u64, found: usize| IdxError::Truncated {
        path: path.to_path_buf(),
        expected,
        found: found as u64,
    };
    let mut word = [0u8; 4];
    let n = read_up_to(reader, &mut word).map_err(io_error(path))?;
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
        let n = read_up_to(reader, &mut word).map_err(io_error(path))?;
        if n < 4 {
            return Err(truncated(header_len as u64, 4 + 4 * i + n));
        }
        dims.push(u32::from_be_bytes(word));
    }

    let too_large = || IdxError::TooLarge {
        path: path.to_path_buf(),
        dims: dims.clone(),
    };
    // Multiplied from the last dimension, so that every partial product (an image's size) is
    // checked too, even when the count is 0.
    let mut data_len = 1usize;
    for &d in dims.iter().rev() {
        data_len = data_len.checked_mul(d as usize).ok_or_else(too_large)?;
    }
    data_len.checked_add(header_len).ok_or_else(too_large)?;
    Ok(Header {
        dims,
        header_len,
        data_len,
    })
}

/// After the announced data: [`IdxError::TrailingData`] unless the stream ends here.
fn expect_end(reader: &mut dyn Read, path: &Path, header: &Header) -> Result<(), IdxError> {
    let mut one = [0u8; 1];
    if read_up_to(reader, &mut one).map_err(io_error(path))? > 0 {
        return Err(IdxError::TrailingData {
            path: path.to_path_buf(),
            expected: header.total(),
        });
    }
    Ok(())
}

fn decode_plain(
    reader: &mut dyn Read,
    path: &Path,
    magic: u32,
) -> Result<(Vec<u32>, Vec<u8>), IdxError> {
    let header = read_header(reader, path, magic)?;
    // Read at most one byte more than announced: enough to detect trailing data without letting a
    // corrupt header drive a huge allocation up front.
    let mut data = Vec::new();
    reader
        .take(header.data_len as u64 + 1)
        .read_to_end(&mut data)
        .map_err(io_error(path))?;
    if data.len() < header.data_len {
        return Err(IdxError::Truncated {
            path: path.to_path_buf(),
            expected: header.total(),
            found: (header.header_len + data.len()) as u64,
        });
    }
    if data.len() > header.data_len {
        return Err(IdxError::TrailingData {
            path: path.to_path_buf(),
            expected: header.total(),
        });
    }
    Ok((header.dims, data))
}

/// The images at chosen indices of an IDX image file ([`read_images_selected`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxSelection {
    /// Number of images in the file (not the number selected).
    pub count: usize,
    /// Rows of each image.
    pub rows: usize,
    /// Columns of each image.
    pub cols: usize,
    /// The selected images, in the order of the indices given (repeats repeated), each
    /// `rows × cols` pixels row-major: `indices.len() × rows × cols` bytes.
    pub pixels: Vec<u8>,
}

/// The header of an IDX image file: `(count, rows, cols)`. Reads only the first 16 (decompressed)
/// bytes.
///
/// # Errors
///
/// As for [`read_images`], except that the length of the data is not checked.
pub fn read_images_header(path: &Path) -> Result<(usize, usize, usize), IdxError> {
    let file = open(path)?;
    with_stream(file, path, |r| {
        let h = read_header(r, path, IMAGES_MAGIC)?;
        Ok((h.dims[0] as usize, h.dims[1] as usize, h.dims[2] as usize))
    })
}

/// Reads only the images at `indices` of an IDX image file (plain or gzip'd), in one pass over
/// the file: memory is that of the selected images, not of the file.
///
/// The pixels are exactly those [`read_images`] returns for the same indices, in the order of
/// `indices` (repeats allowed). The whole file is still read and checked as [`read_images`]
/// checks it.
///
/// # Errors
///
/// As for [`read_images`], and [`IdxError::IndexOutOfRange`] if an index is not below the
/// header's image count (checked before the data are read).
pub fn read_images_selected(path: &Path, indices: &[usize]) -> Result<IdxSelection, IdxError> {
    let file = open(path)?;
    decode_images_selected(file, path, indices)
}

/// [`read_images_selected`] into a scratch file ([`decode_images_selected_to`]).
///
/// # Errors
///
/// As for [`decode_images_selected_to`], and [`IdxError::NotFound`].
pub fn read_images_selected_to(
    path: &Path,
    indices: &[usize],
    file: &SpillFile,
) -> Result<IdxSelection, IdxError> {
    decode_images_selected_to(open(path)?, path, indices, file)
}

/// [`read_images_selected`] from a reader, e.g. a byte slice embedded in the binary.
///
/// `path` is used only to name the source in errors.
///
/// # Errors
///
/// As for [`read_images_selected`] (never [`IdxError::NotFound`]).
pub fn decode_images_selected(
    reader: impl Read,
    path: &Path,
    indices: &[usize],
) -> Result<IdxSelection, IdxError> {
    with_stream(reader, path, |r| select_plain(r, path, indices))
}

/// Most bytes reserved ahead of the data for the kept images (a corrupt header must not drive a
/// huge allocation; past this the buffer grows only with data actually read).
const MAX_RESERVE: usize = 64 << 20;

fn select_plain(
    reader: &mut dyn Read,
    path: &Path,
    indices: &[usize],
) -> Result<IdxSelection, IdxError> {
    let mut kept = Vec::new();
    let (count, rows, cols, wanted) = scan(reader, path, indices, |wanted, size, k, image| {
        if k == 0 {
            kept.reserve(wanted.len().saturating_mul(size).min(MAX_RESERVE));
        }
        kept.extend_from_slice(image);
        Ok(())
    })?;
    let size = rows * cols;
    let pixels = if wanted.len() == indices.len() {
        // No repeats: `kept` holds exactly the images asked for, in file order; put them in the
        // order asked in place (a shard is often shuffled), without a second copy of them.
        if wanted.as_slice() != indices {
            let source: Vec<usize> = indices
                .iter()
                .map(|i| wanted.binary_search(i).unwrap_or_default())
                .collect();
            permute_blocks(&mut kept, size, &source);
        }
        kept
    } else {
        let mut out = Vec::with_capacity(indices.len() * size);
        for i in indices {
            // Every index is in `wanted` (it was built from them).
            let slot = wanted.binary_search(i).unwrap_or_default();
            out.extend_from_slice(&kept[slot * size..(slot + 1) * size]);
        }
        out
    };
    Ok(IdxSelection {
        count,
        rows,
        cols,
        pixels,
    })
}

/// [`decode_images_selected`], writing the selected images to `file` instead of memory: image
/// `p` of `indices` at byte `p × rows × cols`, exactly the bytes
/// [`IdxSelection::pixels`] would hold. Memory: one image. Returns the selection with no
/// pixels.
///
/// # Errors
///
/// As for [`read_images_selected`], and [`IdxError::Io`] (naming `path`) if writing fails.
pub fn decode_images_selected_to(
    reader: impl Read,
    path: &Path,
    indices: &[usize],
    file: &SpillFile,
) -> Result<IdxSelection, IdxError> {
    // Positions of each index in `indices`, in index order.
    let mut at: Vec<(usize, usize)> = indices.iter().enumerate().map(|(p, &i)| (i, p)).collect();
    at.sort_unstable();
    let (count, rows, cols, _) = with_stream(reader, path, |r| {
        scan(r, path, indices, |wanted, size, k, image| {
            let i = wanted[k];
            let first = at.partition_point(|&(j, _)| j < i);
            for &(_, p) in at[first..].iter().take_while(|&&(j, _)| j == i) {
                file.write_at(image, (p * size) as u64)?;
            }
            Ok(())
        })
    })?;
    Ok(IdxSelection {
        count,
        rows,
        cols,
        pixels: Vec::new(),
    })
}

/// Reads an image file's header and every image, checking it as [`read_images`] does, and
/// hands `keep(wanted, size, k, image)` the `k`-th of the distinct `wanted` indices (sorted)
/// as it passes. Returns `(count, rows, cols, wanted)`.
fn scan(
    reader: &mut dyn Read,
    path: &Path,
    indices: &[usize],
    mut keep: impl FnMut(&[usize], usize, usize, &[u8]) -> std::io::Result<()>,
) -> Result<(usize, usize, usize, Vec<usize>), IdxError> {
    let header = read_header(reader, path, IMAGES_MAGIC)?;
    let [count, rows, cols] = [0, 1, 2].map(|i| header.dims[i] as usize);
    // read_header checked that rows × cols fits.
    let size = rows * cols;
    if let Some(&index) = indices.iter().find(|&&i| i >= count) {
        return Err(IdxError::IndexOutOfRange {
            path: path.to_path_buf(),
            index,
            count,
        });
    }
    // The distinct wanted indices in file order.
    let mut wanted = indices.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut buf = vec![0u8; size];
    let mut k = 0;
    if size > 0 {
        for i in 0..count {
            let n = read_up_to(reader, &mut buf).map_err(io_error(path))?;
            if n < size {
                return Err(IdxError::Truncated {
                    path: path.to_path_buf(),
                    expected: header.total(),
                    found: (header.header_len + i * size + n) as u64,
                });
            }
            if wanted.get(k) == Some(&i) {
                keep(&wanted, size, k, &buf).map_err(io_error(path))?;
                k += 1;
            }
        }
    }
    expect_end(reader, path, &header)?;
    Ok((count, rows, cols, wanted))
}

/// Reorders the `size`-byte blocks of `data` in place so that block `p` becomes the old block
/// `source[p]`; `source` must be a permutation of `0..data.len() / size`. Follows the cycles of
/// the permutation with one block of scratch space.
fn permute_blocks(data: &mut [u8], size: usize, source: &[usize]) {
    let mut done = vec![false; source.len()];
    let mut scratch = vec![0u8; size];
    for start in 0..source.len() {
        if done[start] || source[start] == start {
            continue;
        }
        scratch.copy_from_slice(&data[start * size..(start + 1) * size]);
        let mut j = start;
        loop {
            done[j] = true;
            let k = source[j];
            if k == start {
                data[j * size..(j + 1) * size].copy_from_slice(&scratch);
                break;
            }
            data.copy_within(k * size..(k + 1) * size, j * size);
            j = k;
        }
    }
}

/// Reads until `buf` is full or the reader ends; returns the number of bytes read.
fn read_up_to(reader: &mut (impl Read + ?Sized), buf: &mut [u8]) -> io::Result<usize> {
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

    /// An image file of `count` images of 2 × 3 pixels, each pixel distinct.
    fn images_file(count: u32) -> Vec<u8> {
        let mut v = IMAGES_MAGIC.to_be_bytes().to_vec();
        for d in [count, 2, 3] {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend((0..count as usize * 6).map(|i| (i * 7 % 251) as u8));
        v
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, bytes).unwrap();
        gz.finish().unwrap()
    }

    /// The bytes the full reader gives for `indices`.
    fn reference(full: &IdxImages, indices: &[usize]) -> Vec<u8> {
        let size = full.rows * full.cols;
        indices
            .iter()
            .flat_map(|&i| full.pixels[i * size..(i + 1) * size].iter().copied())
            .collect()
    }

    #[test]
    fn selected_equals_full_reader() {
        let p = Path::new("mem");
        let plain = images_file(9);
        let full = decode_images(&plain[..], p).unwrap();
        let cases: [&[usize]; 9] = [
            &[],
            &[0],
            &[8],
            &[1, 4, 7],
            &[6, 2, 2, 0, 8, 6],
            &[3, 8, 0, 5, 1],
            &[8, 7, 6, 5, 4, 3, 2, 1, 0],
            &[2, 0, 1, 5, 3, 4, 8, 6, 7],
            &[0, 1, 2, 3, 4, 5, 6, 7, 8],
        ];
        for file in [plain.clone(), gzip(&plain)] {
            for indices in cases {
                let sel = decode_images_selected(&file[..], p, indices).unwrap();
                assert_eq!((sel.count, sel.rows, sel.cols), (9, 2, 3));
                assert_eq!(sel.pixels, reference(&full, indices), "{indices:?}");
                // The same bytes, written to a scratch file instead.
                let spill = SpillFile::create(&std::env::temp_dir()).unwrap();
                let to = decode_images_selected_to(&file[..], p, indices, &spill).unwrap();
                assert_eq!((to.count, to.rows, to.cols), (9, 2, 3));
                let mut back = vec![0u8; sel.pixels.len()];
                spill.read_at(&mut back, 0).unwrap();
                assert_eq!(back, sel.pixels, "{indices:?} via a file");
            }
        }
    }

    #[test]
    fn selected_index_out_of_range_is_typed() {
        for file in [images_file(4), gzip(&images_file(4))] {
            let err = decode_images_selected(&file[..], Path::new("mem"), &[1, 4, 9]).unwrap_err();
            assert!(
                matches!(
                    err,
                    IdxError::IndexOutOfRange {
                        index: 4,
                        count: 4,
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn selected_malformed_errors_match_full_reader() {
        let p = Path::new("mem");
        let plain = images_file(5);
        let mut trailing = plain.clone();
        trailing.push(0);
        let mut wrong_magic = plain.clone();
        wrong_magic[3] = 0x01;
        let cut = |n: usize| plain[..n].to_vec();
        // Truncated in the header, in the first image, in the last image; trailing data; wrong
        // magic: both readers give the same typed error (same message).
        for file in [
            cut(10),
            cut(17),
            cut(plain.len() - 1),
            trailing,
            wrong_magic,
        ] {
            for file in [file.clone(), gzip(&file)] {
                let full = decode_images(&file[..], p).unwrap_err();
                // Index 0 selected or not, the whole file is checked.
                for indices in [&[0usize][..], &[]] {
                    let sel = decode_images_selected(&file[..], p, indices).unwrap_err();
                    assert_eq!(sel.to_string(), full.to_string());
                    assert_eq!(std::mem::discriminant(&sel), std::mem::discriminant(&full));
                }
            }
        }
        let err = decode_images_selected(&cut(plain.len() - 1)[..], p, &[4]).unwrap_err();
        assert!(
            matches!(
                err,
                IdxError::Truncated {
                    expected: 46,
                    found: 45,
                    ..
                }
            ),
            "{err}"
        );
        // A corrupt gzip stream: an error, not a panic.
        let gz = gzip(&plain);
        let err = decode_images_selected(&gz[..gz.len() / 2], p, &[0]).unwrap_err();
        assert!(
            matches!(err, IdxError::Io { .. } | IdxError::Truncated { .. }),
            "{err}"
        );
    }

    #[test]
    fn selected_huge_header_is_not_trusted() {
        let mut v = IMAGES_MAGIC.to_be_bytes().to_vec();
        for d in [u32::MAX, u32::MAX, u32::MAX] {
            v.extend_from_slice(&d.to_be_bytes());
        }
        let err = decode_images_selected(&v[..], Path::new("mem"), &[0]).unwrap_err();
        assert!(matches!(err, IdxError::TooLarge { .. }), "{err}");
        // A header announcing 60,000 big images, then nothing: truncated, no huge allocation.
        let mut v = IMAGES_MAGIC.to_be_bytes().to_vec();
        for d in [60_000u32, 100, 100] {
            v.extend_from_slice(&d.to_be_bytes());
        }
        let err = decode_images_selected(&v[..], Path::new("mem"), &[0, 59_999]).unwrap_err();
        assert!(
            matches!(err, IdxError::Truncated { found: 16, .. }),
            "{err}"
        );
    }

    #[test]
    fn selected_missing_file_is_not_found() {
        let err = read_images_selected(Path::new("/nonexistent/edgecfl/idx"), &[0]).unwrap_err();
        assert!(matches!(err, IdxError::NotFound { .. }), "{err}");
    }
}
