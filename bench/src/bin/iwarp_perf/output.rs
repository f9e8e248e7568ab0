//! What a run leaves behind: HdrHistogram percentile-distribution text
//! (`.hgrm`), and a PNG of latency-by-percentile curves drawn into an RGB
//! buffer and written with a minimal PNG encoder (stored deflate blocks,
//! zlib Adler-32, CRC-32 per chunk). No fonts: the legend is in the run's
//! output and in the JSON summary.

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

    /// Encode as PNG: 8-bit RGB, no filtering, zlib with stored blocks.
    pub fn png(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity((self.w * 3 + 1) * self.h);
        for row in self.px.chunks(self.w * 3) {
            raw.push(0); // filter type None
            raw.extend_from_slice(row);
        }
        let mut z = vec![0x78, 0x01];
        let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
        for (i, b) in blocks.iter().enumerate() {
            z.push(u8::from(i + 1 == blocks.len()));
            let len = b.len() as u16;
            z.extend_from_slice(&len.to_le_bytes());
            z.extend_from_slice(&(!len).to_le_bytes());
            z.extend_from_slice(b);
        }
        z.extend_from_slice(&adler32(&raw).to_be_bytes());
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&(self.w as u32).to_be_bytes());
        ihdr.extend_from_slice(&(self.h as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        chunk(&mut out, b"IHDR", &ihdr);
        chunk(&mut out, b"IDAT", &z);
        chunk(&mut out, b"IEND", &[]);
        out
    }
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (ISO-HDLC, reflected 0xEDB88320), bitwise: images are small.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65_521;
        b %= 65_521;
    }
    (b << 16) | a
}

/// One curve: a label (for the caller's legend), a colour, a histogram.
pub struct Curve<'a> {
    pub color: [u8; 3],
    pub hist: &'a Histogram<u64>,
}

/// Latency by percentile: x = log10(1/(1-p)) from 0 (p=0) to 5
/// (p=99.999%), y = latency in µs, linear from 0 to the largest value
/// shown. Grid lines at 90%, 99%, 99.9%, 99.99% and at 10 equal y steps.
pub fn plot_percentiles(path: &Path, curves: &[Curve<'_>]) -> std::io::Result<()> {
    let (w, h, m) = (900usize, 540usize, 40f64);
    let mut cv = Canvas::new(w, h);
    let xmax = 5.0;
    let pts: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|c| {
            let mut v = Vec::new();
            if !c.hist.is_empty() {
                for it in c.hist.iter_quantiles(5) {
                    let q = it.quantile_iterated_to();
                    let x = if q >= 1.0 {
                        xmax
                    } else {
                        (1.0 / (1.0 - q)).log10().min(xmax)
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
    let ymax = pts.iter().flatten().map(|p| p.1).fold(1.0f64, f64::max) * 1.05;
    let to_px = |x: f64, y: f64| {
        (
            m + x / xmax * (w as f64 - 2.0 * m),
            h as f64 - m - y / ymax * (h as f64 - 2.0 * m),
        )
    };
    let grey = [220, 220, 220];
    for k in 1..5 {
        cv.line(to_px(k as f64, 0.0), to_px(k as f64, ymax), grey, 1);
    }
    for k in 1..=10 {
        let y = ymax * k as f64 / 10.0;
        cv.line(to_px(0.0, y), to_px(xmax, y), grey, 1);
    }
    cv.line(to_px(0.0, 0.0), to_px(xmax, 0.0), [0, 0, 0], 2);
    cv.line(to_px(0.0, 0.0), to_px(0.0, ymax), [0, 0, 0], 2);
    for (c, p) in curves.iter().zip(&pts) {
        for s in p.windows(2) {
            // Step shape, as HdrHistogram plots: flat, then up.
            cv.line(to_px(s[0].0, s[0].1), to_px(s[1].0, s[0].1), c.color, 3);
            cv.line(to_px(s[1].0, s[0].1), to_px(s[1].0, s[1].1), c.color, 3);
        }
    }
    std::fs::File::create(path)?.write_all(&cv.png())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }
}
