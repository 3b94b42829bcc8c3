//! The kprobe events `scripts/linux/trace.sh` places on each step of a
//! purge (v6.12's `__purge_vmap_area_lazy`, `decay_va_pool_node`,
//! `purge_vmap_node`), and the replay commands they become.
//!
//! ```text
//! vmap_decay_start: (decay_va_pool_node+0x0/..) vn=0x.. full_decay=0x0  a node's decay begins
//! vmap_pool_detach: (decay_va_pool_node+0x../..) i=I     pool I (I + 1 pages) leaves its list
//! vmap_pool_attach: (decay_va_pool_node+0x../..)         its undecayed rest is back
//! vmap_decay_reclaim: (decay_va_pool_node+0x../..)       the node's decayed areas go to the tree
//! vmap_decay_end: (__purge_vmap_area_lazy+0x../..) i=N   node N's decay is over
//! vmap_lazy_take: (__purge_vmap_area_lazy+0x../..) i=N   node N's lazy list is taken
//! vmap_purge_node: (purge_vmap_node+0x0/..) work=0x..    a node's purge (pooling) begins
//! vmap_purge_node_done: (purge_vmap_node+0x../..)        that node's areas are pooled
//! ```
//!
//! One purge runs at a time (`vmap_purge_lock`) and decays the nodes in
//! order on one task, so a decay's detach, attach and reclaim belong to
//! the node whose `vmap_decay_start` came last; the `n`-th decay start a
//! capture shows is node `n % nodes`, and each node's `vn` is checked to
//! stay the same. `purge_vmap_node` can run on a helper worker beside the
//! purging task: its node is the one whose `vn` is the highest at or
//! below `work` (the work item lies inside its node), and its done event
//! is the one of the same task.

use std::collections::HashMap;

use mmkit::nodes::PurgeStep;

use super::field;

/// One kprobe event of trace.sh's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `vmap_decay_start`: `decay_va_pool_node(vn, full_decay)` begins.
    DecayStart {
        /// The node's `struct vmap_node` address.
        vn: u64,
        /// A full decay (every pool emptied, nothing pooled after).
        full: bool,
    },
    /// `vmap_pool_detach`: pool `index` (`index + 1` pages) is detached.
    Detach {
        /// The pool index.
        index: u64,
    },
    /// `vmap_pool_attach`: the pool detached last is attached again.
    Attach,
    /// `vmap_decay_reclaim`: the decayed areas go to the free tree.
    Reclaim,
    /// `vmap_decay_end`: node `node`'s decay is over.
    DecayEnd {
        /// The node index.
        node: u64,
    },
    /// `vmap_lazy_take`: node `node`'s lazy list is taken.
    Take {
        /// The node index.
        node: u64,
    },
    /// `vmap_purge_node`: `purge_vmap_node(work)` begins.
    NodeStart {
        /// The node's `purge_work` address.
        work: u64,
    },
    /// `vmap_purge_node_done`: that node's areas are pooled.
    NodeDone,
}

/// The events' names as they appear in the trace, with their probe.
pub(super) const NAMES: [&str; 8] = [
    " vmap_decay_start: ",
    " vmap_pool_detach: ",
    " vmap_pool_attach: ",
    " vmap_decay_reclaim: ",
    " vmap_decay_end: ",
    " vmap_lazy_take: ",
    " vmap_purge_node: ",
    " vmap_purge_node_done: ",
];

/// Parses the fields of the probe event `NAMES[which]`.
pub(super) fn parse(which: usize, fields: &str) -> Result<Probe, String> {
    Ok(match which {
        0 => Probe::DecayStart {
            vn: field(fields, "vn")?,
            full: field(fields, "full_decay")? != 0,
        },
        1 => Probe::Detach {
            index: field(fields, "i")?,
        },
        2 => Probe::Attach,
        3 => Probe::Reclaim,
        4 => Probe::DecayEnd {
            node: field(fields, "i")?,
        },
        5 => Probe::Take {
            node: field(fields, "i")?,
        },
        6 => Probe::NodeStart {
            work: field(fields, "work")?,
        },
        _ => Probe::NodeDone,
    })
}

/// Where the probes say a purge is, turned into [`PurgeStep`]s and `purge
/// node N`.
#[derive(Debug, Default)]
pub(super) struct Steps {
    /// Each node's `vn`, by node index.
    vn: Vec<u64>,
    /// Decay starts seen.
    decays: usize,
    /// The node decaying now.
    node: usize,
    /// The pool detached last (pages).
    pages: Option<u64>,
    /// Per task (pid): the node its `purge_vmap_node` runs for.
    workers: HashMap<u32, usize>,
    /// Whether the purge since the last purge event showed its steps.
    pub(super) seen: bool,
}

/// A replay line a probe event becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Line {
    /// A purge step.
    Step(PurgeStep),
    /// `purge node N`.
    Node(usize),
}

impl Steps {
    /// The line `p`, recorded by task `pid` on a machine of `nodes` vmap
    /// nodes, becomes; `None` for an event that changes nothing here.
    ///
    /// # Errors
    /// A node's `vn` that changed, a node or pool out of range, or an
    /// attach with no detach before it.
    pub(super) fn line(
        &mut self,
        p: Probe,
        pid: u32,
        nodes: usize,
    ) -> Result<Option<Line>, String> {
        let nodes = nodes.max(1);
        let node_index = |n: u64| {
            usize::try_from(n)
                .ok()
                .filter(|&n| n < nodes)
                .ok_or_else(|| format!("node {n} out of range: the machine has {nodes}"))
        };
        self.seen = true;
        let line = match p {
            Probe::DecayStart { vn, full } => {
                let node = self.decays % nodes;
                self.decays += 1;
                match self.vn.get(node) {
                    Some(&known) if known != vn => {
                        return Err(format!(
                            "vmap_decay_start of node {node} at vn={vn:#x}, not {known:#x}"
                        ))
                    }
                    Some(_) => {}
                    None => self.vn.push(vn),
                }
                (self.node, self.pages) = (node, None);
                (node == 0).then_some(Line::Step(PurgeStep::Start { full }))
            }
            Probe::Detach { index } if index < 256 => {
                self.pages = Some(index + 1);
                Some(Line::Step(PurgeStep::Detach {
                    node: self.node,
                    pages: index + 1,
                }))
            }
            Probe::Detach { index } => return Err(format!("pool {index} out of range (0-255)")),
            Probe::Attach => {
                let pages = self
                    .pages
                    .take()
                    .ok_or("vmap_pool_attach with no detach before it")?;
                Some(Line::Step(PurgeStep::Attach {
                    node: self.node,
                    pages,
                }))
            }
            Probe::Reclaim => Some(Line::Step(PurgeStep::Reclaim { node: self.node })),
            Probe::DecayEnd { node } => {
                node_index(node)?;
                None
            }
            Probe::Take { node } => Some(Line::Step(PurgeStep::Take {
                node: node_index(node)?,
            })),
            Probe::NodeStart { work } => {
                let node = (self.vn.iter().enumerate())
                    .filter(|&(_, &vn)| vn <= work)
                    .max_by_key(|&(_, &vn)| vn)
                    .map(|(n, _)| n)
                    .ok_or_else(|| format!("purge_vmap_node({work:#x}) of no known node"))?;
                self.workers.insert(pid, node);
                None
            }
            Probe::NodeDone => self.workers.remove(&pid).map(Line::Node),
        };
        Ok(line)
    }
}
