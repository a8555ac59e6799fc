//! Small JSON helpers shared by sources and operators.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// The value at a dotted path (`a.b.c`) of a JSON document.
pub fn field<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, part| v.get(part))
}

/// Puts `bytes` into `line` as `field` (text), or as `<field>_hex` when
/// they are not UTF-8: every byte kept, text readable.
pub fn put_bytes(line: &mut serde_json::Map<String, Value>, field: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => line.insert(field.to_owned(), text.into()),
        Err(_) => line.insert(format!("{field}_hex"), hex::encode(bytes).into()),
    };
}

/// A TOML value as JSON.
pub fn from_toml(v: &toml::Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Reads the values at a few dotted paths out of JSON documents in one pass,
/// building only those values: the rest of a document is checked and
/// skipped, never turned into a [`Value`]. What [`field`] finds in the
/// parsed document, [`pick`](Picker::pick) finds in its text.
#[derive(Debug, Clone, Default)]
pub struct Picker {
    root: Node,
    paths: usize,
}

/// One object member on the way to the wanted paths.
#[derive(Debug, Clone, Default)]
struct Node {
    /// Which paths end here (the whole value is built).
    ends: Vec<usize>,
    /// The paths going deeper, by member name.
    members: Vec<(String, Node)>,
}

impl Picker {
    /// A picker of `paths` (dotted, as for [`field`]); their values come
    /// back in this order.
    pub fn new<S: AsRef<str>>(paths: &[S]) -> Self {
        let mut root = Node::default();
        for (i, path) in paths.iter().enumerate() {
            let node = path.as_ref().split('.').fold(&mut root, |node, part| {
                let at = match node.members.iter().position(|(name, _)| name == part) {
                    Some(at) => at,
                    None => {
                        node.members.push((part.to_owned(), Node::default()));
                        node.members.len() - 1
                    }
                };
                &mut node.members[at].1
            });
            node.ends.push(i);
        }
        Self {
            root,
            paths: paths.len(),
        }
    }

    /// The value at each path of the document `text` (`None` where it has
    /// none), or why `text` is not one JSON document.
    pub fn pick(&self, text: &[u8]) -> Result<Vec<Option<Value>>, serde_json::Error> {
        let mut out = vec![None; self.paths];
        let mut de = serde_json::Deserializer::from_slice(text);
        Seed {
            node: &self.root,
            out: &mut out,
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok(out)
    }
}

impl Node {
    /// Forgets the values of the paths that end at or under this node.
    fn clear(&self, out: &mut [Option<Value>]) {
        for &i in &self.ends {
            out[i] = None;
        }
        for (_, child) in &self.members {
            child.clear(out);
        }
    }
}

/// A value no path goes into. It is read through [`Seed`] all the same, not
/// skipped with `IgnoredAny`: that checks the value's grammar but not its
/// strings' UTF-8 and escapes, its numbers' range or its depth, which a
/// parse into a [`Value`] refuses.
static UNWANTED: Node = Node {
    ends: Vec::new(),
    members: Vec::new(),
};

/// Reads the value under `node`, writing the wanted ones into `out`.
struct Seed<'a> {
    node: &'a Node,
    out: &'a mut [Option<Value>],
}

impl Seed<'_> {
    /// A value some path ends at: built whole, and the deeper paths read
    /// from it.
    fn keep(node: &Node, value: Value, out: &mut [Option<Value>]) {
        for (name, child) in &node.members {
            if let Some(v) = value.get(name) {
                Self::keep(child, v.clone(), out);
            }
        }
        if let Some((&last, others)) = node.ends.split_last() {
            for &i in others {
                out[i] = Some(value.clone());
            }
            out[last] = Some(value);
        }
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.node.ends.is_empty() {
            d.deserialize_any(self)
        } else {
            let value = <Value as serde::Deserialize>::deserialize(d)?;
            Self::keep(self.node, value, self.out);
            Ok(())
        }
    }
}

/// Which member of a node a key names.
struct Member<'a>(&'a Node);

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Member<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object member's name")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.members.iter().position(|(name, _)| name == key))
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(member) = map.next_key_seed(Member(self.node))? {
            let node = member.map_or(&UNWANTED, |at| &self.node.members[at].1);
            // A repeated member replaces the earlier one, as in a parsed
            // document.
            node.clear(self.out);
            map.next_value_seed(Seed {
                node,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Seed {
                node: &UNWANTED,
                out: &mut *self.out,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-c\"\\\\]{0,3}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c]", inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the document and paths, picking finds what `field`
        /// finds in the parsed document.
        #[test]
        fn picks_what_field_finds(doc in json(), paths in prop::collection::vec("[a-c](\\.[a-c]){0,2}", 0..5)) {
            let text = serde_json::to_vec(&doc).unwrap();
            let picked = Picker::new(&paths).pick(&text).unwrap();
            let expected: Vec<_> = paths.iter().map(|p| field(&doc, p).cloned()).collect();
            prop_assert_eq!(picked, expected);
        }
    }

    #[test]
    fn a_repeated_member_keeps_its_last_value_as_parsing_does() {
        let text = r#"{"a":1,"b":{"c":2},"a":3,"b":{"d":4}}"#;
        let doc: Value = serde_json::from_str(text).unwrap();
        let paths = ["a", "b.c", "b.d"];
        let expected: Vec<_> = paths.iter().map(|p| field(&doc, p).cloned()).collect();
        assert_eq!(Picker::new(&paths).pick(text.as_bytes()).unwrap(), expected);
        assert_eq!(expected, [Some(Value::from(3)), None, Some(Value::from(4))]);
    }

    #[test]
    fn text_that_is_not_one_document_is_refused() {
        let p = Picker::new(&["a"]);
        let deep = format!("{{\"a\":1,\"x\":{}{}}}", "[".repeat(200), "]".repeat(200));
        let bad: [&[u8]; 9] = [
            b"{\"a\":1",
            b"{\"a\":1} x",
            b"nope",
            b"",
            b"{\"b\":[1,}",
            b"{\"a\":1,\"x\":\"\xff\"}",
            br#"{"a":1,"x":["\ud800"]}"#,
            br#"{"a":1,"x":1e400}"#,
            deep.as_bytes(),
        ];
        for text in bad {
            assert!(
                serde_json::from_slice::<Value>(text).is_err(),
                "a parse refuses it too"
            );
            assert!(p.pick(text).is_err(), "{}", String::from_utf8_lossy(text));
        }
        assert_eq!(p.pick(b" 7 ").unwrap(), vec![None]);
    }
}
