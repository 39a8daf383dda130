//! Inode numbers computed from what a node is, never stored.
//!
//! A mounted dataset can hold hundreds of millions of files; keeping a table from inode to
//! file would cost memory proportional to the files. Instead an inode number *is* the file's
//! coordinates packed into 64 bits, so `lookup` builds it from a parsed name and every later
//! request decodes it back with a few shifts:
//!
//! ```text
//! bits 63..60  kind
//! sample file: kind=SampleFile | 0 (12) | sample id (40) | column (8)
//! epoch dir:   kind=EpochDir | local rank (8) | epoch (12) | 0 (40)
//! rank dir:    kind=RankDir  | local rank (8) | 0 (52)
//! fixed:       kind=Fixed, low bits 1..=5 (1 is the FUSE root)
//! ```
//! A file in a rank folder (`rank-R/epoch-E/NNNNNNNN.COLUMN.EXT`) is the *sample file* it
//! names: one inode per sample column wherever it appears, so the kernel's page cache holds
//! its bytes once and serves them again in every later epoch and under `samples/` (the names
//! are hard links to it). Kind 3 (the rank files of earlier versions) is no longer handed out.
//!
//! Anything beyond these widths (more than 256 local ranks, 4096 epochs, 2^32 positions per
//! rank and epoch, 2^40 samples, 256 columns) cannot be named and is reported as missing.

/// An inode number as the kernel sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ino(pub u64);

/// Local rank index on this node (0 .. ranks served), not the global rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalRank(pub u32);

/// Epoch number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Epoch(pub u64);

/// Position of a sample in one rank's read order for one epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position(pub u64);

/// Global sample id (streams numbered one after the other).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleId(pub u64);

/// Index of a column in the sample's column list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ColumnNo(pub u32);

/// The fixed nodes of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fixed {
    /// The mount root.
    Root,
    /// `index.json`.
    IndexJson,
    /// `samples/`.
    SamplesDir,
    /// `.shardfs/`.
    ControlDir,
    /// `.shardfs/status.json`.
    StatusJson,
}

/// What an inode number designates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// One of the fixed nodes.
    Fixed(Fixed),
    /// `rank-R/`.
    RankDir(LocalRank),
    /// `rank-R/epoch-E/`.
    EpochDir(LocalRank, Epoch),
    /// One column of one sample: `samples/NNNNNNNN.COLUMN.EXT` and every rank folder name
    /// of that sample.
    SampleFile(SampleId, ColumnNo),
}

const KIND_SHIFT: u32 = 60;
const K_FIXED: u64 = 0;
const K_RANK_DIR: u64 = 1;
const K_EPOCH_DIR: u64 = 2;
const K_SAMPLE_FILE: u64 = 4;

/// Largest local rank index an inode can carry.
pub const MAX_LOCAL_RANKS: u32 = 1 << 8;
/// Epochs an inode can carry.
pub const MAX_EPOCHS: u64 = 1 << 12;
/// Positions per rank and epoch a name can carry.
pub const MAX_POSITIONS: u64 = 1 << 32;
/// Sample ids an inode can carry.
pub const MAX_SAMPLES: u64 = 1 << 40;
/// Columns per sample an inode can carry.
pub const MAX_COLUMNS: u32 = 1 << 8;

impl Node {
    /// Packs the node into an inode number, or `None` when a coordinate is too wide.
    pub fn ino(self) -> Option<Ino> {
        let v = match self {
            Node::Fixed(f) => match f {
                Fixed::Root => 1,
                Fixed::IndexJson => 2,
                Fixed::SamplesDir => 3,
                Fixed::ControlDir => 4,
                Fixed::StatusJson => 5,
            },
            Node::RankDir(r) => {
                if r.0 >= MAX_LOCAL_RANKS {
                    return None;
                }
                (K_RANK_DIR << KIND_SHIFT) | (u64::from(r.0) << 52)
            }
            Node::EpochDir(r, e) => {
                if r.0 >= MAX_LOCAL_RANKS || e.0 >= MAX_EPOCHS {
                    return None;
                }
                (K_EPOCH_DIR << KIND_SHIFT) | (u64::from(r.0) << 52) | (e.0 << 40)
            }
            Node::SampleFile(s, c) => {
                if s.0 >= MAX_SAMPLES || c.0 >= MAX_COLUMNS {
                    return None;
                }
                (K_SAMPLE_FILE << KIND_SHIFT) | (s.0 << 8) | u64::from(c.0)
            }
        };
        Some(Ino(v))
    }

    /// Decodes an inode number; `None` for numbers this scheme never hands out.
    pub fn from_ino(ino: Ino) -> Option<Node> {
        let v = ino.0;
        let rank = LocalRank(((v >> 52) & 0xff) as u32);
        let epoch = Epoch((v >> 40) & 0xfff);
        match v >> KIND_SHIFT {
            K_FIXED => Some(Node::Fixed(match v {
                1 => Fixed::Root,
                2 => Fixed::IndexJson,
                3 => Fixed::SamplesDir,
                4 => Fixed::ControlDir,
                5 => Fixed::StatusJson,
                _ => return None,
            })),
            K_RANK_DIR => Some(Node::RankDir(rank)),
            K_EPOCH_DIR => Some(Node::EpochDir(rank, epoch)),
            K_SAMPLE_FILE => Some(Node::SampleFile(
                SampleId((v >> 8) & (MAX_SAMPLES - 1)),
                ColumnNo((v & 0xff) as u32),
            )),
            _ => None,
        }
    }

    /// Whether the node is a directory.
    pub fn is_dir(self) -> bool {
        matches!(
            self,
            Node::Fixed(Fixed::Root | Fixed::SamplesDir | Fixed::ControlDir)
                | Node::RankDir(_)
                | Node::EpochDir(..)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sample_files_round_trip(s in 0u64..(1u64 << 40), c in 0u32..256) {
            let n = Node::SampleFile(SampleId(s), ColumnNo(c));
            let ino = n.ino().unwrap();
            prop_assert!(ino.0 > 5);
            prop_assert_eq!(Node::from_ino(ino), Some(n));
        }
    }

    #[test]
    fn dirs_and_fixed_round_trip_and_root_is_one() {
        assert_eq!(Node::Fixed(Fixed::Root).ino(), Some(Ino(1)));
        for n in [
            Node::Fixed(Fixed::IndexJson),
            Node::Fixed(Fixed::SamplesDir),
            Node::Fixed(Fixed::ControlDir),
            Node::Fixed(Fixed::StatusJson),
            Node::RankDir(LocalRank(255)),
            Node::EpochDir(LocalRank(3), Epoch(4095)),
        ] {
            assert_eq!(Node::from_ino(n.ino().unwrap()), Some(n));
        }
        assert_eq!(Node::from_ino(Ino(0)), None);
        assert_eq!(Node::from_ino(Ino(6)), None);
        assert_eq!(Node::EpochDir(LocalRank(0), Epoch(4096)).ino(), None);
        assert_eq!(Node::SampleFile(SampleId(1 << 40), ColumnNo(0)).ino(), None);
    }
}
