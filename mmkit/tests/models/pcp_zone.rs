// `Zone`, included by `tests/buddy_pcp_model.rs` for its exact test.

/// The calls a zone with per-CPU lists answers, so that `PcpZone`,
/// `ConcurrentZone` and `LockedZone` run the same test.
trait Zone {
    fn alloc(&mut self, cpu: usize, order: u8, mt: MigrateType) -> Result<u64, AllocError>;
    fn free(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError>;
    /// `None` where the zone has no drain of one CPU.
    fn drain(&mut self, cpu: usize) -> Option<Result<(), FreeError>>;
    fn drain_all(&mut self);
    fn stats(&self, cpu: usize) -> PcpStats;
    fn pcp_pages(&self, cpu: usize) -> u64;
    /// `None` where the zone does not show its lists.
    fn pcp_list(&self, cpu: usize, order: u8, mt: MigrateType) -> Option<Vec<u64>>;
    fn differs(&self, k: &Kernel) -> Option<String>;
    fn check(&self) -> Result<(), mmkit::CheckError>;
    /// Every CPU drained, the state as a `PcpZone`.
    fn into_pcp_zone(self) -> PcpZone;
}

impl Zone for PcpZone {
    fn alloc(&mut self, cpu: usize, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
        PcpZone::alloc(self, cpu, order, mt)
    }
    fn free(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
        PcpZone::free(self, cpu, pfn, order)
    }
    fn drain(&mut self, cpu: usize) -> Option<Result<(), FreeError>> {
        Some(PcpZone::drain(self, cpu))
    }
    fn drain_all(&mut self) {
        PcpZone::drain_all(self)
    }
    fn stats(&self, cpu: usize) -> PcpStats {
        PcpZone::stats(self, cpu)
    }
    fn pcp_pages(&self, cpu: usize) -> u64 {
        PcpZone::pcp_pages(self, cpu)
    }
    fn pcp_list(&self, cpu: usize, order: u8, mt: MigrateType) -> Option<Vec<u64>> {
        Some(PcpZone::pcp_list(self, cpu, order, mt))
    }
    fn differs(&self, k: &Kernel) -> Option<String> {
        k.differs(self.zone())
    }
    fn check(&self) -> Result<(), mmkit::CheckError> {
        PcpZone::check(self)
    }
    fn into_pcp_zone(mut self) -> PcpZone {
        PcpZone::drain_all(&mut self);
        self
    }
}

impl<M: lock_api::RawMutex> Zone for LockedZone<M> {
    fn alloc(&mut self, cpu: usize, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
        LockedZone::alloc(self, cpu, order, mt)
    }
    fn free(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
        LockedZone::free(self, cpu, pfn, order)
    }
    fn drain(&mut self, _: usize) -> Option<Result<(), FreeError>> {
        None
    }
    fn drain_all(&mut self) {
        LockedZone::drain_all(self)
    }
    fn stats(&self, cpu: usize) -> PcpStats {
        LockedZone::stats(self, cpu)
    }
    fn pcp_pages(&self, cpu: usize) -> u64 {
        LockedZone::pcp_pages(self, cpu)
    }
    fn pcp_list(&self, _: usize, _: u8, _: MigrateType) -> Option<Vec<u64>> {
        None
    }
    fn differs(&self, k: &Kernel) -> Option<String> {
        self.with_zone(|b| k.differs(b))
    }
    fn check(&self) -> Result<(), mmkit::CheckError> {
        LockedZone::check(self)
    }
    fn into_pcp_zone(self) -> PcpZone {
        LockedZone::into_pcp_zone(self)
    }
}
