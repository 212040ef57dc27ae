//! Stable field ids for schemas converted from Delta (Unity Catalog and Delta Sharing).
//!
//! Iceberg consumers identify columns by field id, never by name or position, so an id may
//! never change for a column and never be given to another one. Iceberg REST tables carry
//! such ids. Delta tables converted by the Unity and Delta Sharing providers do not always:
//! only a table with column mapping states ids (`delta.columnMapping.id`, and for list
//! elements and map keys/values `delta.columnMapping.nested.ids`). Every other id is
//! assigned by the conversion, afresh on each load.
//!
//! A converted schema therefore says which of its ids came from upstream: the root carries
//! [`UPSTREAM_FIELD_IDS`], the list of ids the table itself fixed (empty when it fixed none).
//! [`stabilize`] turns such a schema into the one to store, given the schema stored before:
//!
//! - an id fixed upstream is kept as it is;
//! - any other field keeps the id the stored schema gave the field at the same path (field
//!   names from the root; a list's element, a map's key and value), unless its type changed
//!   in a way Iceberg does not allow (then it is a different column);
//! - fields seen for the first time get ids above the highest id ever assigned for the
//!   table, which the stored schema records as [`LAST_COLUMN_ID`], so an id dropped with its
//!   column is never handed out again.
//!
//! The result carries [`LAST_COLUMN_ID`] and no [`UPSTREAM_FIELD_IDS`]; its `schema-id` grows
//! by one whenever its fields differ from the stored schema's. A schema without
//! [`UPSTREAM_FIELD_IDS`] (an Iceberg table's own schema) is returned unchanged: its ids are
//! the upstream's to keep.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

/// Root key of a converted schema: the field ids the upstream table fixed.
pub const UPSTREAM_FIELD_IDS: &str = "upstream-field-ids";

/// Root key of a stored converted schema: the highest field id ever assigned for the table.
pub const LAST_COLUMN_ID: &str = "last-column-id";

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Step {
    Field(String),
    Element,
    Key,
    Value,
}

/// What a stored field was: its id and its type (a primitive name, or a nested kind).
#[derive(Debug, Clone)]
struct Prior {
    id: i64,
    ty: Shape,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    Primitive(String),
    Struct,
    List,
    Map,
    Other,
}

fn shape(ty: &Value) -> Shape {
    match ty {
        Value::String(s) => Shape::Primitive(s.trim().to_ascii_lowercase()),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("struct") => Shape::Struct,
            Some("list") => Shape::List,
            Some("map") => Shape::Map,
            _ => Shape::Other,
        },
        _ => Shape::Other,
    }
}

/// `decimal(P, S)` as `(P, S)`.
fn decimal(s: &str) -> Option<(u32, u32)> {
    let inner = s.strip_prefix("decimal(")?.strip_suffix(')')?;
    let (p, sc) = inner.split_once(',')?;
    Some((p.trim().parse().ok()?, sc.trim().parse().ok()?))
}

/// Whether a column of type `old` may keep its id as type `new` (Iceberg's type promotions).
fn compatible(old: &Shape, new: &Shape) -> bool {
    match (old, new) {
        (Shape::Primitive(a), Shape::Primitive(b)) => {
            a == b
                || matches!(
                    (a.as_str(), b.as_str()),
                    ("int", "long") | ("float", "double")
                )
                || matches!((decimal(a), decimal(b)), (Some((p1, s1)), Some((p2, s2))) if s1 == s2 && p2 >= p1)
        }
        (a, b) => a == b && *a != Shape::Other,
    }
}

/// The members of a list or map type: (id key, type key, path step) of each; none for any
/// other type. The one description of nested members both walks below use.
fn collection_members(obj: &Map<String, Value>) -> &'static [(&'static str, &'static str, Step)] {
    const LIST: &[(&str, &str, Step)] = &[("element-id", "element", Step::Element)];
    const MAP: &[(&str, &str, Step)] = &[
        ("key-id", "key", Step::Key),
        ("value-id", "value", Step::Value),
    ];
    match obj.get("type").and_then(Value::as_str) {
        Some("list") => LIST,
        Some("map") => MAP,
        _ => &[],
    }
}

/// Every field of a schema by path, and the highest id in it.
fn index(schema: &Value) -> (HashMap<Vec<Step>, Prior>, i64) {
    fn walk(ty: &Value, path: &mut Vec<Step>, out: &mut HashMap<Vec<Step>, Prior>, max: &mut i64) {
        let Some(obj) = ty.as_object() else { return };
        let mut member = |step: Step, id: Option<i64>, ty: Option<&Value>, path: &mut Vec<Step>| {
            let (Some(id), Some(ty)) = (id, ty) else {
                return;
            };
            *max = (*max).max(id);
            path.push(step);
            out.insert(path.clone(), Prior { id, ty: shape(ty) });
            walk(ty, path, out, max);
            path.pop();
        };
        match obj.get("type").and_then(Value::as_str) {
            Some("struct") => {
                for f in obj
                    .get("fields")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(name) = f.get("name").and_then(Value::as_str) {
                        member(
                            Step::Field(name.to_owned()),
                            f.get("id").and_then(Value::as_i64),
                            f.get("type"),
                            path,
                        );
                    }
                }
            }
            _ => {
                for (id_key, ty_key, step) in collection_members(obj) {
                    member(
                        step.clone(),
                        obj.get(*id_key).and_then(Value::as_i64),
                        obj.get(*ty_key),
                        path,
                    );
                }
            }
        }
    }
    let mut out = HashMap::new();
    let mut max = 0;
    walk(schema, &mut Vec::new(), &mut out, &mut max);
    (out, max)
}

/// The id assignment of one [`stabilize`] call.
struct Assign<'a> {
    prior: &'a HashMap<Vec<Step>, Prior>,
    pinned: &'a HashSet<i64>,
    used: HashSet<i64>,
    last: i64,
}

impl Assign<'_> {
    fn id(&mut self, path: &[Step], upstream_id: Option<i64>, ty: &Value) -> i64 {
        if let Some(id) = upstream_id.filter(|id| self.pinned.contains(id)) {
            self.used.insert(id);
            return id;
        }
        if let Some(p) = self.prior.get(path)
            && !self.pinned.contains(&p.id)
            && !self.used.contains(&p.id)
            && compatible(&p.ty, &shape(ty))
        {
            self.used.insert(p.id);
            return p.id;
        }
        self.last += 1;
        self.used.insert(self.last);
        self.last
    }

    /// Re-ids the members of a nested type breadth-first (its own members first, then
    /// theirs), as Iceberg assigns ids.
    fn nested(&mut self, ty: &mut Value, path: &mut Vec<Step>) {
        let Some(obj) = ty.as_object_mut() else {
            return;
        };
        match obj.get("type").and_then(Value::as_str) {
            Some("struct") => {
                let Some(Value::Array(fields)) = obj.get_mut("fields") else {
                    return;
                };
                for f in fields.iter_mut() {
                    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                    path.push(Step::Field(name.to_owned()));
                    let upstream = f.get("id").and_then(Value::as_i64);
                    let id = self.id(path, upstream, f.get("type").unwrap_or(&Value::Null));
                    if let Some(o) = f.as_object_mut() {
                        o.insert("id".into(), json!(id));
                    }
                    path.pop();
                }
                for f in fields.iter_mut() {
                    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                    path.push(Step::Field(name.to_owned()));
                    if let Some(t) = f.get_mut("type") {
                        self.nested(t, path);
                    }
                    path.pop();
                }
            }
            _ => {
                let keys = collection_members(obj);
                self.members(obj, path, keys);
            }
        }
    }

    fn members(
        &mut self,
        obj: &mut Map<String, Value>,
        path: &mut Vec<Step>,
        keys: &[(&str, &str, Step)],
    ) {
        for (id_key, ty_key, step) in keys {
            path.push(step.clone());
            let upstream = obj.get(*id_key).and_then(Value::as_i64);
            let id = self.id(path, upstream, obj.get(*ty_key).unwrap_or(&Value::Null));
            obj.insert((*id_key).to_owned(), json!(id));
            path.pop();
        }
        for (_, ty_key, step) in keys {
            path.push(step.clone());
            if let Some(t) = obj.get_mut(*ty_key) {
                self.nested(t, path);
            }
            path.pop();
        }
    }
}

/// The schema to store for a table whose upstream schema is `upstream`, given the schema
/// stored for it before (`None` for a new table). See the module documentation.
pub fn stabilize(stored: Option<&Value>, upstream: &Value) -> Value {
    let Some(pinned) = upstream.get(UPSTREAM_FIELD_IDS) else {
        return upstream.clone();
    };
    let pinned: HashSet<i64> = pinned
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    let stored = stored.filter(|s| s.get("fields").is_some_and(Value::is_array));
    let (prior, stored_max) = stored.map(index).unwrap_or_default();
    let recorded = stored
        .and_then(|s| s.get(LAST_COLUMN_ID))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let last = recorded
        .max(stored_max)
        .max(pinned.iter().copied().max().unwrap_or(0));
    let mut out = upstream.clone();
    let mut assign = Assign {
        prior: &prior,
        pinned: &pinned,
        used: HashSet::new(),
        last,
    };
    assign.nested(&mut out, &mut Vec::new());
    let last = assign.last;
    let schema_id = match stored {
        Some(s) => {
            let id = s.get("schema-id").and_then(Value::as_i64).unwrap_or(0);
            if s.get("fields") == out.get("fields") {
                id
            } else {
                id + 1
            }
        }
        None => out.get("schema-id").and_then(Value::as_i64).unwrap_or(0),
    };
    if let Some(o) = out.as_object_mut() {
        o.remove(UPSTREAM_FIELD_IDS);
        o.insert("schema-id".into(), json!(schema_id));
        o.insert(LAST_COLUMN_ID.into(), json!(last));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(id: i64, name: &str, ty: Value) -> Value {
        json!({"id": id, "name": name, "required": false, "type": ty})
    }

    /// A converted schema: fresh ids 1.. in order, as the providers assign them.
    fn converted(fields: Vec<Value>) -> Value {
        json!({"type": "struct", "schema-id": 0, "fields": fields, UPSTREAM_FIELD_IDS: []})
    }

    fn ids(schema: &Value) -> Vec<(String, i64)> {
        let (idx, _) = index(schema);
        let mut out: Vec<(String, i64)> = idx
            .into_iter()
            .map(|(path, p)| {
                let name = path
                    .iter()
                    .map(|s| match s {
                        Step::Field(n) => n.clone(),
                        Step::Element => "<element>".into(),
                        Step::Key => "<key>".into(),
                        Step::Value => "<value>".into(),
                    })
                    .collect::<Vec<_>>()
                    .join(".");
                (name, p.id)
            })
            .collect();
        out.sort();
        out
    }

    fn pairs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = v.iter().map(|(n, i)| ((*n).to_owned(), *i)).collect();
        out.sort();
        out
    }

    fn person(id: i64) -> Value {
        json!({"type": "struct", "fields": [field(id, "city", json!("string")),
            field(id + 1, "zip", json!("int"))]})
    }

    #[test]
    fn a_first_load_keeps_the_converted_ids_and_records_the_highest() {
        let up = converted(vec![
            field(1, "a", json!("long")),
            field(2, "addr", person(3)),
        ]);
        let s = stabilize(None, &up);
        assert_eq!(
            ids(&s),
            pairs(&[("a", 1), ("addr", 2), ("addr.city", 3), ("addr.zip", 4)])
        );
        assert_eq!(s[LAST_COLUMN_ID], 4);
        assert_eq!(s["schema-id"], 0);
        assert!(s.get(UPSTREAM_FIELD_IDS).is_none());
        // Reloading the same upstream schema changes nothing at all.
        assert_eq!(stabilize(Some(&s), &up), s);
    }

    #[test]
    fn adding_a_top_level_column_does_not_renumber_nested_fields() {
        let v1 = stabilize(
            None,
            &converted(vec![
                field(1, "a", json!("long")),
                field(2, "addr", person(3)),
            ]),
        );
        // The converter numbers afresh: the new column takes 2 and shifts everything after.
        let up = converted(vec![
            field(1, "a", json!("long")),
            field(2, "b", json!("string")),
            field(3, "addr", person(4)),
        ]);
        let v2 = stabilize(Some(&v1), &up);
        assert_eq!(
            ids(&v2),
            pairs(&[
                ("a", 1),
                ("addr", 2),
                ("addr.city", 3),
                ("addr.zip", 4),
                ("b", 5)
            ])
        );
        assert_eq!(v2[LAST_COLUMN_ID], 5);
        assert_eq!(v2["schema-id"], 1);
        // The upstream column order is kept.
        assert_eq!(v2["fields"][1]["name"], "b");
    }

    #[test]
    fn a_dropped_id_is_never_reused() {
        let v1 = stabilize(
            None,
            &converted(vec![
                field(1, "a", json!("long")),
                field(2, "b", json!("string")),
            ]),
        );
        let v2 = stabilize(Some(&v1), &converted(vec![field(1, "a", json!("long"))]));
        assert_eq!(ids(&v2), pairs(&[("a", 1)]));
        assert_eq!(v2[LAST_COLUMN_ID], 2, "the dropped id stays spent");
        let v3 = stabilize(
            Some(&v2),
            &converted(vec![
                field(1, "a", json!("long")),
                field(2, "c", json!("int")),
            ]),
        );
        assert_eq!(ids(&v3), pairs(&[("a", 1), ("c", 3)]));
        // A column dropped and added again under its old name is a new column.
        let v4 = stabilize(
            Some(&v3),
            &converted(vec![
                field(1, "a", json!("long")),
                field(2, "c", json!("int")),
                field(3, "b", json!("string")),
            ]),
        );
        assert_eq!(ids(&v4), pairs(&[("a", 1), ("b", 4), ("c", 3)]));
        assert_eq!(v4["schema-id"], 3);
    }

    #[test]
    fn reordering_keeps_every_id() {
        let v1 = stabilize(
            None,
            &converted(vec![
                field(1, "a", json!("long")),
                field(
                    2,
                    "tags",
                    json!({"type": "list", "element-id": 4,
                    "element": "string", "element-required": false}),
                ),
                field(3, "c", json!("date")),
            ]),
        );
        let up = converted(vec![
            field(1, "c", json!("date")),
            field(2, "a", json!("long")),
            field(
                3,
                "tags",
                json!({"type": "list", "element-id": 4,
                "element": "string", "element-required": false}),
            ),
        ]);
        let v2 = stabilize(Some(&v1), &up);
        assert_eq!(ids(&v2), ids(&v1));
        assert_eq!(v2["fields"][0]["name"], "c");
        assert_eq!(v2[LAST_COLUMN_ID], 4);
    }

    #[test]
    fn nesting_a_new_field_takes_a_new_id_and_keeps_its_siblings() {
        let map = |k: i64| {
            json!({"type": "map", "key-id": k, "key": "string", "value-id": k + 1,
                "value": person(k + 2), "value-required": false})
        };
        let v1 = stabilize(
            None,
            &converted(vec![field(1, "a", json!("long")), field(2, "m", map(3))]),
        );
        assert_eq!(
            ids(&v1),
            pairs(&[
                ("a", 1),
                ("m", 2),
                ("m.<key>", 3),
                ("m.<value>", 4),
                ("m.<value>.city", 5),
                ("m.<value>.zip", 6)
            ])
        );
        // A field is added inside the map's value struct, before the existing ones.
        let value = json!({"type": "struct", "fields": [field(5, "street", json!("string")),
            field(6, "city", json!("string")), field(7, "zip", json!("int"))]});
        let up = converted(vec![
            field(1, "a", json!("long")),
            field(
                2,
                "m",
                json!({"type": "map", "key-id": 3, "key": "string", "value-id": 4,
                "value": value, "value-required": false}),
            ),
        ]);
        let v2 = stabilize(Some(&v1), &up);
        assert_eq!(
            ids(&v2),
            pairs(&[
                ("a", 1),
                ("m", 2),
                ("m.<key>", 3),
                ("m.<value>", 4),
                ("m.<value>.city", 5),
                ("m.<value>.street", 7),
                ("m.<value>.zip", 6)
            ])
        );
    }

    #[test]
    fn an_incompatible_type_change_is_a_new_column_and_promotions_are_not() {
        let v1 = stabilize(
            None,
            &converted(vec![
                field(1, "n", json!("int")),
                field(2, "s", json!("int")),
                field(3, "d", json!("decimal(10, 2)")),
                field(4, "x", json!("string")),
            ]),
        );
        let up = converted(vec![
            field(1, "n", json!("long")),
            field(2, "s", json!("string")),
            field(3, "d", json!("decimal(12, 2)")),
            field(4, "x", person(5)),
        ]);
        let v2 = stabilize(Some(&v1), &up);
        assert_eq!(
            ids(&v2),
            pairs(&[
                ("d", 3),
                ("n", 1),
                ("s", 5),
                ("x", 6),
                ("x.city", 7),
                ("x.zip", 8)
            ])
        );
    }

    #[test]
    fn ids_fixed_upstream_win_over_stored_ones() {
        // Column mapping ids: `b` is dropped and re-added upstream with a new mapping id.
        let pinned = |fields: Vec<Value>, pins: &[i64]| json!({"type": "struct", "schema-id": 0, "fields": fields, UPSTREAM_FIELD_IDS: pins});
        let v1 = stabilize(
            None,
            &pinned(
                vec![
                    field(1, "a", json!("long")),
                    field(
                        2,
                        "b",
                        json!({"type": "list", "element-id": 3,
                        "element": "string", "element-required": false}),
                    ),
                ],
                &[1, 2],
            ),
        );
        assert_eq!(ids(&v1), pairs(&[("a", 1), ("b", 2), ("b.<element>", 3)]));
        let v2 = stabilize(
            Some(&v1),
            &pinned(
                vec![
                    field(1, "a", json!("long")),
                    field(
                        7,
                        "b",
                        json!({"type": "list", "element-id": 8,
                        "element": "string", "element-required": false}),
                    ),
                ],
                &[1, 7],
            ),
        );
        // `b` takes its new upstream id; its element keeps the id stored at its path.
        assert_eq!(ids(&v2), pairs(&[("a", 1), ("b", 7), ("b.<element>", 3)]));
        assert_eq!(v2[LAST_COLUMN_ID], 7);
    }

    #[test]
    fn a_stored_id_that_the_upstream_now_fixes_elsewhere_is_not_duplicated() {
        let v1 = stabilize(
            None,
            &converted(vec![
                field(1, "a", json!("long")),
                field(2, "b", json!("long")),
            ]),
        );
        let up = json!({"type": "struct", "schema-id": 0, UPSTREAM_FIELD_IDS: [2],
            "fields": [field(3, "a", json!("long")), field(2, "c", json!("long"))]});
        let v2 = stabilize(Some(&v1), &up);
        assert_eq!(ids(&v2), pairs(&[("a", 1), ("c", 2)]));
        let up = json!({"type": "struct", "schema-id": 0, UPSTREAM_FIELD_IDS: [1],
            "fields": [field(2, "b", json!("long")), field(1, "c", json!("long"))]});
        let v3 = stabilize(Some(&v1), &up);
        assert_eq!(ids(&v3), pairs(&[("b", 2), ("c", 1)]));
        let up = json!({"type": "struct", "schema-id": 0, UPSTREAM_FIELD_IDS: [2],
            "fields": [field(2, "a", json!("long")), field(3, "b", json!("long"))]});
        // `a` is pinned to 2, so `b` cannot keep 2: it gets a fresh id.
        let v4 = stabilize(Some(&v1), &up);
        assert_eq!(ids(&v4), pairs(&[("a", 2), ("b", 3)]));
    }

    #[test]
    fn schemas_with_upstream_ids_pass_through() {
        let iceberg = json!({"type": "struct", "schema-id": 4, "fields": [field(9, "a",
            json!("long"))]});
        let stored = json!({"type": "struct", "schema-id": 1, "fields": [field(1, "a",
            json!("long"))]});
        assert_eq!(stabilize(Some(&stored), &iceberg), iceberg);
    }
}
