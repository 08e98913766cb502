//! What is drawn as one and where labels go. Marks of one kind close together on a lane are
//! one group, runs of writes that touch are one band, so a thousand take-overs are one mark;
//! each label goes on the first row where it overlaps no other, so marks at one moment stack
//! instead of writing over each other.

use std::collections::HashMap;
use std::time::Duration;

use crate::timeline::{Mark, Moment, WriteRun};

/// How near (in pixels) a mark must follow the last of its kind to join its group.
const NEAR: i32 = 30;
/// How near (in pixels) a run of writes must follow a band to join it.
const TOUCHING: i32 = 3;

/// Marks drawn as one: a mark alone, or marks of one kind close together.
#[derive(Debug)]
pub(crate) struct Group<'a> {
    pub(crate) moments: Vec<&'a Moment>,
    /// Where each mark is, in order.
    pub(crate) xs: Vec<i32>,
    /// Where the first mark is.
    pub(crate) x0: i32,
    /// Where the last mark is.
    pub(crate) x1: i32,
}

impl Group<'_> {
    /// The first mark: its kind is the group's.
    pub(crate) fn mark(&self) -> &Mark {
        &self.moments[0].mark
    }

    /// The words beside the group.
    pub(crate) fn label(&self) -> String {
        let n = self.moments.len();
        if n == 1 {
            return self.mark().label();
        }
        // The records' range, lowest to highest whatever order they came in; shorter keys
        // first, so that r_910 comes before r_1200 as it does in the settlement.
        let records = self.moments.iter().filter_map(|m| m.mark.record());
        fn order<'r>(record: &&'r str) -> (usize, &'r str) {
            (record.len(), record)
        }
        let span = format!(
            "{} … {}",
            records.clone().min_by_key(order).unwrap_or(""),
            records.max_by_key(order).unwrap_or("")
        );
        match self.mark() {
            Mark::Refused {
                store,
                write,
                token,
                met,
                ..
            } => {
                let writes = write
                    .as_deref()
                    .map_or("writes".to_owned(), |w| format!("{w}s"));
                format!("REFUSED by {store}: {n} {writes} {span} with token {token}: {met}")
            }
            Mark::TookOver { store, token, .. } => {
                format!("takes {n} records over in {store} with token {token}: {span}")
            }
            Mark::LookedUp { .. } => {
                let done = self
                    .moments
                    .iter()
                    .filter(|m| matches!(m.mark, Mark::LookedUp { found: true, .. }))
                    .count();
                format!("looks {n} records up, {done} already done: {span}")
            }
            Mark::Note {
                text,
                record: Some(_),
            } => format!("{text}: {span} ({n} times)"),
            other => format!("{} ({n} times)", other.label()),
        }
    }
}

/// Which marks may share one label: the same kind of mark, in the same store under the same
/// token; refusals also of the same write meeting the same thing (each refusal keeps a cross
/// of its own). A stall and a kill are always drawn alone.
fn kind(mark: &Mark) -> Option<String> {
    match mark {
        Mark::Refused {
            store,
            write,
            token,
            met,
            ..
        } => Some(format!("refused\0{store}\0{write:?}\0{token}\0{met}")),
        Mark::TookOver { store, token, .. } => Some(format!("took over\0{store}\0{token}")),
        Mark::LookedUp { .. } => Some("looked up".to_owned()),
        Mark::Note { text, .. } => Some(format!("note\0{text}")),
        Mark::Stalled { .. } | Mark::Killed => None,
    }
}

/// The lane's marks in groups, in the order of each group's first mark.
pub(crate) fn group(moments: &[Moment], x: impl Fn(Duration) -> i32) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    for moment in moments {
        let at = x(moment.at);
        let kind = kind(&moment.mark);
        if let Some(&i) = kind.as_ref().and_then(|k| open.get(k))
            && at <= groups[i].x1 + NEAR
        {
            groups[i].moments.push(moment);
            groups[i].xs.push(at);
            groups[i].x1 = at;
            continue;
        }
        if let Some(kind) = kind {
            open.insert(kind, groups.len());
        }
        groups.push(Group {
            moments: vec![moment],
            xs: vec![at],
            x0: at,
            x1: at,
        });
    }
    groups
}

/// Runs of accepted writes drawn as one band.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Band<'a> {
    pub(crate) store: &'a str,
    pub(crate) stale: bool,
    pub(crate) first: &'a str,
    pub(crate) last: &'a str,
    pub(crate) writes: usize,
    pub(crate) x0: i32,
    pub(crate) x1: i32,
}

/// The lane's runs of writes as bands: a run that begins where a band of its store and
/// staleness ends (within a few pixels) extends it.
pub(crate) fn bands(runs: &[WriteRun], x: impl Fn(Duration) -> i32) -> Vec<Band<'_>> {
    let mut bands: Vec<Band<'_>> = Vec::new();
    for run in runs {
        let (x0, x1) = (x(run.from), x(run.until));
        if let Some(band) = bands
            .iter_mut()
            .rev()
            .find(|b| b.store == run.store && b.stale == run.stale)
            && x0 <= band.x1 + TOUCHING
        {
            band.last = &run.last;
            band.writes += run.writes;
            band.x1 = band.x1.max(x1);
            continue;
        }
        bands.push(Band {
            store: &run.store,
            stale: run.stale,
            first: &run.first,
            last: &run.last,
            writes: run.writes,
            x0,
            x1,
        });
    }
    bands
}

/// A label placed: its text and the horizontal extent of glyph and text together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) text: String,
    /// Left edge, glyph included.
    pub(crate) start: i32,
    /// Right edge, glyph included.
    pub(crate) end: i32,
    /// The text sits left of its glyph, because to the right it would leave the picture.
    pub(crate) flipped: bool,
}

/// The labels of one lane, each with its row, in the order given.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rows {
    placed: Vec<(usize, Label)>,
    rows: usize,
}

impl Rows {
    /// How many rows the labels need.
    pub(crate) fn count(&self) -> usize {
        self.rows
    }

    /// Each label with its row, in the order given.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Label)> {
        self.placed.iter().map(|(row, label)| (*row, label))
    }
}

/// The width of `text` at `px` pixels, as a sans-serif face sets it, rounded up: a little
/// wide rather than narrow, so that labels judged apart are apart.
pub(crate) fn width(text: &str, px: f64) -> i32 {
    (text.chars().count() as f64 * px * 0.62).ceil() as i32
}

/// Whether `text` at `px` pixels fits in `room` pixels.
pub(crate) fn fits(text: &str, px: f64, room: i32) -> bool {
    width(text, px) <= room
}

/// The room a glyph takes left and right of its x, and the gap before its text.
const GLYPH: i32 = 6;
const GAP: i32 = 10;
/// The least space between two labels on one row.
const SPACING: i32 = 12;

/// Places each `(x0, x1, text)` (marks from `x0` to `x1`) on the first row where it overlaps
/// nothing placed before, its text right of `x1`, or left of `x0` where the right would pass
/// `right`.
pub(crate) fn place(
    items: impl IntoIterator<Item = (i32, i32, String)>,
    left: i32,
    right: i32,
    px: f64,
) -> Rows {
    let mut row_ends: Vec<i32> = Vec::new();
    let mut placed = Vec::new();
    for (x0, x1, text) in items {
        let w = width(&text, px);
        let room_right = right - x1 - GAP;
        let room_left = x0 - GAP - left;
        // Left only where the right is too short and the left is longer.
        let flipped = w > room_right && room_left > room_right;
        let (start, end) = if flipped {
            (x0 - GAP - w, x1 + GLYPH)
        } else {
            (x0 - GLYPH, x1 + GAP + w)
        };
        let row = match row_ends.iter().position(|&e| e + SPACING <= start) {
            Some(row) => row,
            None => {
                row_ends.push(i32::MIN / 2);
                row_ends.len() - 1
            }
        };
        row_ends[row] = end;
        placed.push((
            row,
            Label {
                text,
                start,
                end,
                flipped,
            },
        ));
    }
    Rows {
        rows: row_ends.len(),
        placed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(rows: &Rows) -> Vec<usize> {
        rows.iter().map(|(row, _)| row).collect()
    }

    #[test]
    fn labels_at_one_moment_stack_and_labels_far_apart_share_a_row() {
        let items = [
            (100, 100, "a".repeat(20)),
            (100, 100, "b".repeat(20)),
            (105, 105, "c".repeat(5)),
            (600, 600, "d".repeat(10)),
        ];
        let rows = place(items, 0, 1000, 12.0);
        assert_eq!(rows_of(&rows), [0, 1, 2, 0]);
        assert_eq!(rows.count(), 3);
    }

    #[test]
    fn a_label_that_would_leave_the_picture_turns_left_of_its_mark() {
        let rows = place(
            [(990, 990, "late".to_owned()), (10, 40, "early".to_owned())],
            0,
            1000,
            12.0,
        );
        let labels: Vec<&Label> = rows.iter().map(|(_, l)| l).collect();
        assert!(labels[0].flipped);
        assert!(labels[0].end <= 1000 && labels[0].start < 990);
        assert!(!labels[1].flipped);
        assert_eq!(labels[1].start, 10 - GLYPH);
        assert_eq!(labels[1].end, 40 + GAP + width("early", 12.0));
    }

    #[test]
    fn a_label_too_long_for_either_side_goes_where_there_is_more_room() {
        let rows = place([(40, 40, "x".repeat(200))], 0, 100, 12.0);
        assert!(!rows.iter().next().unwrap().1.flipped);
        let rows = place([(60, 60, "x".repeat(200))], 0, 100, 12.0);
        assert!(rows.iter().next().unwrap().1.flipped);
    }

    #[test]
    fn widths_grow_with_text_and_size() {
        assert_eq!(width("", 12.0), 0);
        assert!(width("abcd", 12.0) > width("abc", 12.0));
        assert!(width("abc", 13.0) > width("abc", 12.0));
        assert!(fits("abc", 12.0, width("abc", 12.0)));
        assert!(!fits("abc", 12.0, width("abc", 12.0) - 1));
    }

    fn at(ms: u64, mark: Mark) -> Moment {
        Moment {
            at: Duration::from_millis(ms),
            mark,
        }
    }

    fn took_over(record: &str, token: u64) -> Mark {
        Mark::TookOver {
            store: "refunds".into(),
            record: record.into(),
            token: fencing_core::FencingToken::new(token).unwrap(),
        }
    }

    fn pixel_per_ms(at: Duration) -> i32 {
        at.as_millis() as i32
    }

    #[test]
    fn marks_of_one_kind_close_together_share_a_label() {
        let refused = |record: &str| Mark::Refused {
            store: "refunds".into(),
            record: record.into(),
            write: None,
            token: fencing_core::FencingToken::new(1).unwrap(),
            met: "fence is 2".into(),
        };
        let moments = [
            at(0, took_over("r_1", 1)),
            at(5, Mark::note_on("returns", "r_1")),
            at(10, took_over("r_2", 1)),
            at(12, refused("r_3")),
            at(14, refused("r_2")),
            at(20, Mark::note_on("returns", "r_2")),
            at(25, took_over("r_3", 1)),
            at(26, took_over("r_4", 2)),
            at(90, took_over("r_10", 7)),
            at(91, took_over("r_9", 7)),
            at(100, took_over("r_5", 1)),
            at(
                101,
                Mark::Refused {
                    store: "refunds".into(),
                    record: "r_9".into(),
                    write: None,
                    token: fencing_core::FencingToken::new(1).unwrap(),
                    met: "fence is 3".into(),
                },
            ),
        ];
        let groups = group(&moments, pixel_per_ms);
        let labels: Vec<String> = groups.iter().map(Group::label).collect();
        assert_eq!(
            labels,
            [
                "takes 3 records over in refunds with token 1: r_1 … r_3",
                "returns: r_1 … r_2 (2 times)",
                "REFUSED by refunds: 2 writes r_2 … r_3 with token 1: fence is 2",
                "takes r_4 over in refunds with token 2",
                "takes 2 records over in refunds with token 7: r_9 … r_10",
                "takes r_5 over in refunds with token 1",
                "REFUSED by refunds: write of r_9 with token 1: fence is 3",
            ]
        );
        assert_eq!((groups[0].x0, groups[0].x1), (0, 25));
        assert_eq!(groups[0].xs, [0, 10, 25]);
        assert_eq!(groups[2].xs, [12, 14], "each refusal keeps its own place");
    }

    #[test]
    fn a_group_of_look_ups_counts_those_already_done() {
        let looked = |record: &str, found| Mark::LookedUp {
            record: record.into(),
            found,
        };
        let moments = [
            at(0, looked("r_1", true)),
            at(1, looked("r_2", false)),
            at(2, looked("r_3", true)),
            at(3, Mark::note("restarted")),
            at(4, Mark::note("restarted")),
        ];
        let labels: Vec<String> = group(&moments, pixel_per_ms)
            .iter()
            .map(Group::label)
            .collect();
        assert_eq!(
            labels,
            [
                "looks 3 records up, 2 already done: r_1 … r_3",
                "restarted (2 times)"
            ]
        );
    }

    #[test]
    fn runs_that_touch_are_one_band_per_store_and_staleness() {
        let run = |store: &str, first: &str, from: u64, until: u64, stale| WriteRun {
            store: store.into(),
            first: first.into(),
            last: first.into(),
            writes: 2,
            from: Duration::from_millis(from),
            until: Duration::from_millis(until),
            stale,
        };
        let runs = [
            run("refunds", "r_1", 0, 10, false),
            run("refunds", "r_2", 10, 12, true),
            run("refunds", "r_3", 12, 20, false),
            run("ledger", "r_3", 13, 20, false),
            run("refunds", "r_4", 14, 30, true),
            run("refunds", "r_5", 100, 110, false),
        ];
        let bands = bands(&runs, pixel_per_ms);
        let summary: Vec<(&str, bool, &str, &str, usize, i32, i32)> = bands
            .iter()
            .map(|b| (b.store, b.stale, b.first, b.last, b.writes, b.x0, b.x1))
            .collect();
        assert_eq!(
            summary,
            [
                ("refunds", false, "r_1", "r_3", 4, 0, 20),
                ("refunds", true, "r_2", "r_4", 4, 10, 30),
                ("ledger", false, "r_3", "r_3", 2, 13, 20),
                ("refunds", false, "r_5", "r_5", 2, 100, 110),
            ]
        );
    }

    #[test]
    fn no_labels_need_no_rows() {
        assert_eq!(place(Vec::new(), 0, 100, 12.0).count(), 0);
    }
}
