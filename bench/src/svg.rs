use super::*;

pub(crate) const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

pub(crate) struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    step: bool,
}

/// A round axis maximum at or above `v`.
pub(crate) fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * magnitude >= v {
            return m * magnitude;
        }
    }
    10.0 * magnitude
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One chart at (`x`, `y`) of `w` × `h` pixels.
pub(crate) fn panel(
    out: &mut String,
    (x, y, w, h): (f64, f64, f64, f64),
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    y_max: Option<f64>,
) {
    let (left, right, top, bottom) = (60.0, 15.0, 30.0, 45.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let (ox, oy) = (x + left, y + top + ph);
    let all = series.iter().flat_map(|s| s.points.iter());
    let xmax = nice_max(all.clone().map(|p| p.0).fold(0.0, f64::max));
    let ymax = y_max.unwrap_or_else(|| nice_max(all.map(|p| p.1).fold(0.0, f64::max)));
    let f = Frame {
        ox,
        oy,
        pw,
        ph,
        xmax,
        ymax,
    };
    axes(out, &f, (x, y, left), title, x_label, y_label);
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            out,
            r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            path(&f, s).trim_end()
        );
        if !s.step {
            for &(vx, vy) in &s.points {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    f.px(vx),
                    f.py(vy)
                );
            }
        }
        let (lx, ly) = legend_at(&f, series, i, y_max.is_some());
        let _ = writeln!(
            out,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            lx + 20.0,
            lx + 25.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
}

/// A chart's plot area: its origin (bottom left), size, and the values at its right and top.
struct Frame {
    ox: f64,
    oy: f64,
    pw: f64,
    ph: f64,
    xmax: f64,
    ymax: f64,
}

impl Frame {
    fn px(&self, v: f64) -> f64 {
        self.ox + v / self.xmax * self.pw
    }

    fn py(&self, v: f64) -> f64 {
        self.oy - v / self.ymax * self.ph
    }
}

/// The chart's title, grid with its ticks, border and axis labels (`x`, `y`: the panel's
/// corner; `left`: its margin).
fn axes(
    out: &mut String,
    f: &Frame,
    (x, y, left): (f64, f64, f64),
    title: &str,
    x_label: &str,
    y_label: &str,
) {
    let Frame {
        ox,
        oy,
        pw,
        ph,
        xmax,
        ymax,
    } = *f;
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        x + left,
        y + 18.0,
        escape(title)
    );
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let (gx, gy) = (ox + f * pw, oy - f * ph);
        let _ = writeln!(
            out,
            r##"<line x1="{gx:.1}" y1="{oy:.1}" x2="{gx:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{gx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            oy - ph,
            oy + 15.0,
            tick(f * xmax)
        );
        let _ = writeln!(
            out,
            r##"<line x1="{ox:.1}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            ox + pw,
            ox - 5.0,
            gy + 4.0,
            tick(f * ymax)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{ox:.1}" y="{:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#333"/>"##,
        oy - ph
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        ox + pw / 2.0,
        oy + 35.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
        x + 15.0,
        oy - ph / 2.0,
        x + 15.0,
        oy - ph / 2.0,
        escape(y_label)
    );
}

/// The SVG path of one series: a line through its points, or steps up from the axis.
fn path(f: &Frame, s: &Series) -> String {
    let (px, py) = (|v| f.px(v), |v| f.py(v));
    let mut d = String::new();
    let mut prev: Option<(f64, f64)> = None;
    for &(vx, vy) in &s.points {
        match prev {
            None if s.step => {
                let _ = write!(
                    d,
                    "M{:.1},{:.1} L{:.1},{:.1} ",
                    px(vx),
                    py(0.0),
                    px(vx),
                    py(vy)
                );
            }
            None => {
                let _ = write!(d, "M{:.1},{:.1} ", px(vx), py(vy));
            }
            Some((_, py0)) if s.step => {
                let _ = write!(
                    d,
                    "L{:.1},{:.1} L{:.1},{:.1} ",
                    px(vx),
                    py(py0),
                    px(vx),
                    py(vy)
                );
            }
            Some(_) => {
                let _ = write!(d, "L{:.1},{:.1} ", px(vx), py(vy));
            }
        }
        prev = Some((vx, vy));
    }
    d
}

/// Where series `i`'s legend goes. A CDF (`cdf`) fills the top left: its legend goes to the
/// bottom right.
fn legend_at(f: &Frame, series: &[Series], i: usize, cdf: bool) -> (f64, f64) {
    let Frame { ox, oy, pw, ph, .. } = *f;
    if cdf {
        let widest = series
            .iter()
            .map(|s| s.label.chars().count())
            .max()
            .unwrap_or(0) as f64;
        (
            ox + pw - 40.0 - 6.0 * widest,
            oy - 12.0 - 16.0 * (series.len() - 1 - i) as f64,
        )
    } else {
        (ox + 10.0, oy - ph + 15.0 + 16.0 * i as f64)
    }
}

pub(crate) fn tick(v: f64) -> String {
    if v == 0.0 || v.abs() >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The charts: the churn latency CDF of every run that churned, and, with two or more runs of
/// different member counts, RSS and convergence against members.
pub fn svg(reports: &[Report]) -> String {
    let churned: Vec<&Report> = reports
        .iter()
        .filter(|r| r.churn.as_ref().is_some_and(|c| !c.latencies_ms.is_empty()))
        .collect();
    let sweep = reports
        .iter()
        .map(|r| r.members)
        .collect::<BTreeSet<_>>()
        .len()
        > 1;
    let (w, h) = (460.0, 320.0);
    let panels = usize::from(!churned.is_empty()) + if sweep { 2 } else { 0 };
    let width = w * panels.max(1) as f64;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{h:.0}" viewBox="0 0 {width:.0} {h:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
"#
    );
    let mut x = 0.0;
    if !churned.is_empty() {
        let series = cdf_series(&churned);
        panel(
            &mut out,
            (x, 0.0, w, h),
            "Service change → ISE updated (CDF)",
            "latency (ms)",
            "fraction of changes",
            &series,
            Some(1.0),
        );
        x += w;
    }
    if sweep {
        sweep_panels(&mut out, reports, (x, w, h));
    }
    out.push_str("</svg>\n");
    out
}

/// One CDF series per run that churned: its latencies against the fraction of changes.
fn cdf_series(churned: &[&Report]) -> Vec<Series> {
    churned
        .iter()
        .map(|r| {
            let c = r.churn.as_ref().expect("churned");
            let n = c.latencies_ms.len() as f64;
            Series {
                label: format!(
                    "{} members, {}/s: p50 {:.0} ms, p99 {:.0} ms",
                    r.members,
                    c.rate,
                    c.quantile_ms(0.5).unwrap_or(0.0),
                    c.quantile_ms(0.99).unwrap_or(0.0)
                ),
                points: c
                    .latencies_ms
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (v, (i + 1) as f64 / n))
                    .collect(),
                step: true,
            }
        })
        .collect()
}

/// RSS and convergence against members, over runs of different member counts, from `x`.
fn sweep_panels(out: &mut String, reports: &[Report], (mut x, w, h): (f64, f64, f64)) {
    let mut by_members: Vec<&Report> = reports.iter().collect();
    by_members.sort_by_key(|r| r.members);
    let pts = |f: &dyn Fn(&Report) -> f64| -> Vec<(f64, f64)> {
        by_members
            .iter()
            .map(|r| (r.members as f64, f(r)))
            .collect()
    };
    let exports = by_members.first().map_or(0, |r| r.exports);
    panel(
        out,
        (x, 0.0, w, h),
        &format!("Controller RSS ({exports} exports per member)"),
        "members",
        "MiB",
        &[
            Series {
                label: "after convergence (with the harness)".into(),
                points: pts(&|r| mib(r.rss.converged_kib)),
                step: false,
            },
            Series {
                label: "idle, no member (with the harness)".into(),
                points: pts(&|r| mib(r.rss.idle_kib)),
                step: false,
            },
        ],
        None,
    );
    x += w;
    panel(
        out,
        (x, 0.0, w, h),
        &format!("Cold convergence ({exports} exports per member)"),
        "members",
        "seconds",
        &[
            Series {
                label: "measured".into(),
                points: pts(&|r| r.convergence_s),
                step: false,
            },
            Series {
                label: "token-bucket bound (minimum requests)".into(),
                points: pts(&|r| r.ideal_bound_s),
                step: false,
            },
        ],
        None,
    );
}
