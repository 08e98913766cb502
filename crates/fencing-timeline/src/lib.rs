//! Pictures of a fenced run, drawn from the run's own events.
//!
//! A settlement with a stalled worker is a story in time: A holds the lease under token 33,
//! stalls at `r_815`, the lease expires, B takes over with 34, A wakes and is refused. A
//! [`Timeline`] holds that story (a lane per worker, each acquisition's lease with its token,
//! stalls and kills, runs of accepted writes per store, every refused write with the store,
//! the record and the fence it met, take-overs and look-ups), and [`Picture::draw`] draws it as
//! SVG with `plotters`:
//!
//! ```
//! use std::time::Duration;
//! use fencing_core::FencingToken;
//! use fencing_timeline::{TimeLabels, Mark, Picture, Timeline};
//!
//! let s = Duration::from_secs;
//! let mut timeline = Timeline::new("r_815", TimeLabels::WORKED_EXAMPLE);
//! timeline.acquired("worker A", s(0), FencingToken::new(33)?);
//! timeline.accepted("worker A", s(26), "refunds", "r_815", false);
//! timeline.mark("worker A", s(26), Mark::Stalled { length: s(8) });
//! timeline.lease_ended("worker A", s(30));
//! timeline.acquired("worker B", s(31), FencingToken::new(34)?);
//! timeline.accepted("worker B", s(31), "refunds", "r_815", false);
//! timeline.mark("worker A", s(34), Mark::Refused {
//!     store: "refunds".into(),
//!     record: "r_815".into(),
//!     write: Some("confirm".into()),
//!     token: FencingToken::new(33)?,
//!     met: "fence is 34".into(),
//! });
//! timeline.stopped("worker A", s(34));
//! let picture = Picture::draw(&timeline)?;
//! assert!(picture.svg().contains("REFUSED by refunds: confirm r_815 with token 33"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`settlement`] turns the worked example's simulated run into a timeline
//! (`cargo run --example settlement -- --timeline FILE.svg`); the fault harness builds one
//! from its processes' output for every run whose audit fails.

mod layout;
mod picture;
mod settlement;
mod timeline;

pub use picture::{DrawError, Part, Picture, Region};
pub use settlement::settlement;
pub use timeline::{Lane, Mark, Moment, Tenure, TimeLabels, Timeline, WriteRun};

/// [`TimeLabels`], as 0.1 named it.
#[deprecated(since = "0.2.0", note = "renamed `TimeLabels`")]
#[doc(hidden)]
pub type Clock = TimeLabels;
