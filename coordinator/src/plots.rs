//! SVG plots of a run: accuracy per round (mean and per cluster), the dendrogram with the cut
//! (and, for the automatic cuts, each candidate cut's score beside it, on the same height axis),
//! and the clients' distance matrix as a heatmap ordered by cluster.

use std::path::{Path, PathBuf};

use anyhow::Context;
use edgecfl_shared::cluster::clustering::Clustering;
use edgecfl_shared::cluster::cut::{CutRule, CutScores};
use edgecfl_shared::cluster::hc::Dendrogram;
use edgecfl_shared::federation::RunResult;
use plotters::prelude::*;

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// The curves' colours, here and in the live view (`live/page.js`'s `COLORS`, which a test
/// holds equal): Okabe and Ito's palette for colour-blind readers without its yellow, which
/// does not show on white, and black, which the mean over clients is, plus Tol's wine.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x88, 0x22, 0x55),
];

/// Colour `i` of [`PALETTE`] (cycling).
fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Writes every plot the run allows into `dir`; returns the paths written.
pub fn write_all(dir: &Path, result: &RunResult) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut emit = |name: &str, draw: &dyn Fn(&Path) -> DrawResult| -> anyhow::Result<()> {
        let p = dir.join(name);
        draw(&p)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("cannot draw {}", p.display()))?;
        written.push(p);
        Ok(())
    };
    if result.rounds.iter().any(|r| r.accuracy.is_some()) {
        emit("accuracy.svg", &|p| accuracy(p, result))?;
    }
    if let Some(c) = &result.clustering {
        emit("dendrogram.svg", &|p| {
            dendrogram(p, &c.dendrogram, c.threshold, c.cut.as_ref())
        })?;
    }
    if let Some(d) = &result.distances {
        let max = d.as_slice().iter().copied().fold(0.0, f64::max).max(1e-12);
        let title = format!("client distances (max {max:.3}), ordered by cluster");
        emit("distances.svg", &|p| {
            heatmap(
                p,
                d.n(),
                &|i, j| {
                    if i == j {
                        0.0
                    } else {
                        d.get(i, j).unwrap_or(0.0)
                    }
                },
                max,
                &title,
                &result.assignment,
            )
        })?;
    }
    if let Some(r) = &result.relevance {
        emit("relevance.svg", &|p| {
            heatmap(
                p,
                r.len(),
                &|i, j| r[i][j],
                1.0,
                "MT-HFL relevance R (eq. 5), ordered by cluster",
                &result.assignment,
            )
        })?;
    }
    Ok(written)
}

/// Mean local test accuracy per round, and each cluster's mean (thin lines).
fn accuracy(path: &Path, result: &RunResult) -> DrawResult {
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let last = result.rounds.last().map_or(1, |r| r.round).max(1);
    // The y axis starts at the decade below the lowest accuracy drawn (5 points of room), so
    // that curves that differ by a point are told apart.
    let show_clusters = result.n_clusters > 1 && result.n_clusters <= 20;
    let lowest = result
        .rounds
        .iter()
        .flat_map(|r| {
            let clusters = r
                .cluster_accuracy
                .iter()
                .filter(|_| show_clusters)
                .flatten()
                .copied();
            let tasks = r.task_accuracy.iter().flatten().copied();
            r.accuracy.into_iter().chain(clusters).chain(tasks)
        })
        .filter(|a| a.is_finite())
        .fold(1.0f64, f64::min);
    let bottom = axis_bottom(100.0 * lowest);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{} — mean local test accuracy ({} clusters)",
                result.method, result.n_clusters
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..last as f64, bottom..100f64)?;
    chart
        .configure_mesh()
        .x_desc("round")
        .y_desc("accuracy (%)")
        // Rounds are whole: at most 11 ticks, on whole steps of 1, 2, 5, 10, ...
        .x_labels(last.min(10) + 1)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    // Per ground-truth task, when the truth is known: wide translucent dashes underneath, so a
    // cluster whose curve is its task's shows as a line inside a band.
    let tasks = result.n_tasks();
    for t in 0..tasks {
        let pts: Vec<(f64, f64)> = result
            .rounds
            .iter()
            .filter_map(|r| {
                let a = *r.task_accuracy.as_ref()?.get(t)?;
                a.is_finite().then_some((r.round as f64, 100.0 * a))
            })
            .collect();
        let style = colour(t).mix(0.35).stroke_width(6);
        chart
            .draw_series(DashedLineSeries::new(pts, 10, 5, style))?
            .label(format!("task {t} (its labels)"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
    }
    if show_clusters {
        for c in 0..result.n_clusters {
            let pts = result.rounds.iter().filter_map(|r| {
                let a = r.cluster_accuracy.as_ref()?.get(c)?;
                Some((r.round as f64, 100.0 * a))
            });
            let style = colour(c).stroke_width(2);
            chart
                .draw_series(LineSeries::new(pts, style))?
                .label(format!("cluster {c}"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
        }
    }
    let mean = result
        .rounds
        .iter()
        .filter_map(|r| r.accuracy.map(|a| (r.round as f64, 100.0 * a)));
    chart
        .draw_series(LineSeries::new(mean, BLACK.stroke_width(3)))?
        .label("mean over clients")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.stroke_width(3)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The bottom of an accuracy axis (in %) whose lowest value is `lowest`: the decade below
/// `lowest − 5`, within 0..=90.
fn axis_bottom(lowest: f64) -> f64 {
    (((lowest - 5.0) / 10.0).floor() * 10.0).clamp(0.0, 90.0)
}

/// Leaf order of a dendrogram (left child first, as scipy draws it) and each node's x position.
fn dendrogram_layout(d: &Dendrogram) -> (Vec<usize>, Vec<f64>) {
    let n = d.n();
    let merges = d.merges();
    let mut order = Vec::with_capacity(n);
    if n == 0 {
        return (order, Vec::new());
    }
    // Iterative depth-first walk from the root (node 2n-2).
    let mut stack = vec![2 * n - 2];
    while let Some(node) = stack.pop() {
        if node < n {
            order.push(node);
        } else {
            let m = &merges[node - n];
            stack.push(m.b);
            stack.push(m.a);
        }
    }
    let mut x = vec![0.0; 2 * n - 1];
    for (pos, &leaf) in order.iter().enumerate() {
        x[leaf] = pos as f64;
    }
    for (k, m) in merges.iter().enumerate() {
        x[n + k] = (x[m.a] + x[m.b]) / 2.0;
    }
    (order, x)
}

/// Most leaves a dendrogram labels with their client.
const MAX_LEAF_LABELS: usize = 40;

/// The merge tree with a dashed line at the cut height; with `scores`, a panel on the right plots
/// each candidate cut's score (x) at its threshold (y, the tree's height axis), the chosen one in
/// red, and the score needed to beat one cluster as a dotted line.
fn dendrogram(path: &Path, d: &Dendrogram, cut: f64, scores: Option<&CutScores>) -> DrawResult {
    if d.n() < 2 {
        return Ok(());
    }
    let root = SVGBackend::new(path, dendrogram_size(scores)).into_drawing_area();
    dendrogram_on(root, d, cut, scores)
}

/// The dendrogram plot's size in pixels (wider with the cut-score panel).
fn dendrogram_size(scores: Option<&CutScores>) -> (u32, u32) {
    (if scores.is_some() { 1400 } else { 1000 }, 520)
}

/// A clustering's dendrogram with its cut as SVG text (the file `dendrogram.svg` holds;
/// the live view serves it once round 0 is done). Empty below 2 clients.
pub fn dendrogram_svg(c: &Clustering) -> anyhow::Result<String> {
    let mut svg = String::new();
    if c.dendrogram.n() >= 2 {
        let scores = c.cut.as_ref();
        let root = SVGBackend::with_string(&mut svg, dendrogram_size(scores)).into_drawing_area();
        dendrogram_on(root, &c.dendrogram, c.threshold, scores)
            .map_err(|e| anyhow::anyhow!("cannot draw the dendrogram: {e}"))?;
    }
    Ok(svg)
}

fn dendrogram_on<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    d: &Dendrogram,
    cut: f64,
    scores: Option<&CutScores>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let n = d.n();
    let (order, x) = dendrogram_layout(d);
    let merges = d.merges();
    let top = merges
        .iter()
        .map(|m| m.height)
        .fold(cut, f64::max)
        .max(1e-9)
        * 1.05;
    let height = |node: usize| {
        if node < n {
            0.0
        } else {
            merges[node - n].height
        }
    };
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(1000);
    let k = d.n_clusters_at(cut);
    let mut chart = ChartBuilder::on(&left)
        .caption(
            format!("dendrogram of {n} clients, cut at {cut:.4} ({k} clusters)"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-1f64..n as f64, 0f64..top)?;
    // Under each leaf, the client's position in the run (the order of `clusters.json` and of
    // `summary.json`'s per-client arrays), while the labels fit.
    let leaf = |v: &f64| {
        let p = v.round();
        match order.get(p as usize) {
            Some(i) if p >= 0.0 && (v - p).abs() < 1e-6 => i.to_string(),
            _ => String::new(),
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh().y_desc("merge height");
    let many = format!("{n} clients, in the tree's order (too many to name each)");
    if n <= MAX_LEAF_LABELS {
        mesh.x_labels(n + 2)
            .x_label_formatter(&leaf)
            .x_desc("client (position in the run)");
    } else {
        mesh.x_labels(0).x_desc(many.as_str());
    }
    mesh.draw()?;
    chart.draw_series(merges.iter().enumerate().map(|(k, m)| {
        let h = m.height;
        let color = if h <= cut {
            PALETTE[0]
        } else {
            RGBColor(150, 150, 150)
        };
        PathElement::new(
            vec![
                (x[m.a], height(m.a)),
                (x[m.a], h),
                (x[m.b], h),
                (x[m.b], height(m.b)),
            ],
            color.stroke_width(if k + 1 == merges.len() { 2 } else { 1 }),
        )
    }))?;
    chart.draw_series(DashedLineSeries::new(
        vec![(-1.0, cut), (n as f64, cut)],
        6,
        4,
        PALETTE[1].stroke_width(2),
    ))?;
    chart.draw_series(std::iter::once(Text::new(
        format!("cut {cut:.4}"),
        (-0.8, cut + 0.06 * top),
        ("sans-serif", 14).into_font().color(&PALETTE[1]),
    )))?;
    if let Some(s) = scores {
        cut_scores(&right, s, top)?;
    }
    root.present()?;
    Ok(())
}

/// The candidate cuts' scores against their thresholds (see [`dendrogram`]).
fn cut_scores<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    s: &CutScores,
    top: f64,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let pts: Vec<(f64, f64)> = s
        .candidates
        .iter()
        .filter_map(|c| c.score.map(|v| (v, c.threshold)))
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    let (name, lo, hi) = match s.rule {
        CutRule::Silhouette => (
            "mean silhouette",
            pts.iter().map(|p| p.0).fold(0.0, f64::min).max(-1.0),
            1.0,
        ),
        CutRule::Gap => (
            "gap above the cut",
            0.0,
            pts.iter().map(|p| p.0).fold(1e-9, f64::max) * 1.05,
        ),
    };
    let mut chart = ChartBuilder::on(area)
        .caption("score of each candidate cut", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc(name)
        .y_desc("threshold (merge height in the tree)")
        .x_labels(5)
        .y_labels(6)
        .draw()?;
    let line = PALETTE[0];
    chart.draw_series(LineSeries::new(pts.iter().copied(), line.stroke_width(1)))?;
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 2, line.filled())))?;
    if let Some(m) = s.min_score {
        chart.draw_series(DashedLineSeries::new(
            vec![(m, 0.0), (m, top)],
            2,
            4,
            BLACK.stroke_width(1),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("dotted: {m:.3}, the score to beat one cluster"),
            (lo + 0.02 * (hi - lo), 0.99 * top),
            ("sans-serif", 13).into_font(),
        )))?;
    }
    if let Some(c) = s.chosen() {
        let x = c.score.filter(|v| v.is_finite()).unwrap_or(lo);
        let chosen = PALETTE[1];
        chart.draw_series(std::iter::once(Circle::new(
            (x, c.threshold),
            5,
            chosen.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{} clusters at threshold {:.4}", c.n_clusters, c.threshold),
            (lo + 0.02 * (hi - lo), c.threshold + 0.06 * top),
            ("sans-serif", 14).into_font().color(&chosen),
        )))?;
    }
    Ok(())
}

/// The viridis scale of a heatmap, `0..=max`, with its ticks.
fn colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    max: f64,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let mut bar = ChartBuilder::on(area)
        .margin_top(50)
        .margin_bottom(52)
        .margin_right(8)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..1f64, 0f64..max)?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_style(("sans-serif", 13))
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()?;
    let steps = 64;
    bar.draw_series((0..steps).map(|k| {
        let (a, b) = (k as f64 / steps as f64, (k + 1) as f64 / steps as f64);
        Rectangle::new(
            [(0.0, a * max), (1.0, b * max)],
            ViridisRGB::get_color(a).filled(),
        )
    }))?;
    Ok(())
}

/// Most cells per side of a heatmap: above this many clients, each cell is the mean over a block
/// of clients (500 clients cell by cell made a 21 MB SVG).
const HEATMAP_CELLS: usize = 100;

/// A client × client matrix (`value(i, j)`, coloured on `0..=max` with viridis) with clients
/// sorted by cluster, then index; white lines separate clusters. Up to 16 clients, every cell
/// carries its value (like the paper's Table I); above [`HEATMAP_CELLS`] clients, a cell is the
/// mean over a block of about `n / HEATMAP_CELLS` clients squared.
fn heatmap(
    path: &Path,
    n: usize,
    value: &dyn Fn(usize, usize) -> f64,
    max: f64,
    title: &str,
    assignment: &[usize],
) -> DrawResult {
    if n < 2 || assignment.len() != n {
        return Ok(());
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (assignment[i], i));
    let max = max.max(1e-12);
    let root = SVGBackend::new(path, (860, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let (area, bar) = root.split_horizontally(760);
    let mut chart = ChartBuilder::on(&area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..n as f64, 0f64..n as f64)?;
    // Each row and column named by its client (its position in the run) while the names fit:
    // column k is sorted client k, row k (from the top) too.
    let named = n <= MAX_LEAF_LABELS;
    let column = |v: &f64| match order.get(v.floor() as usize) {
        Some(i) if *v >= 0.0 && v.fract() > 0.4 && v.fract() < 0.6 => i.to_string(),
        _ => String::new(),
    };
    let row = |v: &f64| column(&(n as f64 - v));
    let desc = if named {
        "client (position in the run), by cluster".to_string()
    } else {
        format!("{n} clients, by cluster")
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_mesh()
        .x_desc(desc.as_str())
        .y_desc(desc.as_str());
    if named {
        mesh.x_labels(2 * n + 1)
            .y_labels(2 * n + 1)
            .x_label_formatter(&column)
            .y_label_formatter(&row);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    colour_bar(&bar, max)?;
    // Block b covers the sorted clients edges[b]..edges[b + 1] (one client each up to
    // HEATMAP_CELLS clients).
    let m = n.min(HEATMAP_CELLS);
    let edges: Vec<usize> = (0..=m).map(|b| b * n / m).collect();
    let blocks = (0..m).flat_map(|br| (0..m).map(move |bc| (br, bc)));
    chart.draw_series(blocks.map(|(br, bc)| {
        let (rows, cols) = (edges[br]..edges[br + 1], edges[bc]..edges[bc + 1]);
        let sum: f64 = rows
            .clone()
            .flat_map(|r| cols.clone().map(move |c| (r, c)))
            .map(|(r, c)| value(order[r], order[c]))
            .sum();
        let mean = sum / (rows.len() * cols.len()) as f64;
        let color = ViridisRGB::get_color((mean / max).clamp(0.0, 1.0));
        Rectangle::new(
            [
                (cols.start as f64, (n - rows.start) as f64),
                (cols.end as f64, (n - rows.end) as f64),
            ],
            color.filled(),
        )
    }))?;
    if n <= 16 {
        let cells = (0..n).flat_map(|r| (0..n).map(move |c| (r, c)));
        chart.draw_series(cells.map(|(r, c)| {
            let v = value(order[r], order[c]);
            let ink = if v / max > 0.6 { BLACK } else { WHITE };
            Text::new(
                format!("{v:.2}"),
                (c as f64 + 0.2, (n - r) as f64 - 0.4),
                ("sans-serif", 13).into_font().color(&ink),
            )
        }))?;
    }
    // Cluster boundaries.
    for k in 1..n {
        if assignment[order[k]] != assignment[order[k - 1]] {
            let at = k as f64;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(at, 0.0), (at, n as f64)],
                WHITE.stroke_width(2),
            )))?;
            let y = (n - k) as f64;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(0.0, y), (n as f64, y)],
                WHITE.stroke_width(2),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecfl_shared::cluster::distance::CondensedMatrix;
    use edgecfl_shared::cluster::hc::{Linkage, linkage};

    #[test]
    fn large_heatmaps_are_drawn_in_blocks() {
        let dir = std::env::temp_dir().join(format!("edgecfl-heatmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rects = |n: usize| {
            let path = dir.join(format!("h{n}.svg"));
            let assignment: Vec<usize> = (0..n).map(|i| i % 3).collect();
            heatmap(
                &path,
                n,
                &|i, j| i.abs_diff(j) as f64,
                n as f64,
                "t",
                &assignment,
            )
            .unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            (svg.matches("<rect").count(), svg.len())
        };
        let (small, _) = rects(50);
        let (large, bytes) = rects(500);
        // 50 clients: a cell each; 500: at most 100 × 100 blocks (plus the background and the
        // colour bar's 64 steps).
        assert!((2564..2580).contains(&small), "{small}");
        assert!((10_064..10_080).contains(&large), "{large}");
        assert!(bytes < 2_000_000, "{bytes} bytes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dendrogram_with_scores_is_drawn() {
        use edgecfl_shared::cluster::cut::silhouette_cut;
        let dir = std::env::temp_dir().join(format!("edgecfl-dendro-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pts: Vec<Vec<f32>> = [0.0, 0.1, 0.2, 5.0, 5.1, 9.0, 9.2]
            .iter()
            .map(|&v| vec![v])
            .collect();
        let dist = CondensedMatrix::euclidean(&pts).unwrap();
        let d = linkage(&dist, Linkage::Average);
        let s = silhouette_cut(&d, &dist).unwrap();
        let path = dir.join("d.svg");
        dendrogram(&path, &d, s.threshold(), Some(&s)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("mean silhouette"));
        assert!(svg.contains(&format!("3 clusters at threshold {:.4}", s.threshold())));
        assert!(svg.contains(&format!("cut {:.4}", s.threshold())));
        assert!(svg.contains("threshold (merge height in the tree)"));
        if let Some(m) = s.min_score {
            assert!(svg.contains(&format!("dotted: {m:.3}, the score to beat one cluster")));
        }
        // Each leaf is labelled with its client, in the tree's leaf order.
        let texts: Vec<&str> = svg
            .split("</text>")
            .filter_map(|t| t.rsplit('>').next().map(str::trim))
            .collect();
        let (order, _) = dendrogram_layout(&d);
        let labels: Vec<String> = order.iter().map(|i| i.to_string()).collect();
        assert!(
            texts.windows(labels.len()).any(|w| w == labels.as_slice()),
            "{labels:?} not in {texts:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The live view draws its curves in the plots' colours.
    #[test]
    fn the_live_view_has_the_plots_palette() {
        let js = include_str!("live/page.js");
        let line = js
            .lines()
            .find(|l| l.starts_with("const COLORS = "))
            .unwrap();
        let theirs: Vec<String> = line
            .split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_ascii_uppercase)
            .collect();
        let ours: Vec<String> = PALETTE
            .iter()
            .map(|RGBColor(r, g, b)| format!("#{r:02X}{g:02X}{b:02X}"))
            .collect();
        assert_eq!(theirs, ours);
    }

    /// A small distance matrix names every client on both axes (sorted by cluster) and has a
    /// colour scale with ticks from 0 to its maximum.
    #[test]
    fn a_heatmap_names_its_clients_and_has_a_colour_scale() {
        let dir = std::env::temp_dir().join(format!("edgecfl-heat-axes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.svg");
        let assignment = [1, 0, 1, 0, 2, 2, 0];
        heatmap(
            &path,
            7,
            &|i, j| i.abs_diff(j) as f64,
            6.0,
            "t",
            &assignment,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let texts: Vec<&str> = svg
            .split("</text>")
            .filter_map(|t| t.rsplit('>').next().map(str::trim))
            .filter(|t| !t.is_empty())
            .collect();
        // Sorted by cluster, then index: 1 3 6 | 0 2 | 4 5, along x and down y.
        let sorted = ["1", "3", "6", "0", "2", "4", "5"];
        assert!(texts.windows(7).any(|w| w == sorted), "x axis: {texts:?}");
        let mut up = sorted;
        up.reverse();
        assert!(texts.windows(7).any(|w| w == up), "y axis: {texts:?}");
        assert!(svg.contains("client (position in the run), by cluster"));
        for tick in ["0.00", "6.00"] {
            assert!(texts.contains(&tick), "colour scale tick {tick}: {texts:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn accuracy_axis_starts_at_the_decade_below_the_lowest_value_less_5() {
        assert_eq!(axis_bottom(94.36), 80.0);
        assert_eq!(axis_bottom(95.0), 90.0);
        assert_eq!(axis_bottom(100.0), 90.0);
        assert_eq!(axis_bottom(14.9), 0.0);
        assert_eq!(axis_bottom(15.0), 10.0);
        assert_eq!(axis_bottom(0.0), 0.0);
    }

    #[test]
    fn leaf_order_follows_the_tree() {
        // Points 0, 10, 1, 11 on a line: merges (0,2) and (1,3), then the two pairs.
        let pts: Vec<Vec<f32>> = [0.0, 10.0, 1.0, 11.0].iter().map(|&v| vec![v]).collect();
        let d = linkage(&CondensedMatrix::euclidean(&pts).unwrap(), Linkage::Single);
        let (order, x) = dendrogram_layout(&d);
        assert_eq!(order.len(), 4);
        // Members of a pair sit next to each other.
        let pos = |leaf: usize| order.iter().position(|&l| l == leaf).unwrap() as i64;
        assert_eq!((pos(0) - pos(2)).abs(), 1);
        assert_eq!((pos(1) - pos(3)).abs(), 1);
        // The root sits in the middle of the leaves.
        assert_eq!(x[6], 1.5);
    }
}
