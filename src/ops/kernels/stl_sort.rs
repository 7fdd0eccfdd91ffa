//! libstdc++'s unstable orderings (`std::sort`, `std::partial_sort`, `std::nth_element`), step
//! for step.
//!
//! PyTorch's CPU `topk` selects with `std::partial_sort` or `std::nth_element` + `std::sort`
//! (aten/src/ATen/native/TopKImpl.h). Those algorithms are not stable, so which of several equal
//! values is returned, and in what order, is decided by their exact sequence of comparisons and
//! moves. Detection heads feed `topk` indices into box decoding and NMS, so a tie resolved
//! differently changes the detections. These ports follow GCC's bits/stl_algo.h and stl_heap.h
//! (unchanged from GCC 4.9 to 13, which builds PyTorch's wheels) so ties come out as PyTorch's do.

/// libstdc++'s `_S_threshold`: ranges up to this length are left to insertion sort.
const THRESHOLD: usize = 16;

/// `std::__lg`: floor(log2(n)) for n > 0.
fn floor_log2(n: usize) -> usize {
    (usize::BITS - 1 - n.leading_zeros()) as usize
}

/// `std::sort(v.begin(), v.end(), less)`.
pub(crate) fn sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.is_empty() {
        return;
    }
    introsort_loop(v, 0, v.len(), floor_log2(v.len()) * 2, less);
    final_insertion_sort(v, less);
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), less)`: the `middle` least
/// elements, sorted, in `v[..middle]`.
pub(crate) fn partial_sort<T: Copy>(v: &mut [T], middle: usize, less: &impl Fn(&T, &T) -> bool) {
    let middle = middle.min(v.len());
    heap_select(v, 0, middle, v.len(), less);
    sort_heap(v, 0, middle, less);
}

/// `std::nth_element(v.begin(), v.begin() + nth, v.end(), less)`.
pub(crate) fn nth_element<T: Copy>(v: &mut [T], nth: usize, less: &impl Fn(&T, &T) -> bool) {
    if v.is_empty() || nth >= v.len() {
        return;
    }
    let (mut first, mut last) = (0, v.len());
    let mut depth_limit = floor_log2(v.len()) * 2;
    while last - first > 3 {
        if depth_limit == 0 {
            heap_select(v, first, nth + 1, last, less);
            // Place the nth largest element in its final position.
            v.swap(first, nth);
            return;
        }
        depth_limit -= 1;
        let cut = unguarded_partition_pivot(v, first, last, less);
        if cut <= nth {
            first = cut;
        } else {
            last = cut;
        }
    }
    insertion_sort(v, first, last, less);
}

fn introsort_loop<T: Copy>(
    v: &mut [T],
    first: usize,
    mut last: usize,
    mut depth_limit: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    while last - first > THRESHOLD {
        if depth_limit == 0 {
            // std::__partial_sort(first, last, last): heap sort of the range.
            heap_select(v, first, last, last, less);
            sort_heap(v, first, last, less);
            return;
        }
        depth_limit -= 1;
        let cut = unguarded_partition_pivot(v, first, last, less);
        introsort_loop(v, cut, last, depth_limit, less);
        last = cut;
    }
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n > THRESHOLD {
        insertion_sort(v, 0, THRESHOLD, less);
        for i in THRESHOLD..n {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, 0, n, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], first: usize, last: usize, less: &impl Fn(&T, &T) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if less(&v[i], &v[first]) {
            let val = v[i];
            v.copy_within(first..i, first + 1);
            v[first] = val;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

/// Moves `v[last]` left past the greater elements before it; some element to its left is not
/// greater (the caller guarantees it), so the walk needs no bounds test in C++. Here the index
/// cannot go below 0 either: `next` stops at such an element.
fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, less: &impl Fn(&T, &T) -> bool) {
    let val = v[last];
    while last > 0 && less(&val, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    result: usize,
    (a, b, c): (usize, usize, usize),
    less: &impl Fn(&T, &T) -> bool,
) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

/// Hoare partition of `v[first..last]` around `v[pivot]` (`pivot < first`). Both scans stop at
/// an element not less / not greater than the pivot, which exists on each side in C++'s
/// unguarded form; the bounds tests here only keep a broken comparator from running off.
fn unguarded_partition<T: Copy>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> usize {
    loop {
        while first < v.len() && less(&v[first], &v[pivot]) {
            first += 1;
        }
        last = last.saturating_sub(1);
        while last > 0 && less(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn unguarded_partition_pivot<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, (first + 1, mid, last - 1), less);
    unguarded_partition(v, first + 1, last, first, less)
}

fn heap_select<T: Copy>(
    v: &mut [T],
    first: usize,
    middle: usize,
    last: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    make_heap(v, first, middle, less);
    for i in middle..last {
        if less(&v[i], &v[first]) {
            pop_heap(v, first, middle, i, less);
        }
    }
}

fn make_heap<T: Copy>(v: &mut [T], first: usize, last: usize, less: &impl Fn(&T, &T) -> bool) {
    let len = last - first;
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[first + parent];
        adjust_heap(v, first, parent, len, value, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn pop_heap<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    result: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    let value = v[result];
    v[result] = v[first];
    adjust_heap(v, first, 0, last - first, value, less);
}

fn sort_heap<T: Copy>(v: &mut [T], first: usize, mut last: usize, less: &impl Fn(&T, &T) -> bool) {
    while last - first > 1 {
        last -= 1;
        pop_heap(v, first, last, last, less);
    }
}

fn adjust_heap<T: Copy>(
    v: &mut [T],
    first: usize,
    mut hole: usize,
    len: usize,
    value: T,
    less: &impl Fn(&T, &T) -> bool,
) {
    let top = hole;
    let mut child = hole;
    while len > 0 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&v[first + child], &v[first + child - 1]) {
            child -= 1;
        }
        v[first + hole] = v[first + child];
        hole = child;
    }
    if (len & 1) == 0 && len >= 2 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[first + hole] = v[first + child - 1];
        hole = child - 1;
    }
    // std::__push_heap(first, hole, top, value)
    while hole > top {
        let parent = (hole - 1) / 2;
        if !less(&v[first + parent], &value) {
            break;
        }
        v[first + hole] = v[first + parent];
        hole = parent;
    }
    v[first + hole] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator for the ordering tests (no dependency).
    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn orders_agree_with_the_standard_library_as_sets() {
        let mut seed = 7;
        for n in [0usize, 1, 2, 3, 5, 16, 17, 40, 300] {
            let data: Vec<u64> = (0..n).map(|_| lcg(&mut seed) % 7).collect();
            let mut want = data.clone();
            want.sort();
            let mut got = data.clone();
            sort(&mut got, &|a, b| a < b);
            assert_eq!(got, want, "sort n={n}");
            for k in [0, 1, n / 3, n.saturating_sub(1), n] {
                let mut p = data.clone();
                partial_sort(&mut p, k, &|a, b| a < b);
                assert_eq!(
                    &p[..k.min(n)],
                    &want[..k.min(n)],
                    "partial_sort n={n} k={k}"
                );
                if k < n {
                    let mut e = data.clone();
                    nth_element(&mut e, k, &|a, b| a < b);
                    assert_eq!(e[k], want[k], "nth_element n={n} k={k}");
                    assert!(e[..k].iter().all(|x| *x <= e[k]));
                    assert!(e[k + 1..].iter().all(|x| *x >= e[k]));
                }
            }
        }
    }
}
