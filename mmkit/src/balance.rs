//! Whether a shortcut has paid lately: the ledger that the isolated blocks
//! and the pending area of `vmap` each keep, and the tree's finger. A use
//! that pays earns what it saved; one that does not costs what trying cost;
//! the shortcut is tried only while the balance is not negative.

/// The balance's bound either way: a long run of either kind is forgotten
/// after at most this much of the other.
const CAP: i32 = 4096;

/// What a shortcut has saved, less what it has cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Balance(i32);

impl Balance {
    pub(crate) const fn new() -> Self {
        Balance(0)
    }

    /// Whether the shortcut may be tried (a new area kept out of the tree,
    /// say): while the balance is not negative. A refusal adds 1, so a
    /// workload that changes is noticed.
    #[inline]
    pub(crate) fn admits(&mut self) -> bool {
        if self.0 < 0 {
            self.0 += 1;
            return false;
        }
        true
    }

    /// The shortcut paid (an area was taken back), saving `x`.
    #[inline]
    pub(crate) fn earn(&mut self, x: i32) {
        self.0 = (self.0 + x).min(CAP);
    }

    /// The shortcut did not pay (areas were given up unused), costing `x`.
    #[inline]
    pub(crate) fn lose(&mut self, x: i32) {
        self.0 = (self.0 - x).max(-CAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_pay_a_debt_back_and_the_balance_stays_bounded() {
        let mut b = Balance::new();
        assert!(b.admits());
        b.lose(3);
        assert!(!b.admits() && !b.admits() && !b.admits());
        assert!(b.admits());
        b.earn(10 * CAP);
        b.lose(CAP);
        assert!(b.admits(), "the gain was capped at CAP, then spent");
        b.lose(1);
        assert!(!b.admits());
        b.lose(10 * CAP);
        for _ in 0..CAP {
            assert!(!b.admits());
        }
        assert!(b.admits(), "the debt was capped at CAP");
    }
}
