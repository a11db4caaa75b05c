//! dagr's core: the model and the pure logic around it. No I/O, no async.

pub mod units;
