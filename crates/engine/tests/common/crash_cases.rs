//! The cases a crash test checks on a [`CrashDevice`] run: a crash point
//! and which of the writes still volatile there reach the disk. One list
//! for every test, so each checks nothing, everything, and a random torn
//! and reordered part, and none checks the same image twice.

#![allow(dead_code)]

use ext4kit_engine::device::{CrashDevice, Survivors};
use ext4kit_testkit::rng::Rng;

/// What may survive a crash at write `point`: nothing, everything, or a
/// random part (seeded by `point`, torn and reordered). At a flush point
/// only nothing: no write is volatile there, so the other two would give
/// the same image again.
pub fn survivors(point: usize, flushes: &[usize]) -> Vec<Survivors> {
    if flushes.contains(&point) {
        return vec![Survivors::None];
    }
    let random = Survivors::Random {
        seed: point as u64,
        torn: true,
        reorder: true,
    };
    vec![Survivors::None, Survivors::All, random]
}

/// Every crash point of `dev`'s run in `points`, each with its
/// [`survivors`].
pub fn at_points(dev: &CrashDevice, points: impl IntoIterator<Item = usize>) -> Vec<(usize, Survivors)> {
    let flushes = dev.flush_points();
    points
        .into_iter()
        .flat_map(|p| survivors(p, &flushes).into_iter().map(move |s| (p, s)))
        .collect()
}

/// Every crash point of `dev`'s run from write `from` to the last one,
/// each with its [`survivors`].
pub fn every_write_from(dev: &CrashDevice, from: usize) -> Vec<(usize, Survivors)> {
    at_points(dev, from..=dev.writes())
}

/// The survivors of the `i`-th point of a random sample, in turn:
/// nothing, everything, a random part of whole writes, a random torn part;
/// the part's seed and whether it is reordered are drawn from `rng`.
pub fn sampled(i: usize, rng: &mut Rng) -> Survivors {
    match i % 4 {
        0 => Survivors::None,
        1 => Survivors::All,
        k => Survivors::Random {
            seed: rng.next_u64(),
            torn: k == 3,
            reorder: rng.below(2) == 0,
        },
    }
}

/// `n` random crash points of `dev`'s run from write `from` on, drawn
/// from `rng`, with [`sampled`] survivors.
pub fn random_points(dev: &CrashDevice, from: usize, n: usize, rng: &mut Rng) -> Vec<(usize, Survivors)> {
    let span = (dev.writes() - from) as u64 + 1;
    (0..n)
        .map(|i| {
            let point = from + rng.below(span) as usize;
            (point, sampled(i, rng))
        })
        .collect()
}
