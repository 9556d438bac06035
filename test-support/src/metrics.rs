//! Metrics the tests judge runs by.

/// Jain's fairness index of the throughputs `x` (R. Jain, D. Chiu, W. Hawe, DEC-TR-301,
/// 1984): 1 when all are equal, 1/n when one flow has everything.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sum_sq: f64 = x.iter().map(|v| v * v).sum();
    sum * sum / (x.len() as f64 * sum_sq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_for_equal_shares_and_one_over_n_for_a_hog() {
        assert!((jain(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
        assert!((jain(&[30.0, 10.0]) - 0.8).abs() < 1e-12);
    }
}
