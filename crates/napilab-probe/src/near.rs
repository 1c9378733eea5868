//! Matching an item of one sample with the same item of the next.

/// The element of `items` that `is` accepts, tried first at `index`: the kernel lists
/// IRQ lines, devices and queues in the same order from one sample to the next, so
/// matching another sample's item by position keeps a pass over thousands of them
/// linear instead of quadratic.
pub(crate) fn find_near<T>(items: &[T], index: usize, is: impl Fn(&T) -> bool) -> Option<&T> {
    match items.get(index) {
        Some(item) if is(item) => Some(item),
        _ => items.iter().find(|item| is(item)),
    }
}
