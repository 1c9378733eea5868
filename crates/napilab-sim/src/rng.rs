//! Deterministic random numbers: SplitMix64 to seed, xoshiro256** to draw.
//!
//! Our own small generator keeps the twin free of hidden global state (docs/architecture.md
//! principle 7) and of a dependency whose stream could change between versions, which
//! would silently change every seeded result.

#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for one stream of one run: independent streams of the same seed get
    /// different `stream` numbers, so adding a source does not perturb the others.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut st = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let s = [
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
        ];
        Rng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Exponentially distributed with the given mean (inversion: one logarithm per
    /// draw). Kept for the streams whose values the seeded results already depend on
    /// and that are drawn rarely (think times); the arrival streams use [`Rng::exp1`].
    pub fn exp(&mut self, mean: f64) -> f64 {
        // 1 - u is in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.next_f64()).ln()
    }

    /// Standard exponential (mean 1) by the ziggurat method (Marsaglia and Tsang,
    /// 2000; 256 layers, the layer index from the low 8 bits and the abscissa from the
    /// top 53 bits of the same draw, which are disjoint, as Doornik (2005) advises).
    /// About 99% of draws cost one `next_u64`, one multiply and one compare, against a
    /// logarithm per draw for inversion: the Poisson arrivals are the twin's hottest
    /// random numbers (one per packet). Written here rather than taken from a crate for
    /// the reason given at the top of this file: a seeded result must not change when a
    /// dependency changes its algorithm.
    #[inline]
    pub fn exp1(&mut self) -> f64 {
        self.exp1_with(zig())
    }

    /// [`Rng::exp1`] with the table fetched once by the caller.
    #[inline]
    fn exp1_with(&mut self, z: &Ziggurat) -> f64 {
        let bits = self.next_u64();
        let i = (bits & 0xff) as usize;
        let x = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * z.x[i];
        if x < z.x[i + 1] {
            return x;
        }
        self.exp1_slow(z, i, x)
    }

    #[cold]
    fn exp1_slow(&mut self, z: &Ziggurat, mut i: usize, mut x: f64) -> f64 {
        loop {
            if i == 0 {
                // The base layer's tail beyond r: r plus an exponential (memoryless).
                return ZIG_R - (1.0 - self.next_f64()).ln();
            }
            // The wedge between the layer's rectangle and the density.
            let y = z.f[i + 1] + (z.f[i] - z.f[i + 1]) * self.next_f64();
            if y < (-x).exp() {
                return x;
            }
            let bits = self.next_u64();
            i = (bits & 0xff) as usize;
            x = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * z.x[i];
            if x < z.x[i + 1] {
                return x;
            }
        }
    }

    /// Fill `out` with standard exponentials (the same values, in the same order, as
    /// calling [`Rng::exp1`] `out.len()` times).
    pub fn fill_exp1(&mut self, out: &mut [f64]) {
        self.exp1_each(out.len(), |i, x| out[i] = x);
    }

    /// Call `f(i, x)` for i in 0..n with the values of `n` calls of [`Rng::exp1`], in
    /// order. The state is held in four locals during the loop and only put back
    /// into a struct for the rare slow path, so the generator stays in registers
    /// instead of going through memory at every draw; `f` is inlined into the loop,
    /// so the caller's use of each value needs no buffer either.
    #[inline(always)]
    pub fn exp1_each(&mut self, n: usize, mut f: impl FnMut(usize, f64)) {
        let z = zig();
        let [mut s0, mut s1, mut s2, mut s3] = self.s;
        for i in 0..n {
            // next_u64, written out on the locals.
            let bits = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
            let t = s1 << 17;
            s2 ^= s0;
            s3 ^= s1;
            s1 ^= s2;
            s0 ^= s3;
            s2 ^= t;
            s3 = s3.rotate_left(45);
            let l = (bits & 0xff) as usize;
            let x = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * z.x[l];
            let x = if x < z.x[l + 1] {
                x
            } else {
                let mut r = Rng {
                    s: [s0, s1, s2, s3],
                };
                let x = r.exp1_slow(z, l, x);
                [s0, s1, s2, s3] = r.s;
                x
            };
            f(i, x);
        }
        self.s = [s0, s1, s2, s3];
    }
}

/// Start of the tail of the 256-layer exponential ziggurat (Marsaglia and Tsang).
const ZIG_R: f64 = 7.697_117_470_131_05;

/// Layer edges x[0] > x[1] = r > ... > x[256] = 0 and densities f[i] = exp(-x[i]);
/// every layer (the base one with its tail included) has the same area v.
struct Ziggurat {
    x: [f64; 257],
    f: [f64; 257],
}

fn zig() -> &'static Ziggurat {
    static Z: std::sync::OnceLock<Ziggurat> = std::sync::OnceLock::new();
    Z.get_or_init(|| {
        let r = ZIG_R;
        let v = (r + 1.0) * (-r).exp();
        let mut x = [0.0; 257];
        x[0] = v / (-r).exp();
        x[1] = r;
        for i in 1..256 {
            let y = (-x[i]).exp() + v / x[i];
            x[i + 1] = if y >= 1.0 { 0.0 } else { -y.ln() };
        }
        x[256] = 0.0;
        let mut f = [0.0; 257];
        for i in 0..257 {
            f[i] = (-x[i]).exp();
        }
        Ziggurat { x, f }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(42, 1);
        let mut b = Rng::new(42, 1);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(42, 2);
        assert_ne!(Rng::new(42, 1).next_u64(), c.next_u64());
    }

    #[test]
    fn ziggurat_exponential_matches_the_distribution() {
        let z = zig();
        // The table closes at the top: the last layer's edge is (almost) zero.
        assert!(z.x[255] > 0.0 && z.x[255] < 0.1, "{}", z.x[255]);
        let mut r = Rng::new(11, 0);
        let n = 1_000_000;
        let xs: Vec<f64> = (0..n).map(|_| r.exp1()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.005, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "variance {var}");
        // The CDF at points inside layers, in wedges and in the tail.
        for q in [0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 7.0, 9.0] {
            let emp = xs.iter().filter(|&&x| x <= q).count() as f64 / n as f64;
            let cdf = 1.0 - (-q).exp();
            assert!(
                (emp - cdf).abs() < 0.002,
                "P(X <= {q}) = {emp}, expected {cdf}"
            );
        }
        assert!(xs.iter().all(|&x| x >= 0.0 && x.is_finite()));
    }

    #[test]
    fn exponential_mean() {
        let mut r = Rng::new(7, 0);
        let n = 200_000;
        let m: f64 = (0..n).map(|_| r.exp(3.0)).sum::<f64>() / n as f64;
        assert!((m - 3.0).abs() < 0.05, "{m}");
    }
}
