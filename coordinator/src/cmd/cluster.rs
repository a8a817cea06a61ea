//! `coordinator cluster`: offline hierarchical clustering of vectors stored in a file.
//!
//! ```text
//! coordinator cluster --input weights.npy --linkage average --lambda auto
//! coordinator cluster --input weights.csv --linkage ward --clusters 4
//! coordinator cluster --input weights.npy --linkage complete --lambda 2.5 --metric cosine
//! ```
//!
//! Each row of the input is one observation (for FedClust: one client's flattened final layer).
//! The tool computes the pairwise distances ([`CondensedMatrix`]), runs [`linkage`] (equal to
//! `scipy.cluster.hierarchy.linkage`) and cuts the dendrogram as a run does (the same
//! [`Lambda`] and [`cut_tree`], the same flags): at a distance (`--lambda X`, like
//! `fcluster(Z, X, "distance")`), at the best mean silhouette (`--lambda auto`), at the largest
//! gap between merge heights (`--lambda gap`, [`Dendrogram::auto_threshold`]) or into exactly `K`
//! clusters (`--clusters K` or `--lambda k=K`, [`Dendrogram::cut_k`]). [`run`] returns the result
//! as JSON (see [`run`] for the fields).
//!
//! `--threshold` and `--k`, this tool's flags before it shared the run's, are kept as aliases of
//! `--lambda` and `--clusters` for one release (`main` warns); `--threshold auto` was the gap rule
//! and is now the run's `auto`.
//!
//! Input formats:
//!
//! * `.npy`: NumPy format versions 1–3, a 2-D array of little-endian `float32` (`<f4`) or
//!   `float64` (`<f8`), C or Fortran order (`np.save(path, X)`);
//! * `.csv`: one observation per line, comma-separated numbers; a first line that does not parse
//!   as numbers is taken as a header and skipped; empty lines are ignored.
//!
//! Values are converted to `f32`, as the clients report them; NaN and infinite values are
//! rejected.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use edgecfl_shared::cluster::{CondensedMatrix, Dendrogram, Lambda, Linkage, cut_tree, linkage};
use serde_json::{Value, json};

/// Arguments of `coordinator cluster`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("cut").required(true).args(["lambda", "clusters"])))]
pub struct ClusterArgs {
    /// Input file: `.npy` (2-D float32/float64 array) or `.csv` (one row per observation).
    #[arg(long)]
    pub input: PathBuf,
    /// Linkage method: single, complete, average, weighted or ward (as in scipy).
    #[arg(long, default_value = "average")]
    pub linkage: Linkage,
    /// The cut, as a run's `--lambda`: a distance (merges with height <= X are applied), `auto`
    /// (best mean silhouette over the candidate cuts), `gap` (the midpoint of the largest gap
    /// between merge heights) or `k=N` clusters. (`--threshold`: its old name.)
    #[arg(long, alias = "threshold")]
    pub lambda: Option<Lambda>,
    /// Cut into exactly K clusters (`--lambda k=K`). (`--k`: its old name.)
    #[arg(long, alias = "k")]
    pub clusters: Option<usize>,
    /// Distance between observations.
    #[arg(long, value_enum, default_value_t = Metric::Euclidean)]
    pub metric: Metric,
}

/// Distance between two observations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Euclidean distance (exact, accumulated in f64).
    Euclidean,
    /// Cosine distance `1 − cos(x, y)`; not allowed with ward.
    Cosine,
}

impl Metric {
    fn as_str(self) -> &'static str {
        match self {
            Metric::Euclidean => "euclidean",
            Metric::Cosine => "cosine",
        }
    }
}

/// Runs the clustering and returns the result as JSON:
///
/// ```json
/// {
///   "input": "weights.npy", "n": 100, "dim": 850,
///   "metric": "euclidean", "linkage": "average",
///   "cut": "auto" | "gap" | "distance" | "k",
///   "threshold": 3.2,            // the distance used; for k clusters, one that gives the same
///                                // partition, or null when the cut falls on tied heights
///   "cut_scores": {...},         // auto and gap: every candidate cut and its score, as a
///                                // run's clusters.json has them; null otherwise
///   "n_clusters": 4,
///   "labels": [0, 0, 1, ...],    // per observation, numbered by first appearance
///   "cluster_sizes": [25, 25, ...],
///   "heights": [...],            // merge heights, nondecreasing
///   "merges": [[a, b, height, size], ...]   // scipy's linkage matrix Z
/// }
/// ```
///
/// Errors (unreadable or malformed file, NaN/inf values, ragged rows, `k` out of range,
/// ward with cosine, ...) name the input file.
pub fn run(args: &ClusterArgs) -> anyhow::Result<Value> {
    let path = &args.input;
    let shown = path.display();
    if args.linkage == Linkage::Ward && args.metric != Metric::Euclidean {
        bail!("ward linkage requires the euclidean metric (input {shown})");
    }
    let (points, dim) = read_points(path)?;
    let n = points.len();
    ensure!(n > 0, "{shown}: no observations (empty input)");

    let d = match args.metric {
        Metric::Euclidean => CondensedMatrix::euclidean(&points),
        Metric::Cosine => CondensedMatrix::cosine_distance(&points),
    }
    .with_context(|| format!("{shown}: cannot compute {} distances", args.metric.as_str()))?;
    let tree = linkage(&d, args.linkage);

    let cut = match (args.lambda, args.clusters) {
        (Some(_), Some(_)) => bail!("give either --lambda or --clusters, not both (input {shown})"),
        (None, None) => bail!("give --lambda X|auto|gap|k=K or --clusters K (input {shown})"),
        (Some(t), None) => t,
        (None, Some(k)) => Lambda::Clusters(k),
    };
    let (name, threshold, labels, scores) = match cut {
        Lambda::Clusters(k) => {
            ensure!(
                (1..=n).contains(&k),
                "{k} clusters is out of range: {shown} has {n} observations, so K must be in \
                 1..={n}"
            );
            ("k", threshold_for_k(&tree, k), tree.cut_k(k), None)
        }
        t => {
            let (labels, height, scores) = cut_tree(&tree, &d, t);
            let name = match t {
                Lambda::Auto => "auto",
                Lambda::Gap => "gap",
                _ => "distance",
            };
            (name, Some(height), labels, scores)
        }
    };

    let n_clusters = labels.iter().max().map_or(0, |m| m + 1);
    let mut cluster_sizes = vec![0usize; n_clusters];
    for &l in &labels {
        cluster_sizes[l] += 1;
    }
    let merges: Vec<Value> = tree
        .merges()
        .iter()
        .map(|m| json!([m.a, m.b, m.height, m.size]))
        .collect();
    Ok(json!({
        "input": path.display().to_string(),
        "n": n,
        "dim": dim,
        "metric": args.metric.as_str(),
        "linkage": args.linkage.as_str(),
        "cut": name,
        "threshold": threshold,
        "cut_scores": scores,
        "n_clusters": n_clusters,
        "labels": labels,
        "cluster_sizes": cluster_sizes,
        "heights": tree.heights(),
        "merges": merges,
    }))
}

/// A distance threshold whose cut equals `cut_k(k)`: the midpoint between the last applied and
/// the first unapplied merge height; `None` when those heights are equal (no distance separates
/// them).
fn threshold_for_k(tree: &Dendrogram, k: usize) -> Option<f64> {
    let h = tree.heights();
    let applied = tree.n().saturating_sub(k);
    let lo = applied.checked_sub(1).and_then(|i| h.get(i)).copied();
    let hi = h.get(applied).copied();
    match (lo, hi) {
        (Some(lo), None) => Some(lo),
        (None, Some(hi)) if hi > 0.0 => Some(hi / 2.0),
        (Some(lo), Some(hi)) if hi > lo => {
            let mid = lo + (hi - lo) / 2.0;
            Some(if mid < hi { mid } else { lo })
        }
        (None, None) => Some(0.0),
        _ => None,
    }
}

/// Reads the observations of a `.npy` or `.csv` file; returns them and their dimension.
pub fn read_points(path: &Path) -> anyhow::Result<(Vec<Vec<f32>>, usize)> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let shown = path.display();
    match ext.as_deref() {
        Some("npy") => {
            let bytes = std::fs::read(path).with_context(|| format!("cannot read {shown}"))?;
            parse_npy(&bytes).with_context(|| format!("{shown}: not a usable .npy file"))
        }
        Some("csv") => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {shown}"))?;
            parse_csv(&text).with_context(|| format!("{shown}: not a usable .csv file"))
        }
        _ => bail!("{shown}: unknown input format (expected a .npy or .csv file)"),
    }
}

/// Element type of a `.npy` array.
#[derive(Clone, Copy)]
enum NpyType {
    F4,
    F8,
}

/// Parses a NumPy `.npy` file holding a 2-D little-endian float32 or float64 array.
pub fn parse_npy(bytes: &[u8]) -> anyhow::Result<(Vec<Vec<f32>>, usize)> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    ensure!(
        bytes.len() >= 10 && bytes.starts_with(MAGIC),
        "missing the \\x93NUMPY magic bytes"
    );
    let major = bytes[6];
    let (header_len, start): (usize, usize) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => {
            ensure!(bytes.len() >= 12, "truncated header");
            let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (usize::try_from(len).context("header too long")?, 12)
        }
        v => bail!("unsupported .npy format version {v}"),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .context("truncated header")?;
    let header = std::str::from_utf8(&bytes[start..end]).context("header is not text")?;

    let descr = header_value(header, "descr").context("header has no 'descr'")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let ty = match descr {
        "<f4" => NpyType::F4,
        "<f8" => NpyType::F8,
        other => bail!(
            "unsupported dtype {other:?}: expected little-endian float32 ('<f4') or float64 \
             ('<f8'); convert with X.astype(np.float32)"
        ),
    };
    let fortran = match header_value(header, "fortran_order").map(str::trim) {
        Some("False") => false,
        Some("True") => true,
        _ => bail!("header has no valid 'fortran_order'"),
    };
    let shape_text = header_value(header, "shape").context("header has no 'shape'")?;
    let shape: Vec<usize> = shape_text
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .with_context(|| format!("bad shape {shape_text}"))
        })
        .collect::<Result<_, _>>()?;
    let [rows, cols] = shape[..] else {
        bail!(
            "expected a 2-D array (observations × features), got shape {}",
            shape_text.trim()
        );
    };
    let item = match ty {
        NpyType::F4 => 4,
        NpyType::F8 => 8,
    };
    let count = rows.checked_mul(cols).context("shape too large")?;
    let need = count.checked_mul(item).context("shape too large")?;
    let data = &bytes[end..];
    ensure!(
        data.len() >= need,
        "data is truncated: shape ({rows}, {cols}) needs {need} bytes, found {}",
        data.len()
    );
    let values: Vec<f32> = match ty {
        NpyType::F4 => data[..need]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        NpyType::F8 => data[..need]
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
    };
    let points = (0..rows)
        .map(|r| {
            (0..cols)
                .map(|c| {
                    if fortran {
                        values[c * rows + r]
                    } else {
                        values[r * cols + c]
                    }
                })
                .collect()
        })
        .collect();
    Ok((points, cols))
}

/// The text of `'key': value` in a `.npy` header dict, up to the next top-level comma or `}`.
fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let pos = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[pos + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?;
    let mut depth = 0i32;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    Some(rest.trim())
}

/// Parses CSV text: comma-separated numbers, one observation per line; a non-numeric first line
/// is a header and skipped; empty lines are ignored; all rows must have the same length.
pub fn parse_csv(text: &str) -> anyhow::Result<(Vec<Vec<f32>>, usize)> {
    let mut points: Vec<Vec<f32>> = Vec::new();
    let mut first = true;
    for (lineno, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let parsed: Result<Vec<f32>, _> =
            line.split(',').map(|f| f.trim().parse::<f32>()).collect();
        match parsed {
            Ok(row) => {
                if let Some(prev) = points.first() {
                    ensure!(
                        row.len() == prev.len(),
                        "line {} has {} values, expected {} like the first data row",
                        lineno + 1,
                        row.len(),
                        prev.len()
                    );
                }
                points.push(row);
            }
            Err(_) if first => {} // header
            Err(e) => bail!("line {}: {e} in {line:?}", lineno + 1),
        }
        first = false;
    }
    let dim = points.first().map_or(0, Vec::len);
    Ok((points, dim))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, fortran: bool, data: &[u8], version: u8) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        let pre = if version == 1 { 10 } else { 12 };
        while (pre + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY".to_vec();
        out.push(version);
        out.push(0);
        if version == 1 {
            out.extend((header.len() as u16).to_le_bytes());
        } else {
            out.extend((header.len() as u32).to_le_bytes());
        }
        out.extend(header.as_bytes());
        out.extend(data);
        out
    }

    #[test]
    fn npy_f4_f8_and_orders() {
        let vals = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let f4: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f8: Vec<u8> = vals
            .iter()
            .flat_map(|v| f64::from(*v).to_le_bytes())
            .collect();
        let want = vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]];
        assert_eq!(
            parse_npy(&npy("<f4", "(2, 3)", false, &f4, 1)).unwrap(),
            (want.clone(), 3)
        );
        assert_eq!(
            parse_npy(&npy("<f8", "(2, 3)", false, &f8, 2)).unwrap(),
            (want.clone(), 3)
        );
        // Fortran order: memory holds columns.
        let cols: Vec<u8> = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            parse_npy(&npy("<f4", "(2, 3)", true, &cols, 1)).unwrap(),
            (want, 3)
        );
    }

    #[test]
    fn npy_errors() {
        let f4: Vec<u8> = [1.0f32; 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let err = |b: &[u8]| format!("{:#}", parse_npy(b).unwrap_err());
        assert!(err(b"not numpy at all").contains("magic"));
        assert!(err(&npy(">f4", "(2, 3)", false, &f4, 1)).contains("unsupported dtype"));
        assert!(err(&npy("<i8", "(2, 3)", false, &f4, 1)).contains("unsupported dtype"));
        assert!(err(&npy("<f4", "(6,)", false, &f4, 1)).contains("2-D"));
        assert!(err(&npy("<f4", "(3, 3)", false, &f4, 1)).contains("truncated"));
        assert!(err(&npy("<f4", "(2, 3)", false, &f4, 9)).contains("version"));
        assert!(err(&f4[..3]).contains("magic"));
    }

    #[test]
    fn csv_header_and_errors() {
        let (p, d) = parse_csv("x,y\n1,2\n\n3.5, -4\n").unwrap();
        assert_eq!((p, d), (vec![vec![1.0, 2.0], vec![3.5, -4.0]], 2));
        let (p, _) = parse_csv("1,2\n3,4\n").unwrap();
        assert_eq!(p.len(), 2);
        assert!(format!("{:#}", parse_csv("1,2\n3\n").unwrap_err()).contains("line 2"));
        assert!(format!("{:#}", parse_csv("1,2\n3,abc\n").unwrap_err()).contains("line 2"));
        assert_eq!(parse_csv("").unwrap().0.len(), 0);
    }

    #[test]
    fn lambda_parsing() {
        assert_eq!("auto".parse::<Lambda>().unwrap(), Lambda::Auto);
        assert_eq!("1.5".parse::<Lambda>().unwrap(), Lambda::Distance(1.5));
        assert!("-1".parse::<Lambda>().is_err());
        assert!("nan".parse::<Lambda>().is_err());
        assert!("x".parse::<Lambda>().is_err());
    }
}
