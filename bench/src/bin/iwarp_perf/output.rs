//! What a run leaves behind: HdrHistogram percentile-distribution text
//! (`.hgrm`), a PNG of latency-by-percentile curves and a PNG of bandwidth
//! bars, drawn into an RGB buffer and compressed by the `png` crate. Text
//! (title, axis labels, tick values, the legend) is drawn with a small
//! built-in 5×7 bitmap font: a plotting crate would bring a font stack
//! (fontconfig, FreeType) for a few labels.

use std::io::Write;
use std::path::Path;

use hdrhistogram::Histogram;

/// Write `h` (values in nanoseconds) as HdrHistogram's percentile
/// distribution text with values in microseconds, 5 ticks per half
/// distance, as `HistogramLogProcessor`/`outputPercentileDistribution` do.
pub fn write_hgrm(path: &Path, h: &Histogram<u64>) -> std::io::Result<()> {
    let mut out = String::new();
    out.push_str(&format!(
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    ));
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let value = h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                out.push_str(&format!(
                    "{value:>12.3} {q:>2.12} {total:>10} {:>14.2}\n",
                    1.0 / (1.0 - q)
                ));
            } else {
                out.push_str(&format!("{value:>12.3} {q:>2.12} {total:>10}\n"));
            }
        }
    }
    out.push_str(&format!(
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]\n",
        h.mean() / 1000.0,
        h.stdev() / 1000.0
    ));
    out.push_str(&format!(
        "#[Max     = {:>12.3}, Total count    = {:>12}]\n",
        h.max() as f64 / 1000.0,
        h.len()
    ));
    out.push_str(&format!(
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]\n",
        h.buckets(),
        // Sub-bucket count as HdrHistogram defines it: 2 × 10^sigfig rounded up to a power of two.
        (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two()
    ));
    std::fs::write(path, out)
}

/// An RGB image.
pub struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    pub fn new(w: usize, h: usize) -> Self {
        Canvas {
            w,
            h,
            px: vec![255; w * h * 3],
        }
    }

    /// A filled rectangle, corners included.
    pub fn fill(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: [u8; 3]) {
        for y in y0.max(0)..=y1.min(self.h as i64 - 1) {
            for x in x0.max(0)..=x1.min(self.w as i64 - 1) {
                self.set(x, y, c);
            }
        }
    }

    /// Text in the 5×7 font, each font pixel `scale` pixels square, one
    /// font column between glyphs. Horizontal: (x, y) is the top-left
    /// corner. `up`: rotated a quarter turn counter-clockwise (read from
    /// bottom to top); (x, y) is then the bottom-left corner.
    pub fn text(&mut self, x: i64, y: i64, s: &str, c: [u8; 3], scale: i64, up: bool) {
        for (k, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (gy, row) in g.iter().enumerate() {
                for gx in 0..5i64 {
                    if row & (0x10 >> gx) == 0 {
                        continue;
                    }
                    let (u, v) = ((k as i64 * 6 + gx) * scale, gy as i64 * scale);
                    let (px, py) = if up {
                        (x + v, y - u - scale + 1)
                    } else {
                        (x + u, y + v)
                    };
                    self.fill(px, py, px + scale - 1, py + scale - 1, c);
                }
            }
        }
    }

    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    /// A line, `thick` pixels wide (Bresenham, square pen).
    pub fn line(&mut self, a: (f64, f64), b: (f64, f64), c: [u8; 3], thick: i64) {
        let (mut x0, mut y0) = (a.0.round() as i64, a.1.round() as i64);
        let (x1, y1) = (b.0.round() as i64, b.1.round() as i64);
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let mut err = dx + dy;
        // Bounded by the line's length in pixels.
        for _ in 0..=(dx - dy + 1) {
            for ox in 0..thick {
                for oy in 0..thick {
                    self.set(x0 + ox - thick / 2, y0 + oy - thick / 2, c);
                }
            }
            if x0 == x1 && y0 == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x0 += sx;
            }
            if e2 <= dx {
                err += dx;
                y0 += sy;
            }
        }
    }

    /// Encode as PNG (8-bit RGB) through the `png` crate, compressed:
    /// a plot of a few flat colours is a few KiB, not the raw pixels.
    pub fn png(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        let mut w = enc.write_header().map_err(std::io::Error::other)?;
        w.write_image_data(&self.px)
            .map_err(std::io::Error::other)?;
        w.finish().map_err(std::io::Error::other)?;
        Ok(out)
    }
}

/// Width in pixels of `s` drawn by [`Canvas::text`] at `scale`.
pub fn text_width(s: &str, scale: i64) -> i64 {
    (s.chars().count() as i64 * 6 - 1).max(0) * scale
}

/// A 5×7 glyph, one row per octet (top first), bit 4 the leftmost column.
/// Characters without a glyph are drawn as a hollow box.
fn glyph(c: char) -> [u8; 7] {
    match c {
        ' ' => [0; 7],
        '0' => [0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e],
        '1' => [0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e],
        '2' => [0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f],
        '3' => [0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e],
        '4' => [0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02],
        '5' => [0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e],
        '6' => [0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e],
        '7' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e],
        '9' => [0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c],
        '.' => [0, 0, 0, 0, 0, 0x0c, 0x0c],
        ',' => [0, 0, 0, 0, 0x0c, 0x04, 0x08],
        ':' => [0, 0x0c, 0x0c, 0, 0x0c, 0x0c, 0],
        '-' => [0, 0, 0, 0x1f, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0x1f],
        '=' => [0, 0, 0x1f, 0, 0x1f, 0, 0],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        'a' => [0, 0, 0x0e, 0x01, 0x0f, 0x11, 0x0f],
        'b' => [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e],
        'c' => [0, 0, 0x0e, 0x10, 0x10, 0x11, 0x0e],
        'd' => [0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f],
        'e' => [0, 0, 0x0e, 0x11, 0x1f, 0x10, 0x0e],
        'f' => [0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08],
        'g' => [0, 0x0f, 0x11, 0x11, 0x0f, 0x01, 0x0e],
        'h' => [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11],
        'i' => [0x04, 0, 0x0c, 0x04, 0x04, 0x04, 0x0e],
        'j' => [0x02, 0, 0x06, 0x02, 0x02, 0x12, 0x0c],
        'k' => [0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12],
        'l' => [0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
        'm' => [0, 0, 0x1a, 0x15, 0x15, 0x11, 0x11],
        'n' => [0, 0, 0x16, 0x19, 0x11, 0x11, 0x11],
        'o' => [0, 0, 0x0e, 0x11, 0x11, 0x11, 0x0e],
        'p' => [0, 0, 0x1e, 0x11, 0x11, 0x1e, 0x10],
        'q' => [0, 0, 0x0f, 0x11, 0x11, 0x0f, 0x01],
        'r' => [0, 0, 0x16, 0x19, 0x10, 0x10, 0x10],
        's' => [0, 0, 0x0e, 0x10, 0x0e, 0x01, 0x1e],
        't' => [0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06],
        'u' => [0, 0, 0x11, 0x11, 0x11, 0x13, 0x0d],
        'v' => [0, 0, 0x11, 0x11, 0x11, 0x0a, 0x04],
        'w' => [0, 0, 0x11, 0x11, 0x15, 0x15, 0x0a],
        'x' => [0, 0, 0x11, 0x0a, 0x04, 0x0a, 0x11],
        'y' => [0, 0, 0x11, 0x11, 0x0f, 0x01, 0x0e],
        'z' => [0, 0, 0x1f, 0x02, 0x04, 0x08, 0x1f],
        'µ' => [0, 0, 0x11, 0x11, 0x13, 0x1d, 0x10],
        'A' => [0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'C' => [0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e],
        'I' => [0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f],
        'P' => [0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10],
        'R' => [0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11],
        'T' => [0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a],
        'B' => [0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e],
        'D' => [0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c],
        'E' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f],
        'F' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10],
        'G' => [0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f],
        'H' => [0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'M' => [0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'Q' => [0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d],
        'S' => [0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04],
        'X' => [0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0a, 0x04, 0x04, 0x04],
        'Z' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f],
        '+' => [0, 0x04, 0x04, 0x1f, 0x04, 0x04, 0],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02],
        '*' => [0, 0x04, 0x15, 0x0e, 0x15, 0x04, 0],
        _ => [0x1f, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1f],
    }
}

/// The y axis's decades: `10^lo` at or below the smallest positive value,
/// `10^hi` above the largest (at least one decade apart; 1..10 µs when
/// there is nothing to plot).
fn y_decades(values: impl Iterator<Item = f64>) -> (i32, i32) {
    let (mut min, mut max) = (f64::INFINITY, 0f64);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        min = min.min(v);
        max = max.max(v);
    }
    if max <= 0.0 {
        return (0, 1);
    }
    let lo = min.log10().floor() as i32;
    let hi = ((max * 1.05).log10().ceil() as i32).max(lo + 1);
    (lo, hi)
}

/// Tick values 1, 2, 5 × 10^k from `10^lo` to `10^hi`.
fn y_ticks(lo: i32, hi: i32) -> Vec<f64> {
    let mut v = Vec::new();
    for k in lo..hi {
        for d in [1.0, 2.0, 5.0] {
            v.push(d * 10f64.powi(k));
        }
    }
    v.push(10f64.powi(hi));
    v
}

/// One curve: its legend label, a colour, a histogram.
pub struct Curve<'a> {
    pub label: &'a str,
    pub color: [u8; 3],
    pub hist: &'a Histogram<u64>,
}

/// The x axis: log10(1/(1-p)) from 0 to this (p = 99.999%).
const XMAX: f64 = 5.0;
const X_TICKS: [&str; 6] = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];
pub const X_LABEL: &str = "percentile";
pub const Y_LABEL: &str = "latency (µs, log scale)";

/// Latency by percentile: x = log10(1/(1-p)) from 0 (p=0) to 5
/// (p=99.999%), labelled in percent; y = latency in µs on a log scale from
/// the decade below the smallest value to the decade above the largest,
/// ticks at 1, 2 and 5 per decade (so one multi-millisecond outlier does
/// not flatten the curves). Grid lines at 90%, 99%, 99.9%, 99.99% and at
/// every y tick; axis labels; a legend naming each curve in its colour.
pub fn plot_percentiles(path: &Path, title: &str, curves: &[Curve<'_>]) -> std::io::Result<()> {
    let (w, h) = (900usize, 580usize);
    // Margins: left for the y tick values and label, top for the title,
    // bottom for the x tick values and label.
    let (ml, mr, mt, mb) = (96f64, 40f64, 44f64, 70f64);
    let mut cv = Canvas::new(w, h);
    cv.text(
        (w as i64 - text_width(title, 2)) / 2,
        12,
        title,
        [0, 0, 0],
        2,
        false,
    );
    let pts: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|c| {
            let mut v = Vec::new();
            if !c.hist.is_empty() {
                for it in c.hist.iter_quantiles(5) {
                    let q = it.quantile_iterated_to();
                    let x = if q >= 1.0 {
                        XMAX
                    } else {
                        (1.0 / (1.0 - q)).log10().min(XMAX)
                    };
                    v.push((
                        x,
                        c.hist.highest_equivalent(it.value_iterated_to()) as f64 / 1000.0,
                    ));
                }
            }
            v
        })
        .collect();
    let (lo, hi) = y_decades(pts.iter().flatten().map(|p| p.1));
    let (pw, ph) = (w as f64 - ml - mr, h as f64 - mt - mb);
    let ylog = |y: f64| (y.max(10f64.powi(lo)).log10() - f64::from(lo)) / f64::from(hi - lo);
    let to_px = |x: f64, y: f64| (ml + x / XMAX * pw, mt + ph - ylog(y) * ph);
    let (ymin, ymax) = (10f64.powi(lo), 10f64.powi(hi));
    let (grey, black) = ([220, 220, 220], [0, 0, 0]);
    for k in 1..=XMAX as i64 {
        cv.line(to_px(k as f64, ymin), to_px(k as f64, ymax), grey, 1);
    }
    let ticks = y_ticks(lo, hi);
    for &y in &ticks {
        cv.line(to_px(0.0, y), to_px(XMAX, y), grey, 1);
    }
    cv.line(to_px(0.0, ymin), to_px(XMAX, ymin), black, 2);
    cv.line(to_px(0.0, ymin), to_px(0.0, ymax), black, 2);
    // Tick values.
    for &y in &ticks {
        let (px, py) = to_px(0.0, y);
        cv.line((px - 6.0, py), (px, py), black, 1);
        let decimals = if y >= 1.0 {
            0
        } else {
            (-y.log10()).ceil() as usize
        };
        let s = format!("{y:.decimals$}");
        cv.text(
            px as i64 - 10 - text_width(&s, 2),
            py as i64 - 7,
            &s,
            black,
            2,
            false,
        );
    }
    for (k, s) in X_TICKS.iter().enumerate() {
        let (px, py) = to_px(k as f64, ymin);
        cv.line((px, py), (px, py + 6.0), black, 1);
        // The last value is kept inside the image.
        let x = (px as i64 - text_width(s, 2) / 2).min(w as i64 - 4 - text_width(s, 2));
        cv.text(x, py as i64 + 10, s, black, 2, false);
    }
    // Axis labels.
    let (cx, _) = to_px(XMAX / 2.0, ymin);
    cv.text(
        cx as i64 - text_width(X_LABEL, 2) / 2,
        h as i64 - 26,
        X_LABEL,
        black,
        2,
        false,
    );
    let (_, cy) = to_px(0.0, (ymin * ymax).sqrt());
    cv.text(
        8,
        cy as i64 + text_width(Y_LABEL, 2) / 2,
        Y_LABEL,
        black,
        2,
        true,
    );
    // The curves.
    for (c, p) in curves.iter().zip(&pts) {
        for s in p.windows(2) {
            // Step shape, as HdrHistogram plots: flat, then up.
            cv.line(to_px(s[0].0, s[0].1), to_px(s[1].0, s[0].1), c.color, 3);
            cv.line(to_px(s[1].0, s[0].1), to_px(s[1].0, s[1].1), c.color, 3);
        }
    }
    // Legend, top left inside the plot: a swatch and the label per curve.
    if !curves.is_empty() {
        let (x0, y0) = (ml as i64 + 14, mt as i64 + 10);
        let tw = curves
            .iter()
            .map(|c| text_width(c.label, 2))
            .max()
            .unwrap_or(0);
        let (bw, bh) = (tw + 56, curves.len() as i64 * 24 + 8);
        cv.fill(x0, y0, x0 + bw, y0 + bh, [255, 255, 255]);
        for (a, b) in [
            ((x0, y0), (x0 + bw, y0)),
            ((x0 + bw, y0), (x0 + bw, y0 + bh)),
            ((x0 + bw, y0 + bh), (x0, y0 + bh)),
            ((x0, y0 + bh), (x0, y0)),
        ] {
            cv.line((a.0 as f64, a.1 as f64), (b.0 as f64, b.1 as f64), black, 1);
        }
        for (k, c) in curves.iter().enumerate() {
            let y = y0 + 10 + k as i64 * 24;
            cv.fill(x0 + 8, y + 5, x0 + 38, y + 8, c.color);
            cv.text(x0 + 46, y, c.label, black, 2, false);
        }
    }
    std::fs::File::create(path)?.write_all(&cv.png()?)
}

/// One bar of [`plot_bars`].
#[derive(Debug)]
pub struct Bar<'a> {
    pub label: &'a str,
    pub value: f64,
    pub color: [u8; 3],
}

/// A bar chart: `title` on top, one bar per entry from 0 (linear y axis,
/// `y_label`, ticks at 1, 2 and 5 × a power of ten), each bar's value
/// printed above it and its label below.
pub fn plot_bars(path: &Path, title: &str, y_label: &str, bars: &[Bar<'_>]) -> std::io::Result<()> {
    let (w, h) = (900usize, 520usize);
    let (ml, mr, mt, mb) = (96f64, 40f64, 60f64, 60f64);
    let mut cv = Canvas::new(w, h);
    let black = [0, 0, 0];
    cv.text(
        (w as i64 - text_width(title, 2)) / 2,
        12,
        title,
        black,
        2,
        false,
    );
    let top = bars
        .iter()
        .map(|b| b.value)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    // A tick step of 1, 2 or 5 × 10^k giving 4 to 10 ticks.
    let mut step = 10f64.powf(top.log10().floor() - 1.0);
    while top / step > 10.0 {
        step *= if (step / 10f64.powf(step.log10().floor()) - 2.0).abs() < 1e-9 {
            2.5
        } else {
            2.0
        };
    }
    let ymax = (top / step).ceil() * step;
    let (pw, ph) = (w as f64 - ml - mr, h as f64 - mt - mb);
    let ypx = |v: f64| mt + ph - v / ymax * ph;
    let mut t = 0.0;
    while t <= ymax + step / 2.0 {
        cv.line((ml, ypx(t)), (ml + pw, ypx(t)), [220, 220, 220], 1);
        let s = format!("{t:.0}");
        cv.text(
            ml as i64 - 10 - text_width(&s, 2),
            ypx(t) as i64 - 7,
            &s,
            black,
            2,
            false,
        );
        t += step;
    }
    cv.line((ml, ypx(0.0)), (ml + pw, ypx(0.0)), black, 2);
    cv.line((ml, ypx(0.0)), (ml, ypx(ymax)), black, 2);
    cv.text(
        8,
        (mt + ph / 2.0) as i64 + text_width(y_label, 2) / 2,
        y_label,
        black,
        2,
        true,
    );
    let slot = pw / bars.len().max(1) as f64;
    for (k, b) in bars.iter().enumerate() {
        let x0 = ml + slot * k as f64 + slot * 0.2;
        let x1 = ml + slot * (k as f64 + 1.0) - slot * 0.2;
        cv.fill(
            x0 as i64,
            ypx(b.value) as i64,
            x1 as i64,
            ypx(0.0) as i64,
            b.color,
        );
        let v = format!("{:.0}", b.value);
        let cx = ((x0 + x1) / 2.0) as i64;
        cv.text(
            cx - text_width(&v, 2) / 2,
            ypx(b.value) as i64 - 20,
            &v,
            black,
            2,
            false,
        );
        cv.text(
            cx - text_width(b.label, 2) / 2,
            ypx(0.0) as i64 + 12,
            b.label,
            black,
            2,
            false,
        );
    }
    std::fs::File::create(path)?.write_all(&cv.png()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PNG decodes to the canvas's pixels, and a plot of flat colours
    /// compresses far below its raw size.
    #[test]
    fn png_round_trips_and_compresses() {
        let mut cv = Canvas::new(300, 200);
        cv.line((10.0, 10.0), (290.0, 190.0), [200, 20, 20], 3);
        cv.text(20, 20, "write_lat 64 B over memif", [0, 0, 0], 2, false);
        let bytes = cv.png().expect("encode");
        assert!(bytes.len() < 300 * 200 * 3 / 10, "{} octets", bytes.len());
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut r = dec.read_info().expect("header");
        let mut buf = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).expect("frame");
        assert_eq!((info.width, info.height), (300, 200));
        assert_eq!(&buf[..info.buffer_size()], &cv.px[..]);
    }

    #[test]
    fn labels_have_glyphs() {
        let boxed = glyph('\u{1}');
        let labels = [
            X_LABEL,
            Y_LABEL,
            "iWARP (ours, in-loop)",
            "iWARP (ours, threads)",
            "Linux TCP",
            "0123456789.",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
            "abcdefghijklmnopqrstuvwxyz",
            "+-*/<>=%(),:_",
        ];
        for s in labels.iter().chain(X_TICKS.iter()) {
            for c in s.chars() {
                assert!(c == ' ' || glyph(c) != boxed, "no glyph for {c:?} in {s:?}");
            }
        }
    }

    #[test]
    fn log_axis_spans_whole_decades_around_the_data() {
        assert_eq!(y_decades([7.4, 13.2, 25_000.0].into_iter()), (0, 5));
        assert_eq!(y_decades([0.3, 0.9].into_iter()), (-1, 0));
        assert_eq!(y_decades([10.0].into_iter()), (1, 2));
        assert_eq!(y_decades(std::iter::empty()), (0, 1));
        assert_eq!(y_ticks(0, 1), [1.0, 2.0, 5.0, 10.0]);
    }
}
