//! The records a join keeps under one state entry (those of one key, side
//! and time), as one value:
//!
//! ```text
//! items := (joined:u8 len:u32 value)*
//! ```

/// A kept record: whether it joined (for outer joins), and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Whether a partner joined it.
    pub joined: bool,
    /// The record's value.
    pub value: Vec<u8>,
}

/// `items` as one state value.
pub fn encode(items: &[Item]) -> Vec<u8> {
    let mut v = Vec::with_capacity(items.iter().map(|i| 5 + i.value.len()).sum());
    for i in items {
        v.push(u8::from(i.joined));
        v.extend_from_slice(&(i.value.len() as u32).to_be_bytes());
        v.extend_from_slice(&i.value);
    }
    v
}

/// The items of a state value; `None` when it is not one.
pub fn decode(mut v: &[u8]) -> Option<Vec<Item>> {
    let mut items = Vec::new();
    while let [joined, rest @ ..] = v {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let value = rest.get(4..4 + len)?.to_vec();
        items.push(Item {
            joined: *joined == 1,
            value,
        });
        v = &rest[4 + len..];
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_round_trip_and_a_cut_value_is_refused() {
        let items = vec![
            Item {
                joined: true,
                value: b"a".to_vec(),
            },
            Item {
                joined: false,
                value: Vec::new(),
            },
        ];
        let v = encode(&items);
        assert_eq!(decode(&v), Some(items));
        assert_eq!(decode(&v[..v.len() - 3]), None);
        assert_eq!(decode(&[]), Some(Vec::new()));
    }
}
