//! A bounded walk over Kafka-encoded bytes, shared by the response size check
//! (`wire::layout`) and the consumer-protocol bytes (`machine::classic::subscription`).
//!
//! kafka-protocol 0.18.0 reserves room for `count` elements before it decodes an array, so a
//! forged count (2^32 elements in a 12-byte answer) aborts the process on the failed allocation.
//! A walk reads every array count and every string, bytes and tagged-field length exactly where
//! the decoder will, and fails as soon as one claims more than the bytes left, allocating nothing.
//! Once a walk passes, each count the decoder reads is at most the number of bytes present.
//!
//! Pure computation over a byte slice: reachable from the sans-IO core.

/// Why bytes fail a walk.
pub(crate) type Walk = Result<(), String>;

/// The unread part of a body.
pub(crate) struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub(crate) fn skip(&mut self, n: usize) -> Walk {
        match self.rest.get(n..) {
            Some(rest) => {
                self.rest = rest;
                Ok(())
            }
            None => Err(format!("{n} bytes claimed, {} bytes left", self.rest.len())),
        }
    }

    pub(crate) fn skip_if(&mut self, present: bool, n: usize) -> Walk {
        if present { self.skip(n) } else { Ok(()) }
    }

    /// A big-endian signed integer of `n` (1, 2 or 4) bytes.
    pub(crate) fn int(&mut self, n: usize) -> Result<i64, String> {
        let bytes = self.rest.get(..n).ok_or("body cut short")?;
        self.rest = &self.rest[n..];
        let sign = if bytes[0] & 0x80 != 0 { -1i64 } else { 0 };
        Ok(bytes.iter().fold(sign, |acc, &b| (acc << 8) | i64::from(b)))
    }

    /// An unsigned varint as kafka-protocol reads it: at most five bytes, high bits dropped.
    fn uvarint(&mut self) -> Result<u32, String> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = u32::from(*self.rest.first().ok_or("body cut short")?);
            self.rest = &self.rest[1..];
            value |= (b & 0x7f) << (i * 7);
            if b < 0x80 {
                break;
            }
        }
        Ok(value)
    }

    /// A length or count: an unsigned varint holding length + 1 when `flex` (0 for null), else
    /// a signed integer of `width` bytes (-1 for null). `None` for null.
    fn length(&mut self, flex: bool, width: usize, what: &str) -> Result<Option<u64>, String> {
        if flex {
            return Ok(self.uvarint()?.checked_sub(1).map(u64::from));
        }
        match self.int(width)? {
            -1 => Ok(None),
            n if n < 0 => Err(format!("{what} length is negative ({n})")),
            n => Ok(Some(n as u64)),
        }
    }

    fn fits(&self, n: u64, what: &str) -> Result<usize, String> {
        match usize::try_from(n) {
            Ok(n) if n <= self.rest.len() => Ok(n),
            _ => Err(format!(
                "forged size: {what} of {n} claimed with {} bytes left",
                self.rest.len()
            )),
        }
    }

    /// `walk` over the field `name`: its failure names the field (`field A.B: ...` for field B
    /// inside A).
    pub(crate) fn field(&mut self, name: &str, walk: impl FnOnce(&mut Self) -> Walk) -> Walk {
        walk(self).map_err(|e| match e.strip_prefix("field ") {
            Some(inner) => format!("field {name}.{inner}"),
            None => format!("field {name}: {e}"),
        })
    }

    /// A STRING (INT16 length) or COMPACT_STRING, nullable or not.
    pub(crate) fn string(&mut self, flex: bool) -> Walk {
        self.sized(flex, 2, "string")
    }

    /// A BYTES (INT32 length) or COMPACT_BYTES, nullable or not.
    pub(crate) fn bytes(&mut self, flex: bool) -> Walk {
        self.sized(flex, 4, "bytes")
    }

    fn sized(&mut self, flex: bool, width: usize, what: &str) -> Walk {
        if let Some(n) = self.length(flex, width, what)? {
            let n = self.fits(n, what)?;
            self.skip(n)?;
        }
        Ok(())
    }

    /// An ARRAY (INT32 count) or COMPACT_ARRAY whose elements `element` walks.
    pub(crate) fn array(&mut self, flex: bool, mut element: impl FnMut(&mut Self) -> Walk) -> Walk {
        if let Some(n) = self.length(flex, 4, "array")? {
            for _ in 0..self.fits(n, "array")? {
                element(self)?;
            }
        }
        Ok(())
    }

    /// The tagged fields of a flexible version (none otherwise), all skipped by their size.
    pub(crate) fn tags(&mut self, flex: bool) -> Walk {
        if flex {
            self.tags_with(|_, _| None)
        } else {
            Ok(())
        }
    }

    /// Tagged fields: `known` walks the tags the decoder reads in place (ignoring their size)
    /// and returns `None` for the ones it skips by size.
    pub(crate) fn tags_with(
        &mut self,
        mut known: impl FnMut(&mut Self, u32) -> Option<Walk>,
    ) -> Walk {
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            match known(self, tag) {
                Some(walk) => walk?,
                None => {
                    let size = self.fits(u64::from(size), "tagged field")?;
                    self.skip(size)?;
                }
            }
        }
        Ok(())
    }
}
