//! The image-folder layout (torchvision's `ImageFolder`): `DIR/train/<class>/*` and
//! `DIR/test/<class>/*`, one folder per class, PNG or JPEG files.
//!
//! The classes are the data set's own, in its order, when it has names (CIFAR-10's folder
//! `airplane` is label 0), else the folder names sorted (torchvision's rule). Within a class the
//! files are read in name order, so a run is the same on every machine. Files whose extension is
//! not `.png`, `.jpg` or `.jpeg` (any case) are skipped, as `ImageFolder` skips them.
//!
//! Every image must have the data set's height and width; colour images become `C × H × W`
//! bytes, channel after channel. A grey image in a colour data set has its level copied into the
//! three channels, and a colour image in a grey one becomes `L = (299 R + 587 G + 114 B) / 1000`
//! (rounded; PIL's `convert("L")`), the conversions torchvision's loader makes. Decoding uses
//! `zune-jpeg` and `png`.

use std::fs;
use std::path::{Path, PathBuf};

use super::catalog::{DatasetKind, ImageShape};
use super::dataset::{DataError, DataSource, Dataset, Splits};

/// Whether `dir` holds the image-folder layout (`train/` and `test/` folders).
pub fn is_image_folder(dir: &Path) -> bool {
    dir.join("train").is_dir() && dir.join("test").is_dir()
}

/// Reads `kind` from the image folder `dir`: its two splits, each class's folder named by one of
/// the data set's class names.
///
/// # Errors
///
/// [`DataError::MissingDir`] when `dir/train` or `dir/test` is missing,
/// [`DataError::Format`] for a folder that is not one of the classes or a file that does not
/// decode, [`DataError::WrongImageSize`] naming the first image of another size, and
/// [`DataError::Io`] when a file cannot be read.
pub fn load_image_folder(dir: &Path, kind: DatasetKind) -> Result<Splits, DataError> {
    let read = |split: &str| {
        let files = list_split(&dir.join(split), kind)?;
        decode_files(files.iter().map(|(f, l)| (f.as_path(), *l)), kind)
    };
    Ok(Splits {
        kind,
        train: read("train")?,
        test: read("test")?,
        source: DataSource::Dir(dir.to_path_buf()),
        writers: None,
    })
}

/// The image files of one split (`dir` holds one folder per class) and their labels, in the
/// order they are read: classes in folder-name order, files in name order.
///
/// # Errors
///
/// As [`load_image_folder`], for what listing finds.
pub fn list_split(dir: &Path, kind: DatasetKind) -> Result<Vec<(PathBuf, u8)>, DataError> {
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: kind,
        });
    }
    let classes = kind.info().class_names;
    let mut out = Vec::new();
    let mut folders = sorted_entries(dir)?;
    folders.retain(|p| p.is_dir());
    for folder in folders {
        let name = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let label = classes
            .iter()
            .position(|c| *c == name)
            .ok_or_else(|| DataError::Format {
                path: folder.clone(),
                reason: format!(
                    "the folder {name:?} is not one of {}'s classes ({})",
                    kind.info().name,
                    classes.join(", ")
                ),
            })?;
        out.extend(
            sorted_entries(&folder)?
                .into_iter()
                .filter(|p| is_image(p))
                .map(|p| (p, label as u8)),
        );
    }
    Ok(out)
}

/// The images of `files` with their labels, decoded in that order into a [`Dataset`] of the
/// data set's shape.
///
/// # Errors
///
/// As [`decode_into`].
pub fn decode_files<'a>(
    files: impl Iterator<Item = (&'a Path, u8)>,
    kind: DatasetKind,
) -> Result<Dataset, DataError> {
    let shape = kind.info().shape;
    let mut data = Dataset {
        shape,
        ..Dataset::default()
    };
    for (file, label) in files {
        decode_into(file, kind, shape, &mut data.images)?;
        data.labels.push(label);
    }
    Ok(data)
}

/// The entries of `dir`, sorted by name.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let io = |source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    out.sort();
    Ok(out)
}

fn is_image(path: &Path) -> bool {
    path.is_file()
        && path.extension().is_some_and(|e| {
            let e = e.to_ascii_lowercase();
            e == "png" || e == "jpg" || e == "jpeg"
        })
}

/// Decodes the PNG or JPEG `path` (by its magic bytes) and appends its `shape.pixels()` bytes,
/// channel after channel, to `out`.
pub fn decode_into(
    path: &Path,
    kind: DatasetKind,
    shape: ImageShape,
    out: &mut Vec<u8>,
) -> Result<(), DataError> {
    let bytes = fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |reason: String| DataError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let (width, height, rgb) = if bytes.starts_with(&[0xff, 0xd8]) {
        decode_jpeg(&bytes).map_err(|e| bad(format!("not a readable JPEG image: {e}")))?
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(&bytes).map_err(|e| bad(format!("not a readable PNG image: {e}")))?
    } else {
        return Err(bad("neither a PNG nor a JPEG image".into()));
    };
    if (height, width) != (shape.height, shape.width) {
        return Err(DataError::WrongImageSize {
            path: path.to_path_buf(),
            dataset: kind,
            expected: shape,
            got: ImageShape::new(shape.channels, height, width),
        });
    }
    let plane = shape.plane();
    match shape.channels {
        1 => out.extend(rgb.chunks_exact(3).map(|p| {
            let l = 299 * u32::from(p[0]) + 587 * u32::from(p[1]) + 114 * u32::from(p[2]);
            ((l + 500) / 1000) as u8
        })),
        3 => {
            for c in 0..3 {
                out.extend(rgb.iter().skip(c).step_by(3).take(plane));
            }
        }
        n => return Err(bad(format!("images of {n} channels are not supported"))),
    }
    Ok(())
}

/// `(width, height, RGB bytes interleaved)`.
fn decode_jpeg(bytes: &[u8]) -> Result<(usize, usize, Vec<u8>), String> {
    use zune_jpeg::JpegDecoder;
    use zune_jpeg::zune_core::bytestream::ZCursor;
    use zune_jpeg::zune_core::colorspace::ColorSpace;
    use zune_jpeg::zune_core::options::DecoderOptions;
    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    let rgb = decoder.decode().map_err(|e| e.to_string())?;
    let info = decoder.info().ok_or("no image header")?;
    let (w, h) = (usize::from(info.width), usize::from(info.height));
    if rgb.len() != w * h * 3 {
        return Err(format!("{} bytes decoded for {w}×{h} RGB", rgb.len()));
    }
    Ok((w, h, rgb))
}

/// `(width, height, RGB bytes interleaved)`: palettes expanded, 16-bit samples cut to 8, grey
/// levels copied into the three channels, alpha dropped.
fn decode_png(bytes: &[u8]) -> Result<(usize, usize, Vec<u8>), String> {
    use png::{ColorType, Transformations};
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(Transformations::EXPAND | Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let size = reader
        .output_buffer_size()
        .ok_or("the image is too large")?;
    let mut buf = vec![0; size];
    let frame = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    let (w, h) = (frame.width as usize, frame.height as usize);
    let step = match frame.color_type {
        ColorType::Grayscale => 1,
        ColorType::GrayscaleAlpha => 2,
        ColorType::Rgb => 3,
        ColorType::Rgba => 4,
        ColorType::Indexed => return Err("a palette that was not expanded".into()),
    };
    let mut rgb = Vec::with_capacity(w * h * 3);
    for row in buf.chunks_exact(frame.line_size).take(h) {
        for px in row[..w * step].chunks_exact(step) {
            if step < 3 {
                rgb.extend([px[0]; 3]);
            } else {
                rgb.extend_from_slice(&px[..3]);
            }
        }
    }
    Ok((w, h, rgb))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG of `w × h` RGB pixels written by the `png` crate's encoder.
    fn png_rgb(w: u32, h: u32, px: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header().unwrap().write_image_data(px).unwrap();
        out
    }

    #[test]
    fn png_pixels_become_planes() {
        let dir = std::env::temp_dir().join(format!("edgecfl-folder-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // 2 × 1: pixel 0 = (1, 2, 3), pixel 1 = (4, 5, 6).
        let file = dir.join("a.png");
        fs::write(&file, png_rgb(2, 1, &[1, 2, 3, 4, 5, 6])).unwrap();
        let mut out = Vec::new();
        decode_into(
            &file,
            DatasetKind::Cifar10,
            ImageShape::new(3, 1, 2),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [1, 4, 2, 5, 3, 6]);
        out.clear();
        decode_into(
            &file,
            DatasetKind::Mnist,
            ImageShape::new(1, 1, 2),
            &mut out,
        )
        .unwrap();
        // (299·1 + 587·2 + 114·3) / 1000 = 1.815 → 2; (299·4 + 587·5 + 114·6) / 1000 = 4.815 → 5.
        assert_eq!(out, [2, 5]);
        let err =
            decode_into(&file, DatasetKind::Cifar10, ImageShape::RGB_32, &mut out).unwrap_err();
        assert!(matches!(err, DataError::WrongImageSize { .. }), "{err}");
        assert!(
            err.to_string().contains("a.png") && err.to_string().contains("3×1×2"),
            "{err}"
        );
        fs::write(&file, b"GIF89a").unwrap();
        let err =
            decode_into(&file, DatasetKind::Cifar10, ImageShape::RGB_32, &mut out).unwrap_err();
        assert!(matches!(err, DataError::Format { .. }), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
