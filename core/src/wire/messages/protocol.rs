//! What the generated message modules import as `crate::protocol` inside kafka-protocol, for
//! use outside it: its public items re-exported, and stand-ins for the ones kafka-protocol 0.18
//! keeps crate-private (the `Encoder` / `Decoder` traits, the primitive codecs of `types`, the
//! unknown-tagged-field helpers), with the same names, signatures and wire encoding, limited to
//! what the streams-group schemas use (all of them flexible: compact strings and arrays only).
//!
//! One difference: a compact array whose count claims more elements than there are bytes left
//! (every element of a flexible message takes one byte at least) is a decode error before
//! anything is reserved for it, where kafka-protocol 0.18 reserves the count it read: a forged
//! count is an error, never a huge allocation.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ops::RangeBounds;

use anyhow::{Result, bail};
use bytes::Bytes;

pub(crate) use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Message, StrBytes, VersionRange, buf,
};

use buf::{ByteBuf, ByteBufMut};

/// A value that is one of kafka-protocol's wire types, or a newtype of one (`TopicName`,
/// `GroupId`).
pub(crate) trait NewType<Inner>: From<Inner> + Into<Inner> + Borrow<Inner> {}

impl<T> NewType<T> for T {}
impl NewType<StrBytes> for kafka_protocol::messages::TopicName {}
impl NewType<StrBytes> for kafka_protocol::messages::GroupId {}

/// Writes a value of one wire type.
pub(crate) trait Encoder<Value> {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, value: Value) -> Result<()>;
    fn compute_size(&self, value: Value) -> Result<usize>;
}

/// Reads a value of one wire type.
pub(crate) trait Decoder<Value> {
    fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<Value>;
}

/// Writes the tagged fields a message carries without knowing them, those whose tag is in
/// `range`, in tag order.
pub(crate) fn write_unknown_tagged_fields<B: ByteBufMut, R: RangeBounds<i32>>(
    buf: &mut B,
    range: R,
    unknown_tagged_fields: &BTreeMap<i32, Bytes>,
) -> Result<()> {
    for (&tag, value) in unknown_tagged_fields.range(range) {
        types::UnsignedVarInt.encode(buf, tag as u32)?;
        types::UnsignedVarInt.encode(buf, types::length(value.len())?)?;
        buf.put_slice(value);
    }
    Ok(())
}

/// The encoded size of the tagged fields a message carries without knowing them.
pub(crate) fn compute_unknown_tagged_fields_size(
    unknown_tagged_fields: &BTreeMap<i32, Bytes>,
) -> Result<usize> {
    let mut size = 0;
    for (&tag, value) in unknown_tagged_fields {
        size += types::UnsignedVarInt.compute_size(tag as u32)?;
        size += types::UnsignedVarInt.compute_size(types::length(value.len())?)?;
        size += value.len();
    }
    Ok(size)
}

/// The wire types: each a unit (or wrapper) struct that encodes and decodes the Rust values of
/// that type.
pub(crate) mod types {
    use super::*;

    /// A length as an unsigned varint allows it.
    pub(super) fn length(len: usize) -> Result<u32> {
        match u32::try_from(len) {
            Ok(n) if n < u32::MAX => Ok(n),
            _ => bail!("{len} bytes or items are too many to encode"),
        }
    }

    /// Implements the by-value form of a `Copy` type's encoder through its by-reference form.
    macro_rules! by_value {
        ($codec:ident, $t:ty) => {
            impl Encoder<$t> for $codec {
                fn encode<B: ByteBufMut>(&self, buf: &mut B, value: $t) -> Result<()> {
                    self.encode(buf, &value)
                }
                fn compute_size(&self, value: $t) -> Result<usize> {
                    self.compute_size(&value)
                }
            }
        };
    }

    /// BOOLEAN: one byte, nonzero is true.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Boolean;

    impl<T: NewType<bool>> Encoder<&T> for Boolean {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &T) -> Result<()> {
            buf.put_u8(u8::from(*value.borrow()));
            Ok(())
        }
        fn compute_size(&self, _: &T) -> Result<usize> {
            Ok(1)
        }
    }

    impl<T: NewType<bool>> Decoder<T> for Boolean {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<T> {
            Ok((buf.try_get_u8()? != 0).into())
        }
    }

    by_value!(Boolean, bool);

    /// Fixed-width big-endian integers.
    macro_rules! fixed {
        ($($codec:ident: $t:ty, $put:ident, $get:ident;)*) => {$(
            #[doc = concat!("`", stringify!($t), "`, big-endian.")]
            #[derive(Debug, Clone, Copy)]
            pub(crate) struct $codec;

            impl<T: NewType<$t>> Encoder<&T> for $codec {
                fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &T) -> Result<()> {
                    buf.$put(*value.borrow());
                    Ok(())
                }
                fn compute_size(&self, _: &T) -> Result<usize> {
                    Ok(size_of::<$t>())
                }
            }

            impl<T: NewType<$t>> Decoder<T> for $codec {
                fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<T> {
                    Ok(buf.$get()?.into())
                }
            }

            by_value!($codec, $t);
        )*};
    }

    fixed! {
        Int8: i8, put_i8, try_get_i8;
        Int16: i16, put_i16, try_get_i16;
        UInt16: u16, put_u16, try_get_u16;
        Int32: i32, put_i32, try_get_i32;
        Int64: i64, put_i64, try_get_i64;
    }

    /// UNSIGNED_VARINT: seven bits a byte, low bits first, the high bit set on every byte but
    /// the last.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct UnsignedVarInt;

    impl<T: NewType<u32>> Encoder<&T> for UnsignedVarInt {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &T) -> Result<()> {
            let mut rest = *value.borrow();
            while rest >= 0x80 {
                buf.put_u8((rest & 0x7f) as u8 | 0x80);
                rest >>= 7;
            }
            buf.put_u8(rest as u8);
            Ok(())
        }
        fn compute_size(&self, value: &T) -> Result<usize> {
            let bits = 32 - value.borrow().leading_zeros() as usize;
            Ok(bits.div_ceil(7).max(1))
        }
    }

    impl<T: NewType<u32>> Decoder<T> for UnsignedVarInt {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<T> {
            let mut value = 0u32;
            for shift in (0..35).step_by(7) {
                let byte = buf.try_get_u8()?;
                value |= u32::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return Ok(value.into());
                }
            }
            // kafka-protocol 0.18 stops after five bytes too, and so does Java's
            // ByteUtils.readUnsignedVarint (which calls a longer one malformed).
            bail!("unsigned varint longer than five bytes")
        }
    }

    by_value!(UnsignedVarInt, u32);

    /// COMPACT_STRING / COMPACT_NULLABLE_STRING: length + 1 as an unsigned varint (0: null),
    /// then the UTF-8 bytes.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct CompactString;

    impl<T: NewType<StrBytes>> Encoder<Option<&T>> for CompactString {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: Option<&T>) -> Result<()> {
            match value {
                None => UnsignedVarInt.encode(buf, 0),
                Some(s) => {
                    let s: &StrBytes = s.borrow();
                    UnsignedVarInt.encode(buf, length(s.len())? + 1)?;
                    buf.put_slice(s.as_bytes());
                    Ok(())
                }
            }
        }
        fn compute_size(&self, value: Option<&T>) -> Result<usize> {
            match value {
                None => Ok(1),
                Some(s) => {
                    let len = s.borrow().len();
                    Ok(UnsignedVarInt.compute_size(length(len)? + 1)? + len)
                }
            }
        }
    }

    impl<T: NewType<StrBytes>> Encoder<&Option<T>> for CompactString {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &Option<T>) -> Result<()> {
            self.encode(buf, value.as_ref())
        }
        fn compute_size(&self, value: &Option<T>) -> Result<usize> {
            self.compute_size(value.as_ref())
        }
    }

    impl<T: NewType<StrBytes>> Encoder<&T> for CompactString {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &T) -> Result<()> {
            self.encode(buf, Some(value))
        }
        fn compute_size(&self, value: &T) -> Result<usize> {
            self.compute_size(Some(value))
        }
    }

    impl<T: NewType<StrBytes>> Decoder<Option<T>> for CompactString {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<Option<T>> {
            let n: u32 = UnsignedVarInt.decode(buf)?;
            if n == 0 {
                return Ok(None);
            }
            let bytes = buf.try_get_bytes((n - 1) as usize)?;
            Ok(Some(StrBytes::try_from(bytes)?.into()))
        }
    }

    impl<T: NewType<StrBytes>> Decoder<T> for CompactString {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<T> {
            match self.decode(buf)? {
                Some(s) => Ok(s),
                None => bail!("null where a non-nullable compact string is expected"),
            }
        }
    }

    /// A nested message, written at the version of the message that holds it.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Struct {
        /// The version of the message being written or read.
        pub(crate) version: i16,
    }

    impl<T: Encodable> Encoder<&T> for Struct {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &T) -> Result<()> {
            value.encode(buf, self.version)
        }
        fn compute_size(&self, value: &T) -> Result<usize> {
            value.compute_size(self.version)
        }
    }

    impl<T: Decodable> Decoder<T> for Struct {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<T> {
            T::decode(buf, self.version)
        }
    }

    /// A nullable nested message: an INT8 marker (-1 null, 1 present), then the message.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct OptionStruct {
        /// The version of the message being written or read.
        pub(crate) version: i16,
    }

    impl<T: Encodable> Encoder<&Option<T>> for OptionStruct {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &Option<T>) -> Result<()> {
            match value {
                None => Int8.encode(buf, -1),
                Some(v) => {
                    Int8.encode(buf, 1)?;
                    v.encode(buf, self.version)
                }
            }
        }
        fn compute_size(&self, value: &Option<T>) -> Result<usize> {
            match value {
                None => Ok(1),
                Some(v) => Ok(1 + v.compute_size(self.version)?),
            }
        }
    }

    impl<T: Decodable> Decoder<Option<T>> for OptionStruct {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<Option<T>> {
            // As kafka-protocol and Java's generated readers: any marker but 1 (Java: any
            // negative one) is null.
            let marker: i8 = Int8.decode(buf)?;
            if marker == 1 {
                Ok(Some(T::decode(buf, self.version)?))
            } else {
                Ok(None)
            }
        }
    }

    /// COMPACT_ARRAY / COMPACT_NULLABLE_ARRAY of the element type `E`: length + 1 as an unsigned
    /// varint (0: null), then the elements.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct CompactArray<E>(pub(crate) E);

    impl<T, E: for<'a> Encoder<&'a T>> Encoder<Option<&[T]>> for CompactArray<E> {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: Option<&[T]>) -> Result<()> {
            match value {
                None => UnsignedVarInt.encode(buf, 0),
                Some(items) => {
                    UnsignedVarInt.encode(buf, length(items.len())? + 1)?;
                    items.iter().try_for_each(|item| self.0.encode(buf, item))
                }
            }
        }
        fn compute_size(&self, value: Option<&[T]>) -> Result<usize> {
            match value {
                None => Ok(1),
                Some(items) => items.iter().try_fold(
                    UnsignedVarInt.compute_size(length(items.len())? + 1)?,
                    |size, item| Ok(size + self.0.compute_size(item)?),
                ),
            }
        }
    }

    impl<T, E: for<'a> Encoder<&'a T>> Encoder<&Option<Vec<T>>> for CompactArray<E> {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &Option<Vec<T>>) -> Result<()> {
            self.encode(buf, value.as_deref())
        }
        fn compute_size(&self, value: &Option<Vec<T>>) -> Result<usize> {
            self.compute_size(value.as_deref())
        }
    }

    impl<T, E: for<'a> Encoder<&'a T>> Encoder<&Vec<T>> for CompactArray<E> {
        fn encode<B: ByteBufMut>(&self, buf: &mut B, value: &Vec<T>) -> Result<()> {
            self.encode(buf, Some(value.as_slice()))
        }
        fn compute_size(&self, value: &Vec<T>) -> Result<usize> {
            self.compute_size(Some(value.as_slice()))
        }
    }

    impl<T, E: Decoder<T>> Decoder<Option<Vec<T>>> for CompactArray<E> {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<Option<Vec<T>>> {
            let n: u32 = UnsignedVarInt.decode(buf)?;
            if n == 0 {
                return Ok(None);
            }
            let count = (n - 1) as usize;
            // Every element takes a byte at least: a count beyond the bytes left is forged.
            if count > buf.remaining() {
                bail!(
                    "compact array of {count} elements in {} bytes",
                    buf.remaining()
                );
            }
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push(self.0.decode(buf)?);
            }
            Ok(Some(items))
        }
    }

    impl<T, E: Decoder<T>> Decoder<Vec<T>> for CompactArray<E> {
        fn decode<B: ByteBuf>(&self, buf: &mut B) -> Result<Vec<T>> {
            match self.decode(buf)? {
                Some(items) => Ok(items),
                None => bail!("null where a non-nullable compact array is expected"),
            }
        }
    }
}
