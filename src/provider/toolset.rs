//! A tool offered to the model ([`ToolSpec`]) and the tools of a request as one shared,
//! interned value (spec `providers.md` §6.1): every request of a turn, and every turn of
//! the same workspace mode, offers the same tool schemas (tens of KiB of JSON). A
//! [`Tools`] is a reference-counted list; lists of equal content share one instance (the
//! last [`KEPT`] distinct lists are kept), and an instance keeps the JSON texts rendered
//! from it ([`Tools::rendered`]: a protocol's `tools` array, the plain serialization the
//! diagnostics hash), so a schema set is lowered and serialized once per process instead
//! of once per request.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A tool offered to the model: name, description, JSON Schema of the parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name (e.g. `bash`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema (`{"type":"object","properties":{…},"required":[…]}`).
    pub parameters: Value,
}

/// How many distinct tool lists stay interned (a few permission modes and roles, with
/// and without client or MCP tools).
pub const KEPT: usize = 16;

/// The tools offered in a request: a shared list, dereferencing to `[ToolSpec]`.
/// Serialized as the plain list. Built by `From<Vec<ToolSpec>>`, which returns the
/// interned instance of an equal list when one is kept.
#[derive(Clone)]
pub struct Tools(Arc<Set>);

struct Set {
    specs: Vec<ToolSpec>,
    /// JSON texts rendered from `specs`, by the renderer's key.
    rendered: parking_lot::Mutex<Vec<Rendered>>,
}

/// A JSON text rendered from a list and the key of its renderer.
type Rendered = (&'static str, Arc<[u8]>);

/// The interned lists, most recently used first.
static INTERNED: parking_lot::Mutex<Vec<Arc<Set>>> = parking_lot::const_mutex(Vec::new());

impl Tools {
    /// The JSON text `render` makes of these tools, rendered once per instance and `key`
    /// (a renderer is a pure function of the list: its key names it, e.g.
    /// `"openai-compatible"` for that protocol's `tools` array).
    pub fn rendered(
        &self,
        key: &'static str,
        render: impl FnOnce(&[ToolSpec]) -> Vec<u8>,
    ) -> Arc<[u8]> {
        let mut done = self.0.rendered.lock();
        if let Some((_, text)) = done.iter().find(|(k, _)| *k == key) {
            return text.clone();
        }
        let text: Arc<[u8]> = render(&self.0.specs).into();
        done.push((key, text.clone()));
        text
    }

    /// `serde_json::to_vec` of the list (rendered once).
    pub fn plain_json(&self) -> Arc<[u8]> {
        self.rendered("plain", |specs| {
            serde_json::to_vec(specs).unwrap_or_default()
        })
    }

    /// Whether two values are the same instance (then equal without comparing).
    pub fn same(&self, other: &Tools) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// `self` followed by `extras`, interned. A join of the same instance with equal
    /// extras made before (the last [`KEPT`] are kept) is returned as is: only the
    /// extras, usually a few, are compared, not the whole list.
    pub fn joined(&self, extras: Vec<ToolSpec>) -> Tools {
        static JOINED: parking_lot::Mutex<Vec<(Tools, Vec<ToolSpec>, Tools)>> =
            parking_lot::const_mutex(Vec::new());
        if extras.is_empty() {
            return self.clone();
        }
        let mut joined = JOINED.lock();
        if let Some(i) = joined
            .iter()
            .position(|(base, e, _)| base.same(self) && *e == extras)
        {
            let hit = joined.remove(i);
            let tools = hit.2.clone();
            joined.insert(0, hit);
            return tools;
        }
        let mut all = Vec::with_capacity(self.len() + extras.len());
        all.extend_from_slice(self);
        all.extend_from_slice(&extras);
        let tools = Tools::from(all);
        joined.truncate(KEPT - 1);
        joined.insert(0, (self.clone(), extras, tools.clone()));
        tools
    }
}

impl From<Vec<ToolSpec>> for Tools {
    fn from(specs: Vec<ToolSpec>) -> Self {
        let mut interned = INTERNED.lock();
        if let Some(i) = interned.iter().position(|s| s.specs == specs) {
            let set = interned.remove(i);
            interned.insert(0, set.clone());
            return Tools(set);
        }
        let set = Arc::new(Set {
            specs,
            rendered: Default::default(),
        });
        interned.truncate(KEPT - 1);
        interned.insert(0, set.clone());
        Tools(set)
    }
}

impl Default for Tools {
    fn default() -> Self {
        Tools::from(Vec::new())
    }
}

impl std::ops::Deref for Tools {
    type Target = [ToolSpec];

    fn deref(&self) -> &[ToolSpec] {
        &self.0.specs
    }
}

impl PartialEq for Tools {
    fn eq(&self, other: &Tools) -> bool {
        self.same(other) || self.0.specs == other.0.specs
    }
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.specs.fmt(f)
    }
}

impl Serialize for Tools {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.specs.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Tools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<ToolSpec>::deserialize(d).map(Tools::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        }
    }

    /// The tests intern lists of their own, one test at a time (one pushes the others'
    /// out of the kept ones).
    static SERIAL: parking_lot::Mutex<()> = parking_lot::const_mutex(());

    #[test]
    fn equal_lists_share_one_instance_and_its_renderings() {
        let _serial = SERIAL.lock();
        let a = Tools::from(vec![spec("interned_a"), spec("interned_b")]);
        let b = Tools::from(vec![spec("interned_a"), spec("interned_b")]);
        assert!(a.same(&b));
        let mut renders = 0;
        for t in [&a, &b] {
            let text = t.rendered("test", |s| {
                renders += 1;
                serde_json::to_vec(s).unwrap()
            });
            assert_eq!(&text[..], &serde_json::to_vec(&a[..]).unwrap()[..]);
        }
        assert_eq!(renders, 1);
        assert_eq!(
            &a.plain_json()[..],
            &serde_json::to_vec(&a[..]).unwrap()[..]
        );
        let other = Tools::from(vec![spec("interned_a")]);
        assert!(!other.same(&a));
        assert_ne!(other, a);
        assert_eq!(a, b);
    }

    #[test]
    fn a_join_is_the_concatenation_and_equal_joins_share_it() {
        let _serial = SERIAL.lock();
        let base = Tools::from(vec![spec("joined_a"), spec("joined_b")]);
        assert!(base.joined(vec![]).same(&base));
        let one = base.joined(vec![spec("joined_x")]);
        let names: Vec<&str> = one.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["joined_a", "joined_b", "joined_x"]);
        assert!(base.joined(vec![spec("joined_x")]).same(&one));
        assert_eq!(
            Tools::from(vec![spec("joined_a"), spec("joined_b"), spec("joined_x")]),
            one
        );
        let other = base.joined(vec![spec("joined_y")]);
        assert_eq!(other[2].name, "joined_y");
        assert!(!other.same(&one));
    }

    #[test]
    fn a_list_pushed_out_of_the_interned_ones_is_still_whole() {
        let _serial = SERIAL.lock();
        let first = Tools::from(vec![spec("evicted_0")]);
        for i in 1..=KEPT + 2 {
            let _ = Tools::from(vec![spec(&format!("evicted_{i}"))]);
        }
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].name, "evicted_0");
        let again = Tools::from(vec![spec("evicted_0")]);
        assert_eq!(again, first);
        let json = serde_json::to_value(&again).unwrap();
        assert_eq!(json[0]["name"], "evicted_0");
        let back: Tools = serde_json::from_value(json).unwrap();
        assert_eq!(back, first);
    }
}
