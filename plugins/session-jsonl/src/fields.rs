//! How the fields of a stored record (or of a payload checked before it is
//! read) are taken, where serde's defaults would read more than the reader
//! ever has: a struct only from an object ([`object`]; serde also reads a
//! struct from an array, field by field), and a field that is there at all,
//! `null` included ([`present`]; an `Option` reads `null` as absent).

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Reads `T` from an object only.
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct ObjectOf<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOf<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(ObjectOf(std::marker::PhantomData))
}

/// A whole record read as `T` from an object only ([`object`] as a type,
/// for data read with `LazyJson::parse`): an array or a scalar is not one
/// of the record's shapes.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(d).map(Object)
    }
}

/// A field that is there, whatever its value (`null` included): with
/// `#[serde(default)]`, `None` only when it is absent.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;

    #[derive(Deserialize)]
    struct Probe {
        #[serde(deserialize_with = "object")]
        inner: Inner,
        #[serde(default, deserialize_with = "present")]
        marker: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    struct Inner {
        #[serde(default)]
        a: u64,
    }

    #[test]
    fn a_struct_reads_from_an_object_only_and_a_null_field_is_there() {
        let p: Probe = serde_json::from_str(r#"{"inner":{"a":1},"marker":null}"#).unwrap();
        assert_eq!(p.inner.a, 1);
        assert!(p.marker.is_some());
        let p: Probe = serde_json::from_str(r#"{"inner":{}}"#).unwrap();
        assert!(p.marker.is_none());
        // serde alone would read `[7]` as `{"a": 7}`.
        assert!(serde_json::from_str::<Probe>(r#"{"inner":[7]}"#).is_err());
        let tree = serde_json::json!({"inner": [7]});
        assert!(Probe::deserialize(&tree).is_err());
    }
}
