//! The advice: the samples of the next [`ADVISE_AHEAD`] positions of every rank, and of the
//! first [`ADVISE_BEHIND`] positions still unread behind its cursor (slower workers' next
//! reads), asked into memory (page cache, or samples read ahead) where their shards are on
//! disk.

use super::cursor::Cursor;
use super::{Inner, ADVISE_AHEAD, ADVISE_BEHIND, NO_POSITION};
use crate::cache::Advice;
use crate::plan::RankOrder;
use std::sync::atomic::Ordering::Relaxed;

impl Inner {
    /// Keeps the samples of the next [`ADVISE_AHEAD`] positions of every rank advised (into
    /// the page cache, where their shards are on disk), each position once, continuing into
    /// the next epoch near the end of one. Cheap: a few lookups and one `posix_fadvise` per
    /// position, so it runs more often than a plan.
    ///
    /// Before those, the first [`ADVISE_BEHIND`] positions behind the cursor that are still
    /// unread, from the lowest on (see [`Inner::advise_behind`]).
    ///
    /// When the room for samples read ahead runs out ([`Advice::Full`]), the ranks after the
    /// one that filled it get nothing in that pass; the next pass starts with the rank after
    /// the one that filled it, so on a node of many ranks no rank keeps the room to itself
    /// (also when the others had no position yet when it filled the room).
    pub(super) fn advise(&self) {
        let ranks = self.cursors.len();
        let first = (self.advise_first.load(Relaxed) as usize).min(ranks.saturating_sub(1));
        // The last rank in this pass that got advice until the room ran out.
        let mut filled_by = None;
        for r in (first..ranks).chain(0..first) {
            let c = &self.cursors[r];
            c.advice_due.store(false, Relaxed);
            let pos = c.position.load(Relaxed);
            if pos == NO_POSITION {
                continue;
            }
            let epoch = c.epoch.load(Relaxed);
            let (behind_full, behind_started) = self.advise_behind(r, c, epoch, pos);
            if behind_full {
                // No room left for this rank's positions ahead either: the next pass comes
                // after as many reads as a full window's would, from where the last stopped.
                c.advised_to
                    .store(pos.saturating_add(ADVISE_AHEAD), Relaxed);
                if behind_started {
                    filled_by = Some(r);
                }
                continue;
            }
            let mut mark = c.advised.lock().unwrap_or_else(|e| e.into_inner());
            // Positions in the cursor's epoch (for the distance to the next one's).
            let mut epoch_len = None;
            let mut len_of_epoch = || {
                *epoch_len.get_or_insert_with(|| {
                    self.orders
                        .epoch(epoch)
                        .ok()
                        .and_then(|o| o.get(r).map(|o| o.len() as u64))
                        .unwrap_or(0)
                })
            };
            // A mark the last pass left (one past its last position) or nearer.
            let near = |ahead: u64| ahead <= ADVISE_AHEAD + 1;
            let (mut e, mut p) = match *mark {
                (e, p) if e == epoch && p > pos && near(p - pos) => (e, p),
                (e, p)
                    if e == epoch.saturating_add(1)
                        && near(len_of_epoch().saturating_sub(pos).saturating_add(p)) =>
                {
                    (e, p)
                }
                _ => (epoch, pos.saturating_add(1)),
            };
            let mut orders: Option<(u64, Option<RankOrder>)> = None;
            let (mut full, mut started) = (false, false);
            loop {
                let ahead = if e == epoch {
                    p.saturating_sub(pos)
                } else {
                    // Positions left in the cursor's epoch, then those of the next one.
                    len_of_epoch().saturating_sub(pos).saturating_add(p)
                };
                if ahead > ADVISE_AHEAD || e > epoch.saturating_add(1) {
                    break;
                }
                if self.opts.last_epoch.is_some_and(|last| e > last) {
                    break;
                }
                if orders.as_ref().is_none_or(|(oe, _)| *oe != e) {
                    let o = self.orders.epoch(e).ok().and_then(|o| o.get(r).cloned());
                    orders = Some((e, o));
                }
                let Some((_, Some(order))) = &orders else {
                    break;
                };
                let Some(sample) = usize::try_from(p).ok().and_then(|i| order.get(i)) else {
                    e += 1;
                    p = 0;
                    continue;
                };
                match self.advise_sample(sample) {
                    Some(s) => started |= s,
                    // This position again on the next pass.
                    None => {
                        full = true;
                        break;
                    }
                }
                p += 1;
            }
            *mark = (e, p);
            // When full, the next pass comes after as many reads as a full window's would
            // (not on the next read), from where this one stopped.
            let to = if full {
                pos.saturating_add(ADVISE_AHEAD)
            } else if e == epoch {
                p
            } else {
                u64::MAX
            };
            c.advised_to.store(to, Relaxed);
            if full && (started || behind_started) {
                filled_by = Some(r);
            }
        }
        // A pass in which no rank got advice keeps the order: its first rank was not served.
        if let Some(r) = filled_by {
            self.advise_first.store(((r + 1) % ranks) as u64, Relaxed);
        }
    }

    /// Advises the samples of the first [`ADVISE_BEHIND`] unread positions of rank `r`'s
    /// epoch from its lowest unread one up to its cursor `pos`: what its slower workers read
    /// next. Each position once (the cursor's `behind` mark says how far earlier passes got);
    /// positions read in the meantime are passed over. Returns whether the room for samples
    /// read ahead ran out, and whether any advice started.
    fn advise_behind(&self, r: usize, c: &Cursor, epoch: u64, pos: u64) -> (bool, bool) {
        let low = c.advance_low(pos);
        if low >= pos {
            return (false, false);
        }
        let mut mark = c.behind.lock().unwrap_or_else(|e| e.into_inner());
        let from = match *mark {
            (e, p) if e == epoch && p > low => p.min(pos),
            _ => low,
        };
        let want = ADVISE_BEHIND.saturating_sub(c.count_unread(low, from));
        if want == 0 {
            return (false, false);
        }
        let Some(order) = self
            .orders
            .epoch(epoch)
            .ok()
            .and_then(|o| o.get(r).cloned())
        else {
            return (false, false);
        };
        let unread = c.unread_between(from, pos, usize::try_from(want).unwrap_or(usize::MAX));
        // Past every unread position seen, unless the room runs out first.
        let mut reached = if (unread.len() as u64) < want {
            pos
        } else {
            unread.last().map_or(pos, |p| p.saturating_add(1))
        };
        let (mut full, mut started) = (false, false);
        for &p in &unread {
            let Some(sample) = usize::try_from(p).ok().and_then(|i| order.get(i)) else {
                break;
            };
            match self.advise_sample(sample) {
                Some(s) => started |= s,
                None => {
                    full = true;
                    reached = p;
                    break;
                }
            }
        }
        *mark = (epoch, reached);
        (full, started)
    }

    /// Advises one sample: whether a read ahead started, or `None` when there was no room.
    fn advise_sample(&self, sample: u64) -> Option<bool> {
        match self.shards.advise(sample) {
            Advice::Started => {
                self.advised.fetch_add(1, Relaxed);
                Some(true)
            }
            Advice::Skipped => Some(false),
            Advice::Full => None,
        }
    }
}
