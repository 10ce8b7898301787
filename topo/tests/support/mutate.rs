//! Text mutations of topology files for the property tests that check nothing panics on bad
//! input (shared by the topo and planner tests).

/// One edit of the text at a byte offset (taken modulo the length, moved back to a character
/// boundary).
#[allow(dead_code)] // each test crate draws from its own subset
#[derive(Debug, Clone)]
pub enum Mutation {
    Delete(usize, usize),
    Insert(usize, String),
    Replace(usize, String),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn boundary(s: &str, i: usize) -> usize {
    let mut i = i % (s.len() + 1);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub fn apply(text: &str, muts: &[Mutation]) -> String {
    let mut s = text.to_string();
    for m in muts {
        match m {
            Mutation::Delete(a, n) => {
                let a = boundary(&s, *a);
                let b = boundary(&s, (a + n).min(s.len()));
                s.replace_range(a..b.max(a), "");
            }
            Mutation::Insert(a, t) => {
                let a = boundary(&s, *a);
                s.insert_str(a, t);
            }
            Mutation::Replace(a, t) => {
                let a = boundary(&s, *a);
                let b = boundary(&s, (a + t.len()).min(s.len()));
                s.replace_range(a..b.max(a), t);
            }
            Mutation::Truncate(a) => {
                let a = boundary(&s, *a);
                s.truncate(a);
            }
            Mutation::Duplicate(a, n) => {
                let a = boundary(&s, *a);
                let b = boundary(&s, (a + n).min(s.len()));
                let piece = s[a..b.max(a)].to_string();
                s.insert_str(a, &piece);
            }
        }
    }
    s
}
