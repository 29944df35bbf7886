//! Line charts as self-contained SVG (no plotting dependency): one line per series, points
//! marked, axes with round ticks. The x axis is categorical when `log_x` is false and the
//! points' x values are few (thread counts), logarithmic when `log_x` is true.

use std::fmt::Write;

/// One line of a chart.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A chart.
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// Label under the x axis.
    pub x_label: &'a str,
    /// Label left of the y axis.
    pub y_label: &'a str,
    /// Place x values on a log2 scale (thread counts 1, 16, 64, 256).
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// A "nice" step for about `n` ticks over `range`.
fn nice_step(range: f64, n: f64) -> f64 {
    let raw = (range / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_num(v: f64) -> String {
    if v >= 1000.0 && (v / 1000.0).fract() == 0.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

impl Chart<'_> {
    /// Renders the chart as an SVG document.
    pub fn svg(&self) -> String {
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        let ymax = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0f64, f64::max);
        let tx = |x: f64| if self.log_x { x.max(1e-9).log2() } else { x };
        let (xmin, xmax) = xs
            .iter()
            .map(|&x| tx(x))
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let (xmin, xmax) = if xmin >= xmax {
            (xmin - 1.0, xmin + 1.0)
        } else {
            (xmin, xmax)
        };
        let ystep = nice_step(ymax.max(1.0), 5.0);
        let ytop = (ymax / ystep).ceil().max(1.0) * ystep;
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let px = |x: f64| LEFT + (tx(x) - xmin) / (xmax - xmin) * pw;
        let py = |y: f64| TOP + ph - y / ytop * ph;

        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = write!(
            s,
            r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            esc(self.title)
        );
        // Horizontal grid and y ticks.
        let mut y = 0.0;
        while y <= ytop + ystep / 2.0 {
            let yy = py(y);
            let _ = write!(
                s,
                r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                yy + 4.0,
                fmt_num(y)
            );
            y += ystep;
        }
        // x ticks at every distinct x value.
        let mut ticks: Vec<f64> = xs.clone();
        ticks.sort_by(f64::total_cmp);
        ticks.dedup();
        for x in ticks {
            let xx = px(x);
            let _ = write!(
                s,
                r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#999"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + ph,
                TOP + ph + 5.0,
                TOP + ph + 19.0,
                fmt_num(x)
            );
        }
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
            TOP + ph,
            TOP + ph,
            LEFT + pw,
            TOP + ph
        );
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 12.0,
            esc(self.x_label)
        );
        let _ = write!(
            s,
            r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            esc(self.y_label)
        );
        for (i, ser) in self.series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let pts: Vec<String> = ser
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = write!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            for &(x, y) in &ser.points {
                let _ = write!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"/>"#,
                    px(x),
                    py(y)
                );
            }
            let ly = TOP + 10.0 + i as f64 * 20.0;
            let lx = LEFT + pw + 15.0;
            let _ = write!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                lx + 22.0,
                lx + 28.0,
                ly + 4.0,
                esc(&ser.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_and_tick() {
        let c = Chart {
            title: "t <1>",
            x_label: "threads",
            y_label: "qps",
            log_x: true,
            series: vec![
                Series {
                    name: "direct".into(),
                    points: vec![(1.0, 10.0), (16.0, 60000.0), (256.0, 40000.0)],
                },
                Series {
                    name: "sluice".into(),
                    points: vec![(1.0, 8.0), (16.0, 50000.0)],
                },
            ],
        };
        let svg = c.svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 5);
        assert!(svg.contains(">256<") && svg.contains(">60k<"));
        assert!(svg.contains("t &lt;1&gt;"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0, 5.0), 20.0);
        assert_eq!(nice_step(70000.0, 5.0), 20000.0);
    }
}
