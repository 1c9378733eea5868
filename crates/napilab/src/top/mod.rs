//! `napilab top`'s parts: the rows (model), the keys and the drawing (view); the
//! command itself is top_cmd.rs.

pub mod keys;
pub mod model;
pub mod view;
