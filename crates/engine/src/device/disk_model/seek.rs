//! The seek curve of seed 004, eq. (7): no time for distance 0, `a + b·√d`
//! up to a crossover distance, `c + e·d` beyond (the seed calls the slope
//! `d` and the crossover `e`; here `d` is the distance), fitted to the three
//! seek figures a datasheet gives.
//!
//! The fit. Datasheet seek times include the head's settling, so the curve
//! is fitted to each figure minus the settle time the model charges on its
//! own (eq. 4 keeps `SettleTime` apart). Five unknowns (`a`, `b`, `c`, `e`,
//! crossover `x`) meet five conditions: the track-to-track figure at
//! `d = 1`, the full-stroke figure at `d = D` (the last cylinder), the two
//! pieces meeting at `x` with the same value and the same slope (a seek's
//! time does not jump or kink where the arm stops accelerating), and the
//! average figure as the mean over random seeks. For a given `x` the first
//! four fix the rest in closed form; the mean grows with `x` (a longer
//! square-root part makes the curve more concave), so `x` is found by
//! bisection.
//!
//! "Random seeks" are seeks between two cylinders chosen uniformly and
//! independently, whose distance has density `2(D - d)/D²` — what a
//! datasheet's average means. A mean over uniformly distributed *distances*
//! cannot be met at all: even the straight line from 0.2 to 8.1 ms has a
//! mean of 4.15 ms over uniform distances, above the 4 ms figure, and every
//! concave curve is higher still.

/// The three seek times of a datasheet, settle time included, in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeekFigures {
    /// A seek to the next cylinder.
    pub track_to_track_ns: u64,
    /// The mean over seeks between random cylinders.
    pub average_ns: u64,
    /// A seek across every cylinder.
    pub full_stroke_ns: u64,
}

/// A fitted eq. (7) curve: seek time (settling excluded) by cylinder
/// distance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeekCurve {
    /// Constant of the square-root part, ns.
    pub a: f64,
    /// Coefficient of `√d`, ns.
    pub b: f64,
    /// Constant of the linear part, ns.
    pub c: f64,
    /// Slope of the linear part, ns per cylinder.
    pub e: f64,
    /// Distance (cylinders) up to which the square-root part applies.
    pub crossover: f64,
    /// The longest seek, in cylinders.
    pub max_distance: u64,
}

impl SeekCurve {
    /// Fits the curve to `figures` minus `settle_ns` on a drive whose
    /// longest seek crosses `max_distance` cylinders.
    ///
    /// # Errors
    /// A message naming the figures when they are not increasing, when
    /// `max_distance < 2`, or when no crossover gives the average.
    pub fn fit(figures: SeekFigures, settle_ns: u64, max_distance: u64) -> Result<Self, String> {
        let minus = |t: u64| t as f64 - settle_ns as f64;
        let (t1, avg, full) = (
            minus(figures.track_to_track_ns),
            minus(figures.average_ns),
            minus(figures.full_stroke_ns),
        );
        if max_distance < 2 || !(0.0 < t1 && t1 < avg && avg < full) {
            return Err(format!(
                "seek figures {figures:?} less settle {settle_ns} ns over {max_distance} cylinders \
                 must be positive and increasing (track-to-track < average < full stroke)"
            ));
        }
        let span = max_distance as f64;
        let (mut lo, mut hi) = (1.0, span);
        let (low, high) = (
            Self::through(t1, full, lo, max_distance).continuous_mean(),
            Self::through(t1, full, hi, max_distance).continuous_mean(),
        );
        if !(low <= avg && avg <= high) {
            return Err(format!(
                "no seek curve through track-to-track {t1:.0} ns and full stroke {full:.0} ns \
                 (settle excluded) has an average of {avg:.0} ns: possible averages are \
                 {low:.0}..{high:.0} ns"
            ));
        }
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if Self::through(t1, full, mid, max_distance).continuous_mean() < avg {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(Self::through(t1, full, 0.5 * (lo + hi), max_distance))
    }

    /// The curve with crossover `x` through `t1` at distance 1 and `full`
    /// at the last cylinder, with value and slope continuous at `x`.
    fn through(t1: f64, full: f64, x: f64, max_distance: u64) -> Self {
        let span = max_distance as f64;
        let sx = x.sqrt();
        let b = (full - t1) / (0.5 * sx + span / (2.0 * sx) - 1.0);
        let a = t1 - b;
        let e = b / (2.0 * sx);
        Self {
            a,
            b,
            c: a + 0.5 * b * sx,
            e,
            crossover: x,
            max_distance,
        }
    }

    /// The mean over seeks between random cylinders, with distances taken
    /// as continuous on `[0, D]` (closed form, used by the fit).
    fn continuous_mean(&self) -> f64 {
        let (span, x) = (self.max_distance as f64, self.crossover);
        let sx = x.sqrt();
        let sqrt_part_const = span * x - 0.5 * x * x;
        let sqrt_part_root = span * (2.0 / 3.0) * x * sx - 0.4 * x * x * sx;
        let line_const = 0.5 * (span - x) * (span - x);
        let line_slope = 0.5 * span * (span * span - x * x) - (span * span * span - x * x * x) / 3.0;
        2.0 / (span * span)
            * (self.a * sqrt_part_const + self.b * sqrt_part_root + self.c * line_const + self.e * line_slope)
    }

    /// Seek time in ns, settling excluded, for a move of `distance`
    /// cylinders (0 for none). Uses only `+`, `*` and `sqrt`, which IEEE 754
    /// rounds the same way on every machine.
    pub fn time_ns(&self, distance: u64) -> u64 {
        if distance == 0 {
            return 0;
        }
        let d = distance as f64;
        let t = if d <= self.crossover {
            self.a + self.b * d.sqrt()
        } else {
            self.c + self.e * d
        };
        t.max(0.0).round() as u64
    }

    /// The exact mean of [`SeekCurve::time_ns`] over every seek between two
    /// distinct cylinders (distance `d` occurs `2(D + 1 - d)` times). Costs
    /// one evaluation per distance: for checks and reports, not the fit.
    pub fn mean_over_random_seeks_ns(&self) -> f64 {
        let cylinders = self.max_distance + 1;
        let (mut sum, mut weight) = (0.0, 0.0);
        for d in 1..=self.max_distance {
            let w = (cylinders - d) as f64;
            sum += w * self.time_ns(d) as f64;
            weight += w;
        }
        sum / weight
    }

    /// The exact mean of [`SeekCurve::time_ns`] over distances drawn
    /// uniformly from `1..=D`, for comparison in reports.
    pub fn mean_over_uniform_distances_ns(&self) -> f64 {
        let sum: f64 = (1..=self.max_distance).map(|d| self.time_ns(d) as f64).sum();
        sum / self.max_distance as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIGURES: SeekFigures = SeekFigures {
        track_to_track_ns: 200_000,
        average_ns: 4_000_000,
        full_stroke_ns: 8_100_000,
    };

    #[test]
    fn the_fit_meets_all_three_figures_and_joins_smoothly() {
        let settle = 100_000;
        let c = SeekCurve::fit(FIGURES, settle, 50_000).unwrap();
        assert_eq!(c.time_ns(1) + settle, 200_000);
        assert_eq!(c.time_ns(50_000) + settle, 8_100_000);
        let mean = c.mean_over_random_seeks_ns() + settle as f64;
        assert!((mean - 4e6).abs() < 4e6 * 0.001, "mean {mean}");
        assert!(c.crossover > 1.0 && c.crossover < 50_000.0);
        let x = c.crossover;
        let (sqrt_side, line_side) = (c.a + c.b * x.sqrt(), c.c + c.e * x);
        assert!((sqrt_side - line_side).abs() < 1e-6, "continuous at the crossover");
        assert!(
            (c.b / (2.0 * x.sqrt()) - c.e).abs() < 1e-9,
            "same slope at the crossover"
        );
        assert_eq!(c.time_ns(0), 0);
    }

    #[test]
    fn the_curve_rises_with_distance() {
        let c = SeekCurve::fit(FIGURES, 0, 74_000).unwrap();
        let mut last = 0;
        for d in [1, 2, 3, 10, 100, 1000, 5000, 20_000, 50_000, 74_000] {
            assert!(c.time_ns(d) > last, "at {d}");
            last = c.time_ns(d);
        }
    }

    #[test]
    fn impossible_figures_are_refused_with_the_range() {
        let flat = SeekFigures {
            average_ns: 7_000_000,
            ..FIGURES
        };
        let err = SeekCurve::fit(flat, 0, 74_000).unwrap_err();
        assert!(err.contains("possible averages"), "{err}");
        let backwards = SeekFigures {
            average_ns: 100_000,
            ..FIGURES
        };
        assert!(SeekCurve::fit(backwards, 0, 74_000).unwrap_err().contains("increasing"));
        assert!(
            SeekCurve::fit(FIGURES, 300_000, 74_000).is_err(),
            "settle above a figure"
        );
    }

    #[test]
    fn uniform_distances_cannot_give_the_average() {
        // Even the straightest curve the family allows averages more than
        // 4 ms over uniform distances, which is why the fit uses random seeks.
        let c = SeekCurve::fit(FIGURES, 0, 74_000).unwrap();
        assert!(c.mean_over_uniform_distances_ns() > 4_150_000.0);
    }
}
