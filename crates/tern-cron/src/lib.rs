//! Scheduled jobs (issue 16): what a schedule is and when it fires (`schedule`), and the clock
//! the scheduler reads and sleeps on (`clock`), which tests drive by hand, and what to do about
//! due occurrences under the catch-up and overlap policies (`plan`). The durable scheduler
//! built on them comes later.

pub mod clock;
pub mod deliver;
pub mod jobs;
pub mod plan;
pub mod schedule;
pub mod scheduler;
pub mod tools;

pub use clock::{Clock, ManualClock, SystemClock};
pub use plan::{Action, CatchUp, Overlap, Plan, SkipReason, Step, plan};
pub use schedule::{Schedule, ScheduleError, ScheduleKind};
pub use scheduler::{RunContext, RunEnd, Runner, Scheduler};
