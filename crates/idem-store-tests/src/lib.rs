//! Store contract suite (scaffold: being written).
