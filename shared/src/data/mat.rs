//! The part of MATLAB's Level 5 MAT-file format that numeric data sets use (SVHN's
//! `train_32x32.mat`): real numeric matrices of any dimension, compressed (`miCOMPRESSED`, zlib)
//! or not, little- or big-endian. Layout from MathWorks' "MAT-File Format" (R2024a), chapter 1:
//! a 128-byte header (text, subsystem offset, version 0x0100, endian indicator `IM`), then data
//! elements, each an 8-byte tag (type, byte count) or a 4-byte small-element tag, its data padded
//! to 8 bytes; a matrix (`miMATRIX`) holds array flags, dimensions, a name and its real part, whose
//! stored type may be narrower than its class (a `double` array of small integers is stored as
//! `miUINT8`). MATLAB 7.3 files are HDF5 and are refused with a message saying so.

use std::io::Read;

/// A MAT-file that cannot be read: why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MatError(pub String);

/// One numeric variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// Its name.
    pub name: String,
    /// Its dimensions, in MATLAB's order (column-major: the first varies fastest).
    pub dims: Vec<usize>,
    /// Its real part, in MATLAB's (column-major) order.
    pub data: Numbers,
}

/// The stored elements of a matrix.
#[derive(Debug, Clone, PartialEq)]
pub enum Numbers {
    /// Stored as unsigned bytes (`miUINT8`), kept as they are.
    U8(Vec<u8>),
    /// Any other numeric storage type, as `f64`.
    F64(Vec<f64>),
}

impl Numbers {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Numbers::U8(v) => v.len(),
            Numbers::F64(v) => v.len(),
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as `f64`.
    pub fn get(&self, i: usize) -> f64 {
        match self {
            Numbers::U8(v) => f64::from(v[i]),
            Numbers::F64(v) => v[i],
        }
    }
}

const MI_INT8: u32 = 1;
const MI_UINT8: u32 = 2;
const MI_INT16: u32 = 3;
const MI_UINT16: u32 = 4;
const MI_INT32: u32 = 5;
const MI_UINT32: u32 = 6;
const MI_SINGLE: u32 = 7;
const MI_DOUBLE: u32 = 9;
const MI_INT64: u32 = 12;
const MI_UINT64: u32 = 13;
const MI_MATRIX: u32 = 14;
const MI_COMPRESSED: u32 = 15;

/// The numeric matrices of a MAT-file, in file order; other variables (cells, structs, chars,
/// sparse) are skipped.
///
/// # Errors
///
/// [`MatError`] for a file that is not a Level 5 MAT-file (MATLAB 7.3's HDF5 named as such), a
/// truncated element, a stream that does not inflate, or a matrix whose data do not fill its
/// dimensions.
pub fn read(bytes: &[u8]) -> Result<Vec<Matrix>, MatError> {
    if bytes.starts_with(b"\x89HDF") || bytes.get(512..516) == Some(b"\x89HDF") {
        return Err(MatError(
            "a MATLAB 7.3 (HDF5) file; save it as version 7 or older (`save -v7`)".into(),
        ));
    }
    if bytes.len() < 128 {
        return Err(MatError(format!(
            "{} bytes: shorter than a MAT-file's header",
            bytes.len()
        )));
    }
    let big = match &bytes[126..128] {
        b"IM" => false,
        b"MI" => true,
        other => {
            return Err(MatError(format!(
                "no MAT-file endian indicator (bytes 126-127 are {other:?}, not \"IM\")"
            )));
        }
    };
    let mut out = Vec::new();
    let mut elements = Elements {
        bytes,
        pos: 128,
        big,
    };
    while let Some((ty, data)) = elements.next_element()? {
        match ty {
            MI_COMPRESSED => {
                let mut inflated = Vec::new();
                flate2::read::ZlibDecoder::new(data)
                    .read_to_end(&mut inflated)
                    .map_err(|e| MatError(format!("a compressed element does not inflate: {e}")))?;
                let mut inner = Elements {
                    bytes: &inflated,
                    pos: 0,
                    big,
                };
                while let Some((ty, data)) = inner.next_element()? {
                    if ty == MI_MATRIX {
                        out.extend(matrix(data, big)?);
                    }
                }
            }
            MI_MATRIX => out.extend(matrix(data, big)?),
            _ => {}
        }
    }
    Ok(out)
}

struct Elements<'a> {
    bytes: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Elements<'a> {
    fn u32_at(&self, at: usize) -> u32 {
        let b: [u8; 4] = self.bytes[at..at + 4].try_into().expect("4 bytes");
        if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The next element's type and data, or `None` at the end.
    fn next_element(&mut self) -> Result<Option<(u32, &'a [u8])>, MatError> {
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        if self.bytes.len() - self.pos < 8 {
            return Err(MatError(format!(
                "a data element's tag cut short at byte {}",
                self.pos
            )));
        }
        let first = self.u32_at(self.pos);
        // The small element format: byte count in the upper 16 bits, type in the lower.
        if first >> 16 != 0 {
            let (ty, n) = (first & 0xffff, (first >> 16) as usize);
            if n > 4 {
                return Err(MatError(format!(
                    "a small element of {n} bytes at byte {}",
                    self.pos
                )));
            }
            let data = &self.bytes[self.pos + 4..self.pos + 4 + n];
            self.pos += 8;
            return Ok(Some((ty, data)));
        }
        let n = self.u32_at(self.pos + 4) as usize;
        let start = self.pos + 8;
        let end = start
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                MatError(format!(
                    "an element of {n} bytes at byte {} runs past the end ({} bytes): the file is cut short",
                    self.pos,
                    self.bytes.len()
                ))
            })?;
        // Compressed elements are not padded; the others are, to 8 bytes.
        self.pos = if first == MI_COMPRESSED {
            end
        } else {
            (end + 7) & !7
        };
        Ok(Some((first, &self.bytes[start..end])))
    }
}

/// A matrix element's variable, if it is a real numeric array.
fn matrix(data: &[u8], big: bool) -> Result<Option<Matrix>, MatError> {
    let mut sub = Elements {
        bytes: data,
        pos: 0,
        big,
    };
    let bad = |what: &str| MatError(format!("a matrix without its {what}"));
    let (_, flags) = sub.next_element()?.ok_or_else(|| bad("array flags"))?;
    if flags.len() < 8 {
        return Err(bad("array flags"));
    }
    let word = |b: &[u8]| {
        let b: [u8; 4] = b[..4].try_into().expect("4 bytes");
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let flags = word(flags);
    let class = flags & 0xff;
    let complex = flags & 0x800 != 0;
    // Numeric classes: 6 double … 15 uint64; cells (1), structs (2), objects (3), chars (4) and
    // sparse (5) are not data sets' arrays.
    if !(6..=15).contains(&class) {
        return Ok(None);
    }
    if complex {
        return Err(MatError("a complex matrix, not image or label data".into()));
    }
    let (ty, dims) = sub.next_element()?.ok_or_else(|| bad("dimensions"))?;
    if ty != MI_INT32 || !dims.len().is_multiple_of(4) {
        return Err(bad("dimensions (miINT32)"));
    }
    let dims: Vec<usize> = dims
        .chunks_exact(4)
        .map(|c| {
            usize::try_from(word(c) as i32).map_err(|_| MatError("a negative dimension".into()))
        })
        .collect::<Result<_, _>>()?;
    let (_, name) = sub.next_element()?.ok_or_else(|| bad("name"))?;
    let name = String::from_utf8_lossy(name).into_owned();
    let (ty, real) = sub.next_element()?.ok_or_else(|| bad("real part"))?;
    let data = numbers(ty, real, big).ok_or_else(|| {
        MatError(format!(
            "{name}: data of MAT type {ty}, which is not numeric"
        ))
    })?;
    let want: usize = dims.iter().product();
    if data.len() != want {
        return Err(MatError(format!(
            "{name}: {} elements for dimensions {dims:?} ({want})",
            data.len()
        )));
    }
    Ok(Some(Matrix { name, dims, data }))
}

fn numbers(ty: u32, b: &[u8], big: bool) -> Option<Numbers> {
    macro_rules! conv {
        ($t:ty, $n:expr) => {
            Numbers::F64(
                b.chunks_exact($n)
                    .map(|c| {
                        let a: [u8; $n] = c.try_into().expect("size");
                        (if big {
                            <$t>::from_be_bytes(a)
                        } else {
                            <$t>::from_le_bytes(a)
                        }) as f64
                    })
                    .collect(),
            )
        };
    }
    Some(match ty {
        MI_UINT8 => Numbers::U8(b.to_vec()),
        MI_INT8 => conv!(i8, 1),
        MI_INT16 => conv!(i16, 2),
        MI_UINT16 => conv!(u16, 2),
        MI_INT32 => conv!(i32, 4),
        MI_UINT32 => conv!(u32, 4),
        MI_SINGLE => conv!(f32, 4),
        MI_DOUBLE => conv!(f64, 8),
        MI_INT64 => conv!(i64, 8),
        MI_UINT64 => conv!(u64, 8),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<u8> {
        let mut f = vec![b' '; 116];
        f.extend([0u8; 8]);
        f.extend([0x00, 0x01, b'I', b'M']);
        f
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `scipy.io.savemat(f, {'y': np.array([[1.0], [10.0]])})` from scipy 1.17.1, plain and with
    /// `do_compression=True`: the bytes after the header, as scipy wrote them.
    #[test]
    fn scipys_files_read_back() {
        let plain = "0e00000040000000060000000800000006000000000000000500000008000000\
                     020000000100000001000100790000000900000010000000000000000000f03f\
                     0000000000002440";
        let packed = "0f0000002d000000789ce36360607000623620e680d220c00ae5330131231833\
                      325402694e20166080810ff6105ac50100385d029a";
        for body in [plain, packed] {
            let mut f = header();
            f.extend(hex(&body.replace(' ', "")));
            let m = read(&f).unwrap();
            assert_eq!(m.len(), 1);
            assert_eq!(
                (m[0].name.as_str(), m[0].dims.as_slice()),
                ("y", &[2, 1][..])
            );
            assert_eq!(m[0].data, Numbers::F64(vec![1.0, 10.0]));
        }
    }

    /// A double array stored as miUINT8, as MATLAB narrows small integers (SVHN's labels), built
    /// from the format's chapter: its name in a small element, the data padded to 8 bytes.
    #[test]
    fn matlabs_narrowed_storage_reads_back() {
        let mut f = header();
        // miMATRIX of 56 bytes: flags (class 6, double), dims [2, 1], name "y" (small element),
        // real part miUINT8 [1, 10] padded to 8.
        f.extend(14u32.to_le_bytes());
        f.extend(56u32.to_le_bytes());
        f.extend(6u32.to_le_bytes());
        f.extend(8u32.to_le_bytes());
        f.extend(6u32.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        f.extend(5u32.to_le_bytes());
        f.extend(8u32.to_le_bytes());
        f.extend(2i32.to_le_bytes());
        f.extend(1i32.to_le_bytes());
        f.extend((1u32 << 16 | 1).to_le_bytes());
        f.extend([b'y', 0, 0, 0]);
        f.extend(2u32.to_le_bytes());
        f.extend(2u32.to_le_bytes());
        f.extend([1, 10, 0, 0, 0, 0, 0, 0]);
        let m = read(&f).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].name.as_str(), m[0].dims.as_slice()),
            ("y", &[2, 1][..])
        );
        assert_eq!(m[0].data, Numbers::U8(vec![1, 10]));
        // Cut short, and an HDF5 file.
        assert!(read(&f[..f.len() - 9]).unwrap_err().0.contains("cut short"));
        let mut h5 = vec![0u8; 600];
        h5[512..516].copy_from_slice(b"\x89HDF");
        assert!(read(&h5).unwrap_err().0.contains("7.3"));
    }
}
