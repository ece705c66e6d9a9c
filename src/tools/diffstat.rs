//! Line counts of a file change (`lines_added`, `lines_removed` in the file tools'
//! `detail`, see the table in the parent module): the size of a shortest line diff
//! between the old and the new bytes, as `git diff --numstat` reports it.
//!
//! Lines end after each `\n` (a last line without one is a line too, and differs from
//! the same text with one). The common prefix and suffix are cut first; the middle is
//! diffed with Myers' greedy algorithm (O((N+M)·D)) while the edit distance stays within
//! [`MAX_EDITS`]; beyond that every middle line counts as removed and added (an upper
//! bound, reached only by rewrites of thousands of lines).

/// Largest edit distance searched exactly.
const MAX_EDITS: usize = 2048;

/// `(added, removed)` lines from `old` (absent: a new file) to `new` (absent: deleted).
pub(crate) fn line_counts(old: Option<&[u8]>, new: Option<&[u8]>) -> (u64, u64) {
    let a = lines(old.unwrap_or_default());
    let b = lines(new.unwrap_or_default());
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[prefix..], &b[prefix..]);
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[..a.len() - suffix], &b[..b.len() - suffix]);
    let (n, m) = (a.len() as i64, b.len() as i64);
    match edit_distance(a, b) {
        // d = removed + added, and removed − added = n − m.
        Some(d) => {
            let d = d as i64;
            (((d + m - n) / 2) as u64, ((d + n - m) / 2) as u64)
        }
        None => (m as u64, n as u64),
    }
}

fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&c| c == b'\n').collect()
}

/// Myers' forward search: the number of insertions plus deletions turning `a` into `b`,
/// or `None` when it exceeds [`MAX_EDITS`].
fn edit_distance(a: &[&[u8]], b: &[&[u8]]) -> Option<usize> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    if n == 0 || m == 0 {
        return Some((n + m) as usize);
    }
    let max = (n + m).min(MAX_EDITS as isize);
    let off = max + 1;
    let mut v = vec![0isize; (2 * max + 3) as usize];
    for d in 0..=max {
        let mut k = -d;
        while k <= d {
            let i = (k + off) as usize;
            let mut x = if k == -d || (k != d && v[i - 1] < v[i + 1]) {
                v[i + 1]
            } else {
                v[i - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[i] = x;
            if x >= n && y >= m {
                return Some(d as usize);
            }
            k += 2;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(a: &str, b: &str) -> (u64, u64) {
        line_counts(Some(a.as_bytes()), Some(b.as_bytes()))
    }

    #[test]
    fn counts_match_a_shortest_diff() {
        assert_eq!(counts("a\nb\nc\n", "a\nb\nc\n"), (0, 0));
        assert_eq!(counts("a\nb\nc\n", "a\nB\nc\n"), (1, 1));
        assert_eq!(counts("a\nb\nc\n", "a\nc\n"), (0, 1));
        assert_eq!(counts("a\nc\n", "a\nb1\nb2\nc\n"), (2, 0));
        assert_eq!(counts("x\na\nb\ny\n", "a\nb\nz\n"), (1, 2));
        // Moving a line is one removal and one addition.
        assert_eq!(counts("1\n2\n3\n4\n", "2\n3\n4\n1\n"), (1, 1));
        // A lost final newline changes the last line.
        assert_eq!(counts("a\nb\n", "a\nb"), (1, 1));
        assert_eq!(line_counts(None, Some(b"a\nb\nc")), (3, 0));
        assert_eq!(line_counts(Some(b"a\nb\n"), None), (0, 2));
        assert_eq!(line_counts(None, Some(b"")), (0, 0));
    }

    #[test]
    fn huge_rewrites_are_bounded() {
        let a: String = (0..6000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..6000).map(|i| format!("b{i}\n")).collect();
        assert_eq!(counts(&a, &b), (6000, 6000));
        let mut c = a.clone();
        c.push_str("tail\n");
        assert_eq!(counts(&a, &c), (1, 0));
    }
}
