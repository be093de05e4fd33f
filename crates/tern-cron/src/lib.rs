//! Scheduled jobs (issue 16): what a schedule is and when it fires (`schedule`), and the clock
//! the scheduler reads and sleeps on (`clock`), which tests drive by hand. The durable scheduler
//! built on them comes later.

pub mod clock;
pub mod schedule;

pub use clock::{Clock, ManualClock, SystemClock};
pub use schedule::{Schedule, ScheduleError, ScheduleKind};
