//! The baseline of the order-0 pair measurements: a doubly-linked list
//! threaded through two vectors, as the buddy's free lists are. Shared by
//! `benches/buddy.rs` and `examples/pcp_pairs.rs` (included by path).

const NIL: u32 = u32::MAX;

/// A doubly-linked list of indices threaded through two vectors.
pub struct VecList {
    head: u32,
    next: Vec<u32>,
    prev: Vec<u32>,
}

impl VecList {
    pub fn new(n: u32) -> Self {
        let mut l = VecList {
            head: NIL,
            next: vec![NIL; n as usize],
            prev: vec![NIL; n as usize],
        };
        for i in (0..n).step_by(2) {
            l.push(i);
        }
        l
    }

    pub fn push(&mut self, i: u32) {
        self.prev[i as usize] = NIL;
        self.next[i as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = i;
        }
        self.head = i;
    }

    pub fn pop(&mut self) -> Option<u32> {
        let i = self.head;
        if i == NIL {
            return None;
        }
        let n = self.next[i as usize];
        if n != NIL {
            self.prev[n as usize] = NIL;
        }
        self.head = n;
        Some(i)
    }
}
