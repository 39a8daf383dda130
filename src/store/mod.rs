//! `store`: not yet implemented (see DESIGN.md §2).
