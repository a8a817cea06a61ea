//! SVHN's cropped digits (Netzer et al. 2011, "format 2"): `train_32x32.mat` (73 257 images) and
//! `test_32x32.mat` (26 032), MATLAB Level 5 files ([`super::mat`]) each holding `X`, a
//! 32 × 32 × 3 × N `uint8` array (MATLAB's column-major order: row fastest, then column, channel,
//! image), and `y`, N labels 1-10, where 10 is the digit 0. Read into the product's `C × H × W`
//! row-major bytes and labels 0-9 (the digit itself). `extra_32x32.mat` is not read.

use std::path::Path;

use super::catalog::{DatasetKind, ImageShape};
use super::dataset::{DataError, DataSource, Dataset, Splits, read_file};
use super::mat::{self, Matrix};

/// The training file.
pub const SVHN_TRAIN_FILE: &str = "train_32x32.mat";
/// The test file.
pub const SVHN_TEST_FILE: &str = "test_32x32.mat";

/// Loads SVHN from `dir` (`train_32x32.mat`, `test_32x32.mat`).
///
/// # Errors
///
/// [`DataError::MissingDir`], [`DataError::MissingFile`] naming the file, and
/// [`read_svhn`]'s errors.
pub fn load_svhn(dir: &Path) -> Result<Splits, DataError> {
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: DatasetKind::Svhn,
        });
    }
    Ok(Splits {
        kind: DatasetKind::Svhn,
        train: read_svhn(&dir.join(SVHN_TRAIN_FILE))?,
        test: read_svhn(&dir.join(SVHN_TEST_FILE))?,
        source: DataSource::Dir(dir.to_path_buf()),
        writers: None,
    })
}

/// The images and labels of one SVHN `.mat` file.
///
/// # Errors
///
/// [`DataError::MissingFile`] / [`DataError::Io`]; [`DataError::Format`] naming the file for a
/// file that is not a MAT-file, lacks `X` or `y`, whose `X` is not 32 × 32 × 3 × N, whose `y` does
/// not hold N labels, or a label outside 1-10.
pub fn read_svhn(path: &Path) -> Result<Dataset, DataError> {
    let bytes = read_file(path, DatasetKind::Svhn)?;
    let format = |reason: String| DataError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let vars = mat::read(&bytes).map_err(|e| format(e.0))?;
    let find = |name: &str| {
        vars.iter()
            .find(|m| m.name == name)
            .ok_or_else(|| format(format!("no variable '{name}' (SVHN's files hold X and y)")))
    };
    let (x, y): (&Matrix, &Matrix) = (find("X")?, find("y")?);
    let shape = ImageShape::RGB_32;
    let n = match x.dims.as_slice() {
        [32, 32, 3, n] => *n,
        [32, 32, 3] => 1,
        d => {
            return Err(format(format!(
                "X is {d:?}: SVHN's cropped digits are 32 × 32 × 3 × N"
            )));
        }
    };
    if y.data.len() != n {
        return Err(format(format!(
            "{} labels in y for {n} images in X",
            y.data.len()
        )));
    }
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let v = y.data.get(i);
        if !(1.0..=10.0).contains(&v) || v.fract() != 0.0 {
            return Err(format(format!(
                "label {v} of image {i}: SVHN's are 1-10 (10 for the digit 0)"
            )));
        }
        labels.push((v as u8) % 10);
    }
    let (plane, per) = (shape.plane(), shape.pixels());
    let mut images = vec![0u8; n * per];
    for (img, out) in images.chunks_exact_mut(per).enumerate() {
        for c in 0..3 {
            for col in 0..32 {
                for row in 0..32 {
                    // MATLAB's X(row, col, c, img), column-major.
                    let at = row + 32 * col + plane * c + per * img;
                    let v = match &x.data {
                        mat::Numbers::U8(b) => b[at],
                        other => other.get(at).clamp(0.0, 255.0) as u8,
                    };
                    out[c * plane + row * 32 + col] = v;
                }
            }
        }
    }
    Ok(Dataset {
        images,
        labels,
        shape,
    })
}
