//! The experiments, one module each. An experiment is a chapter's invariant and the versions
//! the course teaches for it (plus hmdp's); a version is a function that runs against a
//! [`Lab`] and says what it measured. Adding an experiment is a module here and a line in
//! [`ALL`]; its names are the command line's interface, so they do not change.

pub mod cache_avalanche;
pub mod cache_breakdown;
pub mod cache_consistency;
pub mod cache_penetration;
pub mod feed;
pub mod hot_voucher;
pub mod likes;
pub mod lock_misdelete;
pub mod lock_reentrancy;
pub mod nearby;
pub mod one_per_user;
pub mod oversell;
pub mod queues;
pub mod session;
mod shops;
pub mod sign;
pub mod uv;

use futures_util::future::BoxFuture;

use crate::{Lab, Lang, Outcome};

/// How one version runs.
pub type RunFn = for<'a> fn(&'a Lab) -> BoxFuture<'a, anyhow::Result<Outcome>>;

/// One version of a technique.
pub struct Version {
    /// Its name on the command line (`v1-no-check`, `hmdp`, ...).
    pub name: &'static str,
    /// Whether the course teaches it as keeping the invariant: the broken versions must fail on
    /// every run, the others never.
    pub holds: bool,
    /// What it does, in a line.
    pub about: &'static str,
    /// The same line in Chinese.
    pub about_zh: &'static str,
    pub run: RunFn,
}

impl Version {
    /// What it does, in `lang`.
    pub fn about(&self, lang: Lang) -> &'static str {
        lang.pick(self.about_zh, self.about)
    }
}

/// A sentence in both of the lab's languages.
pub struct Text {
    pub zh: &'static str,
    pub en: &'static str,
}

impl Text {
    pub fn get(&self, lang: Lang) -> &'static str {
        lang.pick(self.zh, self.en)
    }
}

/// One experiment: a chapter's invariant and the versions that keep or break it.
pub struct Experiment {
    pub name: &'static str,
    /// The course's chapter, in its own words (`优惠券秒杀`, ...).
    pub chapter: &'static str,
    /// What must hold, in a line.
    pub invariant: &'static str,
    /// The same line in Chinese.
    pub invariant_zh: &'static str,
    /// What the experiment teaches, in a sentence: the last line of its report.
    pub lesson: Text,
    pub versions: &'static [Version],
}

impl Experiment {
    /// What must hold, in `lang`.
    pub fn invariant(&self, lang: Lang) -> &'static str {
        lang.pick(self.invariant_zh, self.invariant)
    }
}

/// Every experiment, in the course's order.
pub static ALL: &[&Experiment] = &[
    &session::EXPERIMENT,
    &cache_penetration::EXPERIMENT,
    &cache_breakdown::EXPERIMENT,
    &cache_avalanche::EXPERIMENT,
    &cache_consistency::EXPERIMENT,
    &oversell::EXPERIMENT,
    &one_per_user::EXPERIMENT,
    &lock_misdelete::EXPERIMENT,
    &lock_reentrancy::EXPERIMENT,
    &hot_voucher::EXPERIMENT,
    &queues::EXPERIMENT,
    &likes::EXPERIMENT,
    &feed::EXPERIMENT,
    &nearby::EXPERIMENT,
    &sign::EXPERIMENT,
    &uv::EXPERIMENT,
];

/// The experiment called `name`.
pub fn find(name: &str) -> Option<&'static Experiment> {
    ALL.iter().copied().find(|e| e.name == name)
}

/// A [`Version`] from an `async fn(&Lab) -> anyhow::Result<Outcome>`: its name, whether it
/// holds, what it does in English and in Chinese, the function.
macro_rules! version {
    ($name:literal, $holds:expr, $about:literal, $about_zh:literal, $f:path) => {
        $crate::Version {
            name: $name,
            holds: $holds,
            about: $about,
            about_zh: $about_zh,
            run: |lab| Box::pin($f(lab)),
        }
    };
}
pub(crate) use version;
