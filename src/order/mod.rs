//! `order`: StreamingDataset's sample plan, computed exactly. Pure: plain numbers in, ids out.
