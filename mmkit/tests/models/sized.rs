// Frees that carry the size (`VmapAllocator::free_sized`,
// `free_lazy_sized`), checked against the range model (`models/range.rs`,
// included before this file), on the allocator with a busy index and on
// one made without one. Shared by `tests/sized_model.rs` and the fuzz
// targets (`tests/fuzz/mod.rs`).

/// Whether an allocator made without a busy index checks sizes (a shadow
/// index in debug builds); in release it trusts them, so the driver gives
/// it only frees the model accepts.
const SIZES_CHECKED: bool = cfg!(debug_assertions);

impl Model {
    /// The contract of `free_sized`: a range outside the space or empty is
    /// `Invalid`, no live area at `addr` `NotAllocated`, one of another
    /// size `SizeMismatch`; else `free`.
    fn sized(&self, addr: u64, size: u64) -> Result<(), FreeError> {
        let end = addr.checked_add(size).ok_or(FreeError::Invalid)?;
        if size == 0 || addr < self.space.0 || end > self.space.1 {
            return Err(FreeError::Invalid);
        }
        match self.live.get(&addr) {
            None => Err(FreeError::NotAllocated),
            Some(&e) if e != end => Err(FreeError::SizeMismatch),
            Some(_) => Ok(()),
        }
    }

    fn free_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        self.sized(addr, size)?;
        self.free(addr)
    }

    fn free_lazy_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        self.sized(addr, size)?;
        self.free_lazy(addr)
    }
}

/// One step of the sized drive: the range model's, or a sized free.
#[derive(Debug, Clone, arbitrary::Arbitrary)]
enum SizedOp {
    Base(Op),
    /// Free the n-th area returned with a size: its own, off by some, or any.
    FreeSized(usize, u8, u64),
    /// The same, lazily.
    FreeLazySized(usize, u8, u64),
}

fn sized_op_strategy() -> impl Strategy<Value = SizedOp> {
    prop_oneof![
        3 => op_strategy().prop_map(SizedOp::Base),
        2 => (any::<usize>(), any::<u8>(), any::<u64>()).prop_map(|(i, k, x)| SizedOp::FreeSized(i, k, x)),
        1 => (any::<usize>(), any::<u8>(), any::<u64>()).prop_map(|(i, k, x)| SizedOp::FreeLazySized(i, k, x)),
    ]
}

/// The address and size a sized free names: the n-th returned area
/// with mostly its own size.
fn resolve_sized(space: (u64, u64), returned: &[(u64, u64)], i: usize, k: u8, x: u64) -> (u64, u64) {
    let Some(&(s, e)) = returned.get(i % returned.len().max(1)) else {
        return (space.0, 1 + x % 64);
    };
    let size = e - s;
    match k % 8 {
        0..=4 => (s, size),
        5 => (s, size.wrapping_add(1 + x % 4).max(1)),
        6 => (s, size.saturating_sub(1 + x % size).max(x % 2)),
        _ => (x, 1 + x % 64),
    }
}

/// Runs `ops` on `make(space)` and the model; `indexed` says whether the
/// allocator checks sizes (false: frees the model refuses are skipped, and
/// `free(addr)` must be refused as `Invalid`).
fn run_sized(
    make: impl Fn(u64, u64) -> VmapAllocator,
    space: (u64, u64),
    ops: &[SizedOp],
    sized_only: bool,
) -> Result<(), String> {
    let (mut a, log) = instrumented(&make, space);
    let mut m = Model::new(space.0, space.1);
    let mut returned: Vec<(u64, u64)> = Vec::new();
    let checked = !sized_only || SIZES_CHECKED;
    for (i, op) in ops.iter().enumerate() {
        let fail = |e: String| format!("step {i} {op:x?}: {e}");
        let (got, want) = match *op {
            SizedOp::Base(ref op) => match op.resolve(space, &returned) {
                Step::Free(x) | Step::FreeLazy(x) if sized_only => {
                    let r = (a.free(x), a.free_lazy(x));
                    let want: (Result<u64, _>, Result<u64, _>) =
                        (Err(FreeError::Invalid), Err(FreeError::Invalid));
                    (format!("{r:?}"), format!("{want:?}"))
                }
                s => {
                    let area = step(&mut a, &mut m, &log, s).map_err(fail)?;
                    returned.extend(area);
                    continue;
                }
            },
            SizedOp::FreeSized(n, k, x) | SizedOp::FreeLazySized(n, k, x) => {
                let (addr, size) = resolve_sized(space, &returned, n, k, x);
                if !checked && m.sized(addr, size).is_err() {
                    continue;
                }
                if matches!(op, SizedOp::FreeSized(..)) {
                    (
                        format!("{:?}", a.free_sized(addr, size)),
                        format!("{:?}", m.free_sized(addr, size)),
                    )
                } else {
                    (
                        format!("{:?}", a.free_lazy_sized(addr, size)),
                        format!("{:?}", m.free_lazy_sized(addr, size)),
                    )
                }
            }
        };
        if got != want {
            return Err(fail(format!("result {got}, model {want}")));
        }
        let flushes = log.lock().unwrap().clone();
        if flushes != m.flushes {
            return Err(fail(format!("flushes {flushes:x?}, model {:x?}", m.flushes)));
        }
        a.check().map_err(|e| fail(e.to_string()))?;
        let (got, want) = (comparable(a.stats()), m.stats());
        if got != want {
            return Err(fail(format!("stats {got:?}, model {want:?}")));
        }
    }
    Ok(())
}

fn untracked(s: u64, e: u64) -> VmapAllocator {
    VmapAllocator::without_busy_index(s, e).unwrap()
}
