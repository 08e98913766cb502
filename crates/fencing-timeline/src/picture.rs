//! A [`Timeline`] drawn as SVG with `plotters`: the time axis and its grid from a chart, the
//! lanes, bars, bands and marks on the canvas in pixels, and where each was drawn.

use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::layout::{self, Band, Group, Rows};
use crate::timeline::{Lane, Mark, Tenure, Timeline};

const WIDTH: u32 = 1400;
const GUTTER: i32 = 170;
const RIGHT: i32 = 40;
const TITLE: i32 = 44;
const AXIS: i32 = 44;
const ROW: i32 = 22;
const LANE_PAD: i32 = 8;
const LEGEND_ROW: i32 = 22;
const TEXT: f64 = 12.0;
const SMALL: f64 = 11.0;

const LEASE: RGBColor = RGBColor(52, 101, 164);
const NO_LEASE: RGBColor = RGBColor(255, 224, 224);
const ACCEPTED: RGBColor = RGBColor(46, 139, 87);
const STALE: RGBColor = RGBColor(204, 0, 0);
const REFUSED: RGBColor = RGBColor(204, 0, 0);
const TAKEOVER: RGBColor = RGBColor(117, 80, 123);
const LOOKUP: RGBColor = RGBColor(32, 74, 135);
const STALL: RGBColor = RGBColor(245, 121, 0);
const INK: RGBColor = RGBColor(46, 52, 54);
const FAINT: RGBColor = RGBColor(136, 138, 133);
const LANE_SHADE: RGBColor = RGBColor(246, 246, 244);

/// A part of the picture, for finding it in a rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A whole lane.
    Lane {
        /// The lane's name.
        lane: String,
    },
    /// A lease tenure's bar.
    Tenure {
        /// The lane.
        lane: String,
        /// Its token, as printed.
        token: String,
    },
    /// A run of accepted writes.
    Writes {
        /// The lane.
        lane: String,
        /// The store.
        store: String,
        /// Whether the writes were stale.
        stale: bool,
    },
    /// A mark with its label.
    Moment {
        /// The lane.
        lane: String,
        /// The label drawn.
        label: String,
    },
}

/// Where a part was drawn, in pixels from the picture's top left corner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// What was drawn there.
    pub part: Part,
    /// Left edge.
    pub x: i32,
    /// Top edge.
    pub y: i32,
    /// Width.
    pub width: i32,
    /// Height.
    pub height: i32,
}

/// What can go wrong drawing: only the drawing library's own failures.
#[derive(Debug, thiserror::Error)]
#[error("drawing the timeline failed: {0}")]
pub struct DrawError(String);

fn failed(err: impl std::fmt::Display) -> DrawError {
    DrawError(err.to_string())
}

/// A timeline drawn: the SVG document and where each part of it is.
#[derive(Clone, Debug)]
pub struct Picture {
    svg: String,
    width: u32,
    height: u32,
    regions: Vec<Region>,
}

/// A lane's rows, from its top: the lease, one per store it wrote, then the marks' labels.
struct LaneLayout<'a> {
    lane: &'a Lane,
    top: i32,
    stores: Vec<&'a str>,
    bands: Vec<Band<'a>>,
    groups: Vec<Group<'a>>,
    labels: Rows,
}

impl LaneLayout<'_> {
    fn rows(&self) -> i32 {
        1 + self.stores.len() as i32 + self.labels.count() as i32
    }

    fn height(&self) -> i32 {
        self.rows() * ROW + 2 * LANE_PAD
    }

    /// The vertical middle of row `row`.
    fn row_middle(&self, row: i32) -> i32 {
        self.top + LANE_PAD + row * ROW + ROW / 2
    }

    fn store_row(&self, store: &str) -> i32 {
        1 + self.stores.iter().position(|s| *s == store).unwrap_or(0) as i32
    }
}

/// The x of each time, as the chart maps it.
#[derive(Clone, Copy)]
struct Scale {
    left: i32,
    right: i32,
    /// The axis's last second: a hair past its last tick, which the chart labels only when
    /// it lies inside the range.
    end: f64,
}

impl Scale {
    fn new(left: i32, right: i32, last_tick: Duration, step: Duration) -> Self {
        Scale {
            left,
            right,
            end: last_tick.as_secs_f64() + step.as_secs_f64() / 1000.0,
        }
    }

    fn x(self, at: Duration) -> i32 {
        let share = (at.as_secs_f64() / self.end).min(1.0);
        self.left + (share * f64::from(self.right - self.left)).round() as i32
    }
}

fn font(px: f64) -> TextStyle<'static> {
    // plotters' SVG backend writes a font size of size / 1.24.
    ("sans-serif", px * 1.24).into_font().into()
}

fn text_at<'a>(px: f64, color: &'a RGBColor, h: HPos) -> TextStyle<'a> {
    font(px).color(color).pos(Pos::new(h, VPos::Center))
}

/// The step between the axis's ticks, and the axis's end (a whole number of steps, at most
/// sixteen of them).
fn axis(end: Duration) -> (Duration, Duration) {
    const STEPS_MS: [u64; 14] = [
        100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 1_800_000,
    ];
    const HOUR_MS: u64 = 3_600_000;
    // Far beyond any run; what lies past it is drawn at the axis's end.
    let end_ms = u64::try_from(end.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, u64::MAX / 4);
    let step = STEPS_MS
        .iter()
        .copied()
        .find(|step| end_ms.div_ceil(*step) <= 16)
        .unwrap_or_else(|| end_ms.div_ceil(16).div_ceil(HOUR_MS) * HOUR_MS);
    let steps = end_ms.div_ceil(step).max(1);
    (
        Duration::from_millis(step),
        Duration::from_millis(step * steps),
    )
}

impl Picture {
    /// Draws `timeline`.
    pub fn draw(timeline: &Timeline) -> Result<Picture, DrawError> {
        let (step, last_tick) = axis(timeline.end());
        let scale = Scale::new(GUTTER, WIDTH as i32 - RIGHT, last_tick, step);
        let mut top = TITLE;
        let mut lanes = Vec::new();
        let stores = timeline.stores();
        for lane in timeline.lanes() {
            let x = |at| scale.x(at);
            let mut lane_stores = lane.stores();
            lane_stores.sort_by_key(|s| stores.iter().position(|t| t == s));
            let groups = layout::group(&lane.moments, x);
            let labels = layout::place(
                groups.iter().map(|g| (g.x0, g.x1, g.label())),
                scale.left,
                scale.right,
                TEXT,
            );
            let layout = LaneLayout {
                lane,
                top,
                stores: lane_stores,
                bands: layout::bands(&lane.writes, x),
                groups,
                labels,
            };
            top += layout.height();
            lanes.push(layout);
        }
        if lanes.is_empty() {
            // Room for the axis to be drawn at all.
            top += ROW;
        }
        let legend = legend_rows(scale);
        let height = (top + AXIS + LEGEND_ROW * legend.len() as i32 + LEGEND_ROW / 2) as u32;

        let mut svg = String::new();
        let mut regions = Vec::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
            root.fill(&WHITE).map_err(failed)?;
            root.draw(&Text::new(
                timeline.title().to_owned(),
                (12, TITLE / 2),
                text_at(15.0, &INK, HPos::Left),
            ))
            .map_err(failed)?;
            // The grid first: the lanes' shading lets it through, their bars cover it.
            draw_axis(&root, timeline, step, scale, top)?;
            for lane in &lanes {
                regions.extend(draw_lane(&root, lane, scale, last_tick)?);
            }
            draw_legend(&root, &legend, top + AXIS)?;
            root.present().map_err(failed)?;
        }
        Ok(Picture {
            svg,
            width: WIDTH,
            height,
            regions,
        })
    }

    /// The SVG document.
    pub fn svg(&self) -> &str {
        &self.svg
    }

    /// Width and height in pixels.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Where each lane, tenure, run of writes and mark was drawn.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Writes the SVG document to `path`.
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, &self.svg)
    }
}

fn draw_axis(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    timeline: &Timeline,
    step: Duration,
    scale: Scale,
    lanes_bottom: i32,
) -> Result<(), DrawError> {
    let area = root.margin(TITLE, 0, 0, RIGHT);
    let area = area.shrink((0, 0), (WIDTH as i32 - RIGHT, lanes_bottom - TITLE + AXIS));
    let labels = timeline.labels();
    let mut chart = ChartBuilder::on(&area)
        .x_label_area_size(AXIS)
        .y_label_area_size(GUTTER)
        .build_cartesian_2d((0f64..scale.end).step(step.as_secs_f64()), 0f64..1f64)
        .map_err(failed)?;
    let read = |secs: &f64| {
        labels.read(Duration::from_millis(
            (secs.max(0.0) * 1000.0).round() as u64
        ))
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_labels(64)
        .x_label_formatter(&read)
        .x_label_style(font(SMALL))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(211, 215, 207))
        .x_desc(match labels {
            crate::TimeLabels::TimeOfDay { .. } => "time of day",
            crate::TimeLabels::Elapsed => "time since the run began",
        })
        .axis_desc_style(font(SMALL))
        .draw()
        .map_err(failed)?;
    Ok(())
}

fn draw_lane(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    lane: &LaneLayout<'_>,
    scale: Scale,
    end: Duration,
) -> Result<Vec<Region>, DrawError> {
    let name = &lane.lane.name;
    let bottom = lane.top + lane.height();
    let mut regions = vec![region(
        Part::Lane { lane: name.clone() },
        (0, lane.top),
        (WIDTH as i32, bottom),
    )];
    root.draw(&Rectangle::new(
        [(4, lane.top + 2), (WIDTH as i32 - 4, bottom - 2)],
        LANE_SHADE.mix(0.6).filled(),
    ))
    .map_err(failed)?;
    root.draw(&Text::new(
        name.clone(),
        (12, lane.row_middle(0)),
        text_at(TEXT + 1.0, &INK, HPos::Left),
    ))
    .map_err(failed)?;
    for store in &lane.stores {
        root.draw(&Text::new(
            format!("writes to {store}"),
            (24, lane.row_middle(lane.store_row(store))),
            text_at(SMALL, &FAINT, HPos::Left),
        ))
        .map_err(failed)?;
    }
    for moment in &lane.lane.moments {
        if let Mark::Stalled { length } = moment.mark {
            let (x0, x1) = (
                scale.x(moment.at),
                scale.x(moment.at.saturating_add(length)),
            );
            root.draw(&Rectangle::new(
                [(x0, lane.top + 2), (x1.max(x0 + 2), bottom - 2)],
                STALL.mix(0.18).filled(),
            ))
            .map_err(failed)?;
        }
    }
    for tenure in &lane.lane.tenures {
        regions.push(draw_tenure(root, lane, tenure, scale, end)?);
    }
    for band in &lane.bands {
        regions.push(draw_band(root, lane, band)?);
    }
    for (group, (row, label)) in lane.groups.iter().zip(lane.labels.iter()) {
        regions.push(draw_group(root, lane, group, row, label)?);
    }
    Ok(regions)
}

/// Draws `label` inside the bar from `x0` to `x1` at height `y` if it fits there; says
/// whether it did.
fn label_inside(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    label: &str,
    color: &RGBColor,
    (x0, x1): (i32, i32),
    y: i32,
) -> Result<bool, DrawError> {
    if !layout::fits(label, SMALL, x1 - x0 - 8) {
        return Ok(false);
    }
    root.draw(&Text::new(
        label,
        (x0 + 4, y),
        text_at(SMALL, color, HPos::Left),
    ))
    .map_err(failed)?;
    Ok(true)
}

/// The region of `part` between two corners.
fn region(part: Part, (x0, top): (i32, i32), (x1, bottom): (i32, i32)) -> Region {
    Region {
        part,
        x: x0,
        y: top,
        width: x1 - x0,
        height: bottom - top,
    }
}

fn draw_tenure(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    lane: &LaneLayout<'_>,
    tenure: &Tenure,
    scale: Scale,
    end: Duration,
) -> Result<Region, DrawError> {
    let y = lane.row_middle(0);
    let (top, bottom) = (y - ROW / 2 + 3, y + ROW / 2 - 3);
    let x0 = scale.x(tenure.from);
    let lease_end = tenure.lease_until.or(tenure.acted_until).unwrap_or(end);
    let x1 = scale.x(lease_end).max(x0 + 3);
    root.draw(&Rectangle::new([(x0, top), (x1, bottom)], LEASE.filled()))
        .map_err(failed)?;
    let label = format!("lease, token {}", tenure.token);
    if !label_inside(root, &label, &WHITE, (x0, x1), y)? {
        root.draw(&Text::new(
            tenure.token.to_string(),
            (x0 + 2, y),
            text_at(SMALL, &WHITE, HPos::Left),
        ))
        .map_err(failed)?;
    }
    if let (Some(lease_until), Some(acted_until)) = (tenure.lease_until, tenure.acted_until)
        && acted_until > lease_until
    {
        let x2 = scale.x(acted_until).max(x1 + 2);
        root.draw(&Rectangle::new(
            [(x1, top), (x2, bottom)],
            NO_LEASE.filled(),
        ))
        .map_err(failed)?;
        root.draw(&Rectangle::new(
            [(x1, top), (x2, bottom)],
            REFUSED.stroke_width(1),
        ))
        .map_err(failed)?;
        label_inside(root, "no lease", &REFUSED, (x1, x2), y)?;
    }
    let part = Part::Tenure {
        lane: lane.lane.name.clone(),
        token: tenure.token.to_string(),
    };
    Ok(region(part, (x0, top), (x1, bottom)))
}

fn draw_band(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    lane: &LaneLayout<'_>,
    band: &Band<'_>,
) -> Result<Region, DrawError> {
    let y = lane.row_middle(lane.store_row(band.store));
    let color = if band.stale { STALE } else { ACCEPTED };
    let (x0, x1) = (band.x0, band.x1.max(band.x0 + 2));
    let (top, bottom) = (y - 7, y + 7);
    root.draw(&Rectangle::new([(x0, top), (x1, bottom)], color.filled()))
        .map_err(failed)?;
    for x in [x0, x1] {
        root.draw(&PathElement::new(
            vec![(x, top - 3), (x, bottom + 3)],
            color.stroke_width(1),
        ))
        .map_err(failed)?;
    }
    let records = if band.writes == 1 {
        band.first.to_owned()
    } else {
        format!("{} … {}, {} writes", band.first, band.last, band.writes)
    };
    let label = if band.stale {
        format!("STALE: {records}")
    } else {
        records
    };
    label_inside(root, &label, &WHITE, (x0, x1), y)?;
    let part = Part::Writes {
        lane: lane.lane.name.clone(),
        store: band.store.to_owned(),
        stale: band.stale,
    };
    Ok(region(part, (x0, top), (x1, bottom)))
}

/// The glyph of a mark and its colour.
fn glyph(mark: &Mark) -> (Glyph, RGBColor) {
    match mark {
        Mark::Refused { .. } => (Glyph::Cross, REFUSED),
        Mark::TookOver { .. } => (Glyph::Triangle, TAKEOVER),
        Mark::LookedUp { .. } => (Glyph::Circle, LOOKUP),
        Mark::Stalled { .. } => (Glyph::Square, STALL),
        Mark::Killed => (Glyph::Cross, INK),
        Mark::Note { .. } => (Glyph::Circle, FAINT),
    }
}

#[derive(Clone, Copy)]
enum Glyph {
    Cross,
    Triangle,
    Circle,
    Square,
}

fn draw_glyph(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    glyph: Glyph,
    color: RGBColor,
    at: (i32, i32),
) -> Result<(), DrawError> {
    let drawn = match glyph {
        Glyph::Cross => root.draw(&Cross::new(at, 5, color.stroke_width(3))),
        Glyph::Triangle => root.draw(&TriangleMarker::new(at, 6, color.filled())),
        Glyph::Circle => root.draw(&Circle::new(at, 5, color.filled())),
        Glyph::Square => root.draw(&Rectangle::new(
            [(at.0 - 5, at.1 - 5), (at.0 + 5, at.1 + 5)],
            color.filled(),
        )),
    };
    drawn.map_err(failed)
}

fn draw_group(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    lane: &LaneLayout<'_>,
    group: &Group<'_>,
    row: usize,
    label: &layout::Label,
) -> Result<Region, DrawError> {
    let (glyph, color) = glyph(group.mark());
    let (x0, x1) = (group.x0, group.x1);
    let y = lane.row_middle(1 + lane.stores.len() as i32 + row as i32);
    if matches!(group.mark(), Mark::Killed) {
        root.draw(&PathElement::new(
            vec![(x0, lane.top + 2), (x0, lane.top + lane.height() - 2)],
            INK.stroke_width(2),
        ))
        .map_err(failed)?;
    }
    // A thin line from the mark up to the lease row ties it to its moment.
    root.draw(&PathElement::new(
        vec![(x0, lane.row_middle(0) + ROW / 2 - 3), (x0, y)],
        color.mix(0.5).stroke_width(1),
    ))
    .map_err(failed)?;
    if x1 > x0 {
        root.draw(&PathElement::new(
            vec![(x0, y), (x1, y)],
            color.stroke_width(2),
        ))
        .map_err(failed)?;
    }
    // Every refusal keeps a mark of its own; other kinds mark where their run begins and ends.
    let places = if matches!(group.mark(), Mark::Refused { .. }) || x1 == x0 {
        group.xs.clone()
    } else {
        vec![x0, x1]
    };
    for x in places {
        draw_glyph(root, glyph, color, (x, y))?;
    }
    let (anchor, text_x) = if label.flipped {
        (HPos::Right, x0 - 10)
    } else {
        (HPos::Left, x1 + 10)
    };
    let text_color = if matches!(group.mark(), Mark::Refused { .. }) {
        REFUSED
    } else {
        INK
    };
    root.draw(&Text::new(
        label.text.clone(),
        (text_x, y),
        text_at(TEXT, &text_color, anchor),
    ))
    .map_err(failed)?;
    let part = Part::Moment {
        lane: lane.lane.name.clone(),
        label: label.text.clone(),
    };
    Ok(region(
        part,
        (label.start, y - ROW / 2),
        (label.end, y + ROW / 2),
    ))
}

/// The legend's entries, in rows that fit the width.
fn legend_rows(scale: Scale) -> Vec<Vec<(Glyph, RGBColor, &'static str, i32)>> {
    let entries = [
        (Glyph::Square, LEASE, "lease held, with its token"),
        (
            Glyph::Square,
            NO_LEASE,
            "lease over, the holder still acting",
        ),
        (Glyph::Square, STALL, "stalled"),
        (
            Glyph::Square,
            ACCEPTED,
            "accepted writes, one band per run of records",
        ),
        (Glyph::Square, STALE, "stale writes accepted (no fence)"),
        (Glyph::Cross, REFUSED, "write refused by its store"),
        (Glyph::Triangle, TAKEOVER, "take-over of a record in flight"),
        (Glyph::Circle, LOOKUP, "look-up of an effect"),
        (Glyph::Cross, INK, "killed"),
    ];
    let mut rows: Vec<Vec<_>> = vec![Vec::new()];
    let mut x = 12;
    for (glyph, color, text) in entries {
        let width = 16 + layout::width(text, SMALL) + 24;
        if x + width > scale.right && x > 12 {
            rows.push(Vec::new());
            x = 12;
        }
        rows.last_mut()
            .expect("one row at least")
            .push((glyph, color, text, x));
        x += width;
    }
    rows
}

fn draw_legend(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    rows: &[Vec<(Glyph, RGBColor, &'static str, i32)>],
    top: i32,
) -> Result<(), DrawError> {
    for (i, row) in rows.iter().enumerate() {
        let y = top + i as i32 * LEGEND_ROW + LEGEND_ROW / 2;
        for &(glyph, color, text, x) in row {
            draw_glyph(root, glyph, color, (x + 5, y))?;
            root.draw(&Text::new(
                text,
                (x + 16, y),
                text_at(SMALL, &INK, HPos::Left),
            ))
            .map_err(failed)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::TimeLabels;
    use fencing_core::FencingToken;

    fn s(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn sample() -> Timeline {
        let mut t = Timeline::new("two workers", TimeLabels::WORKED_EXAMPLE);
        t.acquired("worker A", s(0.0), token(33));
        t.accepted("worker A", s(0.1), "refunds", "r_001", false);
        t.accepted("worker A", s(26.0), "refunds", "r_815", false);
        t.mark("worker A", s(26.0), Mark::Stalled { length: s(8.0) });
        t.lease_ended("worker A", s(30.0));
        t.acquired("worker B", s(31.0), token(34));
        t.mark(
            "worker B",
            s(31.0),
            Mark::LookedUp {
                record: "r_815".into(),
                found: false,
            },
        );
        t.mark(
            "worker A",
            s(34.0),
            Mark::Refused {
                store: "refunds".into(),
                record: "r_815".into(),
                write: Some("confirm".into()),
                token: token(33),
                met: "fence is 34".into(),
            },
        );
        t.stopped("worker A", s(34.0));
        t.accepted("worker B", s(31.1), "refunds <&>", "r_815", false);
        t.accepted("worker B", s(43.0), "refunds <&>", "r_1200", false);
        t.lease_ended("worker B", s(43.0));
        t
    }

    #[test]
    fn the_axis_ends_on_a_whole_step_with_at_most_sixteen_ticks() {
        assert_eq!(axis(s(43.4)), (s(5.0), s(45.0)));
        assert_eq!(axis(s(45.0)), (s(5.0), s(45.0)));
        assert_eq!(axis(s(1.3)), (s(0.1), s(1.3)));
        assert_eq!(axis(Duration::ZERO), (s(0.1), s(0.1)));
        assert_eq!(axis(s(3_600.0)), (s(300.0), s(3_600.0)));
        assert_eq!(axis(s(200_000.0)).0, s(14_400.0));
        let (step, last) = axis(Duration::MAX);
        assert!(last.as_millis() / step.as_millis() <= 16);
    }

    /// What outside callers may hand it: names with markup, empty names, events out of order,
    /// times at the far end of `Duration`, a lease that ends before it began. It draws, and the
    /// SVG stays one well-formed document with the text escaped.
    #[test]
    fn hostile_timelines_still_draw() {
        let mut t = Timeline::new(
            "<script>alert(1)</script> & \"quotes\"",
            TimeLabels::WORKED_EXAMPLE,
        );
        t.acquired("", s(5.0), token(2));
        t.lease_ended("", s(1.0));
        t.stopped("", Duration::ZERO);
        t.accepted("<lane>", Duration::MAX, "]]>", "r_1", true);
        t.mark(
            "<lane>",
            Duration::MAX,
            Mark::Stalled {
                length: Duration::MAX,
            },
        );
        t.mark("<lane>", Duration::ZERO, Mark::note("\u{0}\u{7} bell"));
        t.mark(
            "x",
            s(3.0),
            Mark::Refused {
                store: "a<b".into(),
                record: "&".into(),
                write: None,
                token: token(1),
                met: "\"".into(),
            },
        );
        let picture = Picture::draw(&t).unwrap();
        let svg = picture.svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(!svg.contains("<script>"), "markup in a name is escaped");
        assert!(svg.contains("&lt;script&gt;"));
        assert!(!svg.contains("<lane>"));
        let (width, height) = picture.size();
        for region in picture.regions() {
            assert!(region.x + region.width <= width as i32 + 1, "{region:?}");
            assert!(region.y + region.height <= height as i32, "{region:?}");
        }
    }

    #[test]
    fn every_lane_tenure_run_and_mark_is_drawn_where_its_region_says() {
        let picture = Picture::draw(&sample()).unwrap();
        let (width, height) = picture.size();
        let svg = picture.svg();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains(&format!("width=\"{width}\" height=\"{height}\"")));
        for text in [
            "two workers",
            "worker A",
            "worker B",
            "lease, token 33",
            "lease, token 34",
            "REFUSED by refunds: confirm r_815 with token 33: fence is 34",
            "looks r_815 up: not done",
            "stalls 8.0 s",
            "no lease",
            "r_001 … r_815, 2 writes",
            "writes to refunds &lt;&amp;&gt;",
            "10:00:45",
        ] {
            assert!(svg.contains(text), "{text:?} is not in the picture");
        }
        let parts: Vec<&Part> = picture.regions().iter().map(|r| &r.part).collect();
        assert_eq!(
            parts
                .iter()
                .filter(|p| matches!(p, Part::Lane { .. }))
                .count(),
            2
        );
        for region in picture.regions() {
            assert!(region.x >= 0 && region.y >= 0, "{region:?}");
            assert!(region.width > 0 && region.height > 0, "{region:?}");
            assert!(region.x + region.width <= width as i32, "{region:?}");
            assert!(region.y + region.height <= height as i32, "{region:?}");
        }
        let tenure = |token: &str| {
            picture
                .regions()
                .iter()
                .find(|r| matches!(&r.part, Part::Tenure { token: t, .. } if t == token))
                .unwrap()
        };
        let (a, b) = (tenure("33"), tenure("34"));
        // A's lease ends at 30 s, B's begins at 31 s: the bars do not overlap.
        assert!(a.x + a.width < b.x, "{a:?} {b:?}");
        assert!(a.y < b.y, "A's lane is above B's");
    }

    #[test]
    fn drawing_the_same_timeline_twice_gives_the_same_document() {
        let first = Picture::draw(&sample()).unwrap();
        let second = Picture::draw(&sample()).unwrap();
        assert_eq!(first.svg(), second.svg());
        assert_eq!(first.regions(), second.regions());
    }

    #[test]
    fn an_empty_timeline_is_a_picture_with_its_title_and_axis() {
        let picture = Picture::draw(&Timeline::new("nothing", TimeLabels::Elapsed)).unwrap();
        assert!(picture.svg().contains("nothing"));
        assert!(picture.svg().contains("0 s"));
        assert!(picture.regions().is_empty());
    }
}
