//! Readers for the fields servers send loosely. Each reads one JSON value
//! as it streams past and keeps only what it needs: what it skips (a list
//! or an object where a scalar belongs, the rest of a list) is not kept, so
//! a padded field costs no memory beyond the event's own text.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{
    Deserialize, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor,
};

/// Skips the rest of a list.
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Skips the rest of an object.
fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// One label of a server's error (`message`, `code`, `type`): a non-empty
/// string, or a number as its text (vLLM sends `code` as the HTTP status);
/// anything else is not a label.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Label(pub Option<String>);

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = Label;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error label")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<Label, E> {
                Ok(Label((!v.is_empty()).then(|| v.to_owned())))
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<Label, E> {
                Ok(Label(Some(v.to_string())))
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<Label, E> {
                Ok(Label(Some(v.to_string())))
            }
            fn visit_f64<E: Error>(self, v: f64) -> Result<Label, E> {
                Ok(Label(
                    serde_json::Number::from_f64(v).map(|n| n.to_string()),
                ))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<Label, E> {
                Ok(Label(None))
            }
            fn visit_unit<E: Error>(self) -> Result<Label, E> {
                Ok(Label(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Label, A::Error> {
                drain_seq(seq).map(|()| Label(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Label, A::Error> {
                drain_map(map).map(|()| Label(None))
            }
        }
        d.deserialize_any(Read)
    }
}

/// The largest token count passed on: 2^53 − 1, the largest integer every
/// reader of the log holds exactly (JavaScript's numbers included). A
/// server's count above it is clamped, so sums of a session's usage stay
/// far from `u64::MAX` (they saturate there anyway).
pub const MAX_TOKEN_COUNT: u64 = (1 << 53) - 1;

/// A token count a server reported: a non-negative integer, clamped to
/// [`MAX_TOKEN_COUNT`]. Anything else (a float, a negative number, a
/// string, `null`, a list) is not a count and reads as not reported.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct TokenCount(pub Option<u64>);

impl<'de> Deserialize<'de> for TokenCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = TokenCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<TokenCount, E> {
                Ok(TokenCount(Some(v.min(MAX_TOKEN_COUNT))))
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<TokenCount, E> {
                Ok(TokenCount(
                    u64::try_from(v).ok().map(|v| v.min(MAX_TOKEN_COUNT)),
                ))
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<TokenCount, E> {
                Ok(TokenCount(None))
            }
            fn visit_str<E: Error>(self, _: &str) -> Result<TokenCount, E> {
                Ok(TokenCount(None))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<TokenCount, E> {
                Ok(TokenCount(None))
            }
            fn visit_unit<E: Error>(self) -> Result<TokenCount, E> {
                Ok(TokenCount(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<TokenCount, A::Error> {
                drain_seq(seq).map(|()| TokenCount(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TokenCount, A::Error> {
                drain_map(map).map(|()| TokenCount(None))
            }
        }
        d.deserialize_any(Read)
    }
}

/// The first element of a list; the rest is skipped, not kept. What holds
/// no element (`null`, a number, a boolean, an empty object `{}`) reads
/// as an empty list. A string or an object with keys is refused: it may
/// hold what the list should (a server's answer in a shape this adapter
/// does not know), and that must not vanish unread.
#[derive(Debug)]
pub struct First<T>(pub Option<T>);

impl<T> Default for First<T> {
    fn default() -> Self {
        First(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Read<T> {
            type Value = First<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_unit<E: Error>(self) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<First<T>, A::Error> {
                match map.next_key::<IgnoredAny>()? {
                    None => Ok(First(None)),
                    Some(_) => Err(A::Error::invalid_type(Unexpected::Map, &self)),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
                let first = seq.next_element::<T>()?;
                drain_seq(seq)?;
                Ok(First(first))
            }
        }
        d.deserialize_any(Read(PhantomData))
    }
}

/// An object read as `T`, or nothing: metadata a server sent in another
/// shape (a number, a string, a list where an object belongs) reads as not
/// sent, skipped as it streams past. Inside the object, `T`'s fields
/// decide (they are loose readers too where servers differ).
#[derive(Debug)]
pub struct Loose<T>(pub Option<T>);

impl<T> Default for Loose<T> {
    fn default() -> Self {
        Loose(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Read<T> {
            type Value = Loose<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Loose<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Loose(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Loose<T>, A::Error> {
                drain_seq(seq).map(|()| Loose(None))
            }
            fn visit_str<E: Error>(self, _: &str) -> Result<Loose<T>, E> {
                Ok(Loose(None))
            }
            fn visit_unit<E: Error>(self) -> Result<Loose<T>, E> {
                Ok(Loose(None))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<Loose<T>, E> {
                Ok(Loose(None))
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<Loose<T>, E> {
                Ok(Loose(None))
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<Loose<T>, E> {
                Ok(Loose(None))
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<Loose<T>, E> {
                Ok(Loose(None))
            }
        }
        d.deserialize_any(Read(PhantomData))
    }
}

/// A string, or nothing: a label a server may send in another type (a
/// `finish_reason` of `1`, `{}` or `[…]`) reads as not sent, skipped as it
/// streams past.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LooseText(pub Option<String>);

impl<'de> Deserialize<'de> for LooseText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = LooseText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<LooseText, E> {
                Ok(LooseText(Some(v.to_owned())))
            }
            fn visit_string<E: Error>(self, v: String) -> Result<LooseText, E> {
                Ok(LooseText(Some(v)))
            }
            fn visit_unit<E: Error>(self) -> Result<LooseText, E> {
                Ok(LooseText(None))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<LooseText, E> {
                Ok(LooseText(None))
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<LooseText, E> {
                Ok(LooseText(None))
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<LooseText, E> {
                Ok(LooseText(None))
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<LooseText, E> {
                Ok(LooseText(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<LooseText, A::Error> {
                drain_seq(seq).map(|()| LooseText(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LooseText, A::Error> {
                drain_map(map).map(|()| LooseText(None))
            }
        }
        d.deserialize_any(Read)
    }
}

/// How many elements a list has, counted as they stream past (none kept).
pub struct Count(pub usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(Read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read<T: for<'de> Deserialize<'de>>(text: &str) -> T {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn labels_are_non_empty_strings_or_numbers() {
        assert_eq!(
            read::<Label>(r#""rate_limit""#).0.as_deref(),
            Some("rate_limit")
        );
        assert_eq!(read::<Label>("400").0.as_deref(), Some("400"));
        assert_eq!(read::<Label>("-1").0.as_deref(), Some("-1"));
        assert_eq!(read::<Label>("1.5").0.as_deref(), Some("1.5"));
        for none in [r#""""#, "null", "true", "[1,[2]]", r#"{"a":{"b":1}}"#] {
            assert_eq!(read::<Label>(none), Label(None), "{none}");
        }
    }

    #[test]
    fn counts_are_non_negative_integers_clamped() {
        assert_eq!(read::<TokenCount>("7").0, Some(7));
        assert_eq!(
            read::<TokenCount>(&u64::MAX.to_string()).0,
            Some(MAX_TOKEN_COUNT)
        );
        for none in ["-5", "1.5", r#""5""#, "null", "[5]", r#"{"n":5}"#] {
            assert_eq!(read::<TokenCount>(none).0, None, "{none}");
        }
    }

    #[test]
    fn the_first_of_a_list_is_kept_and_the_rest_skipped() {
        assert_eq!(read::<First<u8>>("[1,2,3]").0, Some(1));
        assert_eq!(read::<First<u8>>("[]").0, None);
        assert_eq!(read::<First<u8>>("null").0, None);
        // Only the first is read as the type.
        assert_eq!(read::<First<u8>>(r#"[1,"x",{}]"#).0, Some(1));
        // What holds no element is an empty list; what may hold one is refused.
        for none in ["{}", "5", "-1", "1.5", "true"] {
            assert_eq!(read::<First<u8>>(none).0, None, "{none}");
        }
        for bad in [r#"{"0":1}"#, r#""x""#] {
            assert!(serde_json::from_str::<First<u8>>(bad).is_err(), "{bad}");
        }
        assert_eq!(read::<Count>(r#"[1,"x",{"a":[]}]"#).0, 3);
        assert!(serde_json::from_str::<Count>("{}").is_err());
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Pair {
        #[serde(default)]
        n: TokenCount,
    }

    #[test]
    fn a_loose_object_reads_as_its_type_or_as_not_sent() {
        assert_eq!(
            read::<Loose<Pair>>(r#"{"n":3,"more":{"deep":[1,{"x":null}]}}"#).0,
            Some(Pair {
                n: TokenCount(Some(3))
            })
        );
        for none in ["5", r#""lots""#, "null", "true", "[1,{}]", "-2.5"] {
            assert_eq!(read::<Loose<Pair>>(none).0, None, "{none}");
        }
    }

    #[test]
    fn loose_text_keeps_strings_and_drops_the_rest() {
        assert_eq!(read::<LooseText>(r#""stop""#).0.as_deref(), Some("stop"));
        assert_eq!(
            read::<LooseText>(r#""st\"op""#).0.as_deref(),
            Some("st\"op")
        );
        for none in ["1", "null", "false", "[\"stop\"]", r#"{"a":"stop"}"#] {
            assert_eq!(read::<LooseText>(none), LooseText(None), "{none}");
        }
    }
}
