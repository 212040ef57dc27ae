//! Bounds an Avro object container file (a manifest list or a manifest) before the `iceberg`
//! crate decodes it.
//!
//! The crate's Avro reader inflates each block completely into memory, however far it
//! inflates, and sizes its buffers from the lengths the file claims: a 1 MB manifest list
//! whose deflate block inflates to 1 GiB takes the process to 2 GB. The reader offers no
//! limit, so the container is walked here first, and refused unless:
//!
//! - the header (magic, metadata map, codec, sync marker) and every block (entry count, byte
//!   size, sync marker) fit the bytes present, every count and length derived from them;
//! - the codec is one the crate reads (`null`, `deflate`, `snappy`, `zstandard`);
//! - the object inflates to at most [`MAX_INFLATED_PER_OBJECT`] bytes, and all the objects of
//!   one capture job to at most [`MAX_INFLATED_PER_JOB`] ([`InflateBudget`]): each block is
//!   inflated with a streaming decoder into a buffer that stops at the budget (one block at
//!   a time, so at most [`MAX_INFLATED_PER_OBJECT`] inflated bytes are held, then dropped);
//! - the object holds at most [`MAX_ENTRIES_PER_OBJECT`] entries, counted from the block
//!   headers while walking (the walk stops at the limit, nothing is materialized), and no
//!   block claims more entries than its inflated bytes (every manifest-list or manifest entry
//!   takes at least one byte);
//! - each inflated block's entries, walked against the header's writer schema
//!   (`avro.schema`, which must parse), take exactly its bytes: the walk steps over every
//!   value allocating nothing per item. A string, bytes or fixed must fit the bytes left, a
//!   union branch and an enum index must exist, and an array's or map's block may claim no
//!   more items than the bytes left can hold (the reader reserves the claimed count before
//!   reading an item); items whose type can encode in zero bytes count against
//!   [`MAX_ZERO_BYTE_ITEMS_PER_OBJECT`], every value against [`MAX_VALUES_PER_OBJECT`], and
//!   values nest at most [`MAX_VALUE_DEPTH`] deep.
//!
//! A refusal for size is [`Refusal::TooLarge`] (`UPSTREAM_OBJECT_TOO_LARGE`); anything else
//! that is not a well-formed container is [`Refusal::Corrupt`].

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use apache_avro::Schema;
use apache_avro::schema::{Name, NamesRef, Namespace};

/// The most bytes one Avro object may inflate to.
pub const MAX_INFLATED_PER_OBJECT: u64 = 64 * 1024 * 1024;
/// The most bytes all the Avro objects one capture job reads may inflate to.
pub const MAX_INFLATED_PER_JOB: u64 = 512 * 1024 * 1024;
/// The most entries (manifests of a manifest list, data files of a manifest) one Avro object
/// may hold.
pub const MAX_ENTRIES_PER_OBJECT: u64 = 1_000_000;
/// The most values (every record, field, array or map item, branch...) the walk of one Avro
/// object visits: the reader decodes each into a value of its own.
pub const MAX_VALUES_PER_OBJECT: u64 = 16_000_000;
/// The most array and map items of one Avro object whose type can encode in zero bytes
/// (`null`, an empty record, `fixed(0)`): their count cannot be bounded by the bytes present.
pub const MAX_ZERO_BYTE_ITEMS_PER_OBJECT: u64 = 1_000_000;
/// The deepest a value may nest (records, unions, arrays, maps, references) below an entry.
pub const MAX_VALUE_DEPTH: u32 = 32;
/// The largest zstd window accepted (16 MiB): a frame may ask its decoder for a window of up
/// to 2 GiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

const MAGIC: &[u8; 4] = b"Obj\x01";
const SYNC_LEN: usize = 16;
/// The sink's chunk: inflated bytes are counted and dropped this many at a time.
const CHUNK: usize = 64 * 1024;

/// The inflated bytes a capture job may still spend on Avro objects, shared by all the
/// objects the job reads.
#[derive(Debug)]
pub struct InflateBudget {
    limit: u64,
    left: AtomicU64,
}

impl Default for InflateBudget {
    fn default() -> Self {
        Self::new(MAX_INFLATED_PER_JOB)
    }
}

impl InflateBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            left: AtomicU64::new(limit),
        }
    }

    /// Spends `n` bytes; false (and nothing spent) when fewer are left.
    fn spend(&self, n: u64) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }

    /// The bytes not spent yet.
    pub fn left(&self) -> u64 {
        self.left.load(Ordering::Relaxed)
    }
}

/// Why an Avro object is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It inflates, or holds entries, beyond a bound.
    TooLarge(String),
    /// It is not a well-formed Avro object container file.
    Corrupt(String),
}

/// The compression codec of a container, as the `iceberg` crate reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Null,
    Deflate,
    Snappy,
    Zstandard,
}

/// What the walk found in a container that passed.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    pub codec: Codec,
    pub entries: u64,
    pub inflated: u64,
}

/// Walks the Avro container `buf` within the bounds above, spending its inflated bytes from
/// the job's `budget`.
pub fn check_container(buf: &[u8], budget: &InflateBudget) -> Result<Checked, Refusal> {
    let mut walk = Walk {
        buf,
        pos: 0,
        inflated: 0,
        budget,
    };
    walk.check()
}

struct Walk<'a> {
    buf: &'a [u8],
    pos: usize,
    inflated: u64,
    budget: &'a InflateBudget,
}

fn corrupt(message: impl Into<String>) -> Refusal {
    Refusal::Corrupt(message.into())
}

impl<'a> Walk<'a> {
    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], Refusal> {
        if n > self.left() {
            return Err(corrupt(format!(
                "the Avro object claims a {n}-byte {what} with {} bytes left",
                self.left()
            )));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    /// An Avro `long`: a zigzag varint of at most 10 bytes.
    fn long(&mut self) -> Result<i64, Refusal> {
        read_long(self.buf, &mut self.pos)
    }

    /// A length (of a string, bytes or block), which no Avro file writes negative.
    fn length(&mut self, what: &str) -> Result<u64, Refusal> {
        let n = self.long()?;
        u64::try_from(n).map_err(|_| corrupt(format!("the Avro object holds a negative {what}")))
    }

    fn check(&mut self) -> Result<Checked, Refusal> {
        if self.buf.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
            return Err(corrupt("not an Avro object container file (no magic)"));
        }
        self.pos = MAGIC.len();
        let (codec, schema) = self.metadata()?;
        let schema = schema.ok_or_else(|| corrupt("the Avro header names no avro.schema"))?;
        let schema = std::str::from_utf8(schema)
            .ok()
            .and_then(|s| apache_avro::Schema::parse_str(s).ok())
            .ok_or_else(|| corrupt("the Avro header's avro.schema is not a valid Avro schema"))?;
        let resolved = apache_avro::schema::ResolvedSchema::try_from(&schema)
            .map_err(|_| corrupt("the Avro header's avro.schema names an unknown type"))?;
        let mut values = Values {
            names: resolved.get_names(),
            min: HashMap::new(),
            values: 0,
            zero_byte_items: 0,
        };
        // The inflated bytes of one block at a time (reused, dropped with the walk).
        let mut scratch = Vec::new();
        let sync = self.take(SYNC_LEN as u64, "sync marker")?;
        let mut entries = 0u64;
        while self.left() > 0 {
            let count = self.length("entry count")?;
            entries = entries.saturating_add(count);
            if entries > MAX_ENTRIES_PER_OBJECT {
                return Err(Refusal::TooLarge(format!(
                    "the Avro object holds more than {MAX_ENTRIES_PER_OBJECT} entries"
                )));
            }
            let size = self.length("block size")?;
            let data = self.take(size, "block")?;
            let block = match codec {
                Codec::Null => {
                    self.spend(data.len() as u64)?;
                    data
                }
                _ => {
                    self.inflate(codec, data, &mut scratch)?;
                    &scratch[..]
                }
            };
            let inflated = block.len() as u64;
            if count > inflated {
                return Err(corrupt(format!(
                    "an Avro block claims {count} entries in {inflated} bytes"
                )));
            }
            values.block(&schema, count, block)?;
            if self.take(SYNC_LEN as u64, "sync marker")? != sync {
                return Err(corrupt("an Avro block ends without the file's sync marker"));
            }
        }
        Ok(Checked {
            codec,
            entries,
            inflated: self.inflated,
        })
    }

    /// The header's metadata map (blocks of key and value pairs, ended by an empty block);
    /// answers the codec it names and its writer schema (`avro.schema`).
    fn metadata(&mut self) -> Result<(Codec, Option<&'a [u8]>), Refusal> {
        let mut codec = Codec::Null;
        let mut schema = None;
        loop {
            let count = self.long()?;
            if count == 0 {
                return Ok((codec, schema));
            }
            if count < 0 {
                // A negative count is followed by the block's size in bytes.
                self.length("metadata block size")?;
            }
            let count = count.unsigned_abs();
            // Each pair takes at least two bytes (two empty lengths).
            if count.saturating_mul(2) > self.left() {
                return Err(corrupt(format!(
                    "the Avro header claims {count} metadata entries with {} bytes left",
                    self.left()
                )));
            }
            for _ in 0..count {
                let len = self.length("metadata key length")?;
                let key = self.take(len, "metadata key")?;
                let len = self.length("metadata value length")?;
                let value = self.take(len, "metadata value")?;
                if key == b"avro.schema" {
                    schema = Some(value);
                }
                if key == b"avro.codec" {
                    codec = match value {
                        b"null" => Codec::Null,
                        b"deflate" => Codec::Deflate,
                        b"snappy" => Codec::Snappy,
                        b"zstandard" => Codec::Zstandard,
                        other => {
                            return Err(corrupt(format!(
                                "the Avro codec {:?} is not supported (null, deflate, snappy \
                                 and zstandard are)",
                                crate::status::bound_text(&String::from_utf8_lossy(other))
                            )));
                        }
                    };
                }
            }
        }
    }

    /// Inflates one compressed block into `out` (cleared first), within the object's and the
    /// job's budgets: `out` never holds more than [`MAX_INFLATED_PER_OBJECT`] bytes.
    fn inflate(&mut self, codec: Codec, data: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        out.clear();
        match codec {
            Codec::Null => {
                self.spend(data.len() as u64)?;
                out.extend_from_slice(data);
                Ok(())
            }
            Codec::Deflate => self.sink(flate2::read::DeflateDecoder::new(data), "deflate", out),
            Codec::Zstandard => {
                let mut d = zstd::stream::read::Decoder::with_buffer(data)
                    .map_err(|e| corrupt(format!("an Avro zstandard block: {e}")))?;
                d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                    .map_err(|e| corrupt(format!("an Avro zstandard block: {e}")))?;
                self.sink(d, "zstandard", out)
            }
            Codec::Snappy => {
                // Raw snappy (the compressed bytes, then a 4-byte CRC of the inflated ones),
                // which the reader inflates into a buffer of the length the block states
                // first: that length is what it costs, spent before inflating.
                let body = data
                    .len()
                    .checked_sub(4)
                    .map(|n| &data[..n])
                    .ok_or_else(|| corrupt("an Avro snappy block shorter than its checksum"))?;
                let len = snappy_len(body)?;
                self.spend(len)?;
                out.resize(len as usize, 0);
                let n = snap::raw::Decoder::new()
                    .decompress(body, out)
                    .map_err(|e| corrupt(format!("an Avro snappy block: {e}")))?;
                out.truncate(n);
                Ok(())
            }
        }
    }

    /// Inflates what `decoder` answers into `out`, a chunk at a time, within the object's and
    /// the job's budgets (each chunk is spent before it is kept).
    fn sink(
        &mut self,
        mut decoder: impl Read,
        codec: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), Refusal> {
        let mut chunk = vec![0u8; CHUNK];
        loop {
            let n = match decoder.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(corrupt(format!("an Avro {codec} block: {e}"))),
            };
            self.spend(n as u64)?;
            out.extend_from_slice(&chunk[..n]);
        }
    }

    /// Spends `n` inflated bytes of the object's and the job's budgets.
    fn spend(&mut self, n: u64) -> Result<(), Refusal> {
        let total = self.inflated.saturating_add(n);
        if total > MAX_INFLATED_PER_OBJECT {
            return Err(Refusal::TooLarge(format!(
                "the Avro object inflates to more than {MAX_INFLATED_PER_OBJECT} bytes"
            )));
        }
        if !self.budget.spend(n) {
            return Err(Refusal::TooLarge(format!(
                "the capture job's Avro objects inflate to more than {} bytes",
                self.budget.limit
            )));
        }
        self.inflated = total;
        Ok(())
    }
}

/// An Avro `long` at `buf[*pos..]`: a zigzag varint of at most 10 bytes.
fn read_long(buf: &[u8], pos: &mut usize) -> Result<i64, Refusal> {
    let mut raw = 0u64;
    for shift in (0..70).step_by(7) {
        let b = *buf
            .get(*pos)
            .ok_or_else(|| corrupt("the Avro object ends inside a number"))?;
        *pos += 1;
        if shift == 63 && b > 1 {
            break;
        }
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(corrupt(
        "the Avro object holds a number longer than 64 bits",
    ))
}

/// The walk of the values inside the blocks of one object, against its writer schema.
struct Values<'s> {
    names: &'s NamesRef<'s>,
    /// The fewest bytes a value of a schema (by address) encodes in, as computed.
    min: HashMap<usize, u64>,
    /// Values walked so far in the object.
    values: u64,
    /// Items of arrays and maps whose type can encode in zero bytes, so far in the object.
    zero_byte_items: u64,
}

/// One inflated block being walked.
struct Block<'b> {
    buf: &'b [u8],
    pos: usize,
}

impl<'b> Block<'b> {
    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn long(&mut self) -> Result<i64, Refusal> {
        read_long(self.buf, &mut self.pos)
    }

    fn int(&mut self) -> Result<i32, Refusal> {
        i32::try_from(self.long()?)
            .map_err(|_| corrupt("an Avro block holds an int beyond 32 bits"))
    }

    fn take(&mut self, n: u64, what: &str) -> Result<(), Refusal> {
        if n > self.left() {
            return Err(corrupt(format!(
                "an Avro block claims a {n}-byte {what} with {} bytes left in the block",
                self.left()
            )));
        }
        self.pos += n as usize;
        Ok(())
    }

    /// A length-prefixed `bytes` or `string`.
    fn bytes(&mut self, what: &str) -> Result<(), Refusal> {
        let n = self.long()?;
        let n = u64::try_from(n)
            .map_err(|_| corrupt(format!("an Avro block holds a negative {what} length")))?;
        self.take(n, what)
    }
}

impl<'s> Values<'s> {
    /// Walks the `count` entries of `buf`, which they must take exactly.
    fn block(&mut self, schema: &'s Schema, count: u64, buf: &[u8]) -> Result<(), Refusal> {
        let mut b = Block { buf, pos: 0 };
        for _ in 0..count {
            self.skip(schema, &None, 0, &mut b)?;
        }
        if b.left() > 0 {
            return Err(corrupt(format!(
                "an Avro block's {count} entries take {} of its {} bytes",
                b.pos,
                buf.len()
            )));
        }
        Ok(())
    }

    fn resolve(&self, name: &Name, ns: &Namespace) -> Result<&'s Schema, Refusal> {
        let names: &'s NamesRef<'s> = self.names;
        names
            .get(&name.fully_qualified_name(ns))
            .copied()
            .ok_or_else(|| corrupt("the Avro schema refers to an unknown type"))
    }

    /// Steps past one value of `schema` nested `depth` deep, allocating nothing per item.
    fn skip(
        &mut self,
        schema: &'s Schema,
        ns: &Namespace,
        depth: u32,
        b: &mut Block<'_>,
    ) -> Result<(), Refusal> {
        if depth >= MAX_VALUE_DEPTH {
            return Err(Refusal::TooLarge(format!(
                "an Avro value nests deeper than {MAX_VALUE_DEPTH}"
            )));
        }
        self.values += 1;
        if self.values > MAX_VALUES_PER_OBJECT {
            return Err(Refusal::TooLarge(format!(
                "the Avro object holds more than {MAX_VALUES_PER_OBJECT} values"
            )));
        }
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => {
                let v = *b
                    .buf
                    .get(b.pos)
                    .ok_or_else(|| corrupt("an Avro block ends inside a boolean"))?;
                if v > 1 {
                    return Err(corrupt("an Avro block holds a boolean that is not 0 or 1"));
                }
                b.pos += 1;
                Ok(())
            }
            Schema::Int | Schema::Date | Schema::TimeMillis => b.int().map(drop),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => b.long().map(drop),
            Schema::Float => b.take(4, "float"),
            Schema::Double => b.take(8, "double"),
            Schema::Duration => b.take(12, "duration"),
            Schema::Bytes | Schema::BigDecimal => b.bytes("bytes"),
            Schema::String | Schema::Uuid => b.bytes("string"),
            Schema::Fixed(f) => b.take(f.size as u64, "fixed"),
            Schema::Decimal(d) => self.skip(&d.inner, ns, depth + 1, b),
            Schema::Enum(e) => {
                let i = b.int()?;
                if usize::try_from(i).map_or(true, |i| i >= e.symbols.len()) {
                    return Err(corrupt(format!(
                        "an Avro block holds enum index {i} of {} symbols",
                        e.symbols.len()
                    )));
                }
                Ok(())
            }
            Schema::Union(u) => {
                let i = b.long()?;
                let variant = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| {
                        corrupt(format!(
                            "an Avro block holds union branch {i} of {}",
                            u.variants().len()
                        ))
                    })?;
                self.skip(variant, ns, depth + 1, b)
            }
            Schema::Record(r) => {
                let inner = r.name.fully_qualified_name(ns).namespace;
                for field in &r.fields {
                    self.skip(&field.schema, &inner, depth + 1, b)?;
                }
                Ok(())
            }
            Schema::Array(a) => self.items(&a.items, false, ns, depth, b),
            Schema::Map(m) => self.items(&m.types, true, ns, depth, b),
            Schema::Ref { name } => {
                let resolved = self.resolve(name, ns)?;
                let inner = name.fully_qualified_name(ns).namespace;
                self.skip(resolved, &inner, depth + 1, b)
            }
        }
    }

    /// The blocks of an array (`keyed`: a map, each item a string key then a value of `item`).
    fn items(
        &mut self,
        item: &'s Schema,
        keyed: bool,
        ns: &Namespace,
        depth: u32,
        b: &mut Block<'_>,
    ) -> Result<(), Refusal> {
        // A map's key is a string: at least its length byte.
        let min = self.min_size(item, ns, 0)? + u64::from(keyed);
        loop {
            let count = b.long()?;
            if count == 0 {
                return Ok(());
            }
            let mut sized = None;
            if count < 0 {
                // A negative count is followed by the block's size in bytes.
                let size = b.long()?;
                let size = u64::try_from(size)
                    .ok()
                    .filter(|&n| n <= b.left())
                    .ok_or_else(|| {
                        corrupt(format!(
                            "an Avro array block claims {size} bytes with {} left",
                            b.left()
                        ))
                    })?;
                sized = Some((b.pos, size));
            }
            let count = count.unsigned_abs();
            if min > 0 {
                if count.saturating_mul(min) > b.left() {
                    return Err(Refusal::TooLarge(format!(
                        "an Avro array or map claims {count} items with {} bytes left in \
                         the block",
                        b.left()
                    )));
                }
            } else {
                self.zero_byte_items = self.zero_byte_items.saturating_add(count);
                if self.zero_byte_items > MAX_ZERO_BYTE_ITEMS_PER_OBJECT {
                    return Err(Refusal::TooLarge(format!(
                        "the Avro object's arrays and maps hold more than \
                         {MAX_ZERO_BYTE_ITEMS_PER_OBJECT} items that take no byte"
                    )));
                }
            }
            if self.values.saturating_add(count) > MAX_VALUES_PER_OBJECT {
                return Err(Refusal::TooLarge(format!(
                    "the Avro object holds more than {MAX_VALUES_PER_OBJECT} values"
                )));
            }
            for _ in 0..count {
                if keyed {
                    b.bytes("map key")?;
                }
                self.skip(item, ns, depth + 1, b)?;
            }
            if let Some((start, size)) = sized
                && (b.pos - start) as u64 != size
            {
                return Err(corrupt(format!(
                    "an Avro array block states {size} bytes and takes {}",
                    b.pos - start
                )));
            }
        }
    }

    /// The fewest bytes a value of `schema` encodes in (computed once per schema node).
    fn min_size(&mut self, schema: &'s Schema, ns: &Namespace, depth: u32) -> Result<u64, Refusal> {
        if depth >= MAX_VALUE_DEPTH {
            return Err(Refusal::TooLarge(format!(
                "the Avro schema nests deeper than {MAX_VALUE_DEPTH}"
            )));
        }
        let key = schema as *const Schema as usize;
        if let Some(&n) = self.min.get(&key) {
            return Ok(n);
        }
        let n = match schema {
            Schema::Null => 0,
            Schema::Float => 4,
            Schema::Double => 8,
            Schema::Duration => 12,
            Schema::Fixed(f) => f.size as u64,
            Schema::Decimal(d) => self.min_size(&d.inner, ns, depth + 1)?,
            Schema::Record(r) => {
                let inner = r.name.fully_qualified_name(ns).namespace;
                let mut n = 0u64;
                for field in &r.fields {
                    n = n.saturating_add(self.min_size(&field.schema, &inner, depth + 1)?);
                }
                n
            }
            Schema::Ref { name } => {
                let resolved = self.resolve(name, ns)?;
                let inner = name.fully_qualified_name(ns).namespace;
                self.min_size(resolved, &inner, depth + 1)?
            }
            // A varint, a length, a branch index or a block count: at least one byte.
            _ => 1,
        };
        self.min.insert(key, n);
        Ok(n)
    }
}

/// The inflated length a raw snappy stream states (a varint of at most 32 bits).
fn snappy_len(body: &[u8]) -> Result<u64, Refusal> {
    let mut len = 0u64;
    for (i, b) in body.iter().take(5).enumerate() {
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(len)
                .map(u64::from)
                .map_err(|_| corrupt("an Avro snappy block states a length beyond 32 bits"));
        }
    }
    Err(corrupt("an Avro snappy block states no length"))
}

/// An Avro object container file with the `codec` (`None`: no `avro.codec` entry), a
/// schema of one long field and the blocks `(count, encoded block bytes)`, as written.
#[cfg(test)]
pub(crate) fn container(codec: Option<&str>, blocks: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let schema = r#"{"type":"record","name":"r","fields":[{"name":"x","type":"long"}]}"#;
    container_of(schema, codec, blocks)
}

/// [`container`] with the writer schema `schema`.
#[cfg(test)]
pub(crate) fn container_of(
    schema: &str,
    codec: Option<&str>,
    blocks: &[(i64, Vec<u8>)],
) -> Vec<u8> {
    fn long(out: &mut Vec<u8>, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        long(out, b.len() as i64);
        out.extend_from_slice(b);
    }
    let mut out = MAGIC.to_vec();
    let mut meta: Vec<(&[u8], &[u8])> = vec![(b"avro.schema", schema.as_bytes())];
    if let Some(c) = codec {
        meta.push((b"avro.codec", c.as_bytes()));
    }
    long(&mut out, meta.len() as i64);
    for (k, v) in meta {
        bytes(&mut out, k);
        bytes(&mut out, v);
    }
    long(&mut out, 0);
    let sync = [0x5au8; SYNC_LEN];
    out.extend_from_slice(&sync);
    for (count, data) in blocks {
        long(&mut out, *count);
        bytes(&mut out, data);
        out.extend_from_slice(&sync);
    }
    out
}

/// A raw deflate stream of `mib` MiB of zeros, built from one compressed MiB repeated (each
/// copy stands alone after a full flush), so a bomb of any size costs one MiB of work.
#[cfg(test)]
pub(crate) fn zeros_deflated(mib: usize) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::best(), false);
    let mut one = Vec::with_capacity(4096);
    c.compress_vec(
        &vec![0u8; 1024 * 1024],
        &mut one,
        flate2::FlushCompress::Full,
    )
    .expect("deflate");
    let mut out = Vec::with_capacity(one.len() * mib + 2);
    for _ in 0..mib {
        out.extend_from_slice(&one);
    }
    // A final, empty, fixed-Huffman block.
    out.extend_from_slice(&[0x03, 0x00]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deflated(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn check(buf: &[u8]) -> Result<Checked, Refusal> {
        check_container(buf, &InflateBudget::default())
    }

    #[test]
    fn well_formed_containers_of_every_codec_pass() {
        let records = vec![2u8; 10]; // ten longs (1 each)
        for (codec, name, block) in [
            (Codec::Null, None, records.clone()),
            (Codec::Null, Some("null"), records.clone()),
            (Codec::Deflate, Some("deflate"), deflated(&records)),
            (
                Codec::Zstandard,
                Some("zstandard"),
                zstd::encode_all(&records[..], 3).unwrap(),
            ),
            // Raw snappy: the length, one literal of ten bytes, the CRC (not checked here).
            (Codec::Snappy, Some("snappy"), {
                let mut b = vec![10, 9 << 2];
                b.extend_from_slice(&records);
                b.extend_from_slice(&[0; 4]);
                b
            }),
        ] {
            let c = container(name, &[(10, block.clone()), (10, block)]);
            assert_eq!(
                check(&c),
                Ok(Checked {
                    codec,
                    entries: 20,
                    inflated: 20
                }),
                "{name:?}"
            );
        }
        // An empty container (no block) passes.
        assert_eq!(check(&container(Some("deflate"), &[])).unwrap().entries, 0);
    }

    #[test]
    fn a_truncated_header_or_block_is_refused_and_never_panics() {
        let whole = container(Some("deflate"), &[(10, deflated(&[2u8; 10]))]);
        let header = container(Some("deflate"), &[]).len();
        for cut in 0..whole.len() {
            match check(&whole[..cut]) {
                Err(Refusal::Corrupt(_)) => {}
                // Cut exactly after the header: a container of no block.
                Ok(c) if cut == header => assert_eq!(c.entries, 0),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        assert!(matches!(check(b"Obj\x02"), Err(Refusal::Corrupt(m)) if m.contains("magic")));
        // A number that never ends.
        let mut v = MAGIC.to_vec();
        v.extend([0xff; 20]);
        assert!(matches!(check(&v), Err(Refusal::Corrupt(m)) if m.contains("64 bits")));
    }

    #[test]
    fn lying_counts_and_lengths_are_refused_from_the_bytes_present() {
        // A metadata map claiming about a trillion entries in a few bytes.
        let mut v = MAGIC.to_vec();
        v.extend([0x80, 0x80, 0x80, 0xd0, 0xa3, 0x3a]);
        v.extend([0u8; 40]);
        let e = check(&v).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("1001213919232 metadata entries with 40 bytes left")),
            "{e:?}"
        );
        // A metadata key claiming 1 GiB.
        let mut v = MAGIC.to_vec();
        v.extend([0x02, 0x80, 0x80, 0x80, 0x80, 0x08]);
        v.extend([0u8; 40]);
        let e = check(&v).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("1073741824-byte metadata key")),
            "{e:?}"
        );
        // A block claiming 1 GiB of bytes.
        let mut v = container(None, &[]);
        v.extend([0x02, 0x80, 0x80, 0x80, 0x80, 0x08, 0x00]);
        let e = check(&v).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("1073741824-byte block")),
            "{e:?}"
        );
        // A block claiming more entries than it inflates to bytes.
        let e = check(&container(Some("deflate"), &[(500, deflated(&[2u8; 10]))])).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("500 entries in 10 bytes")),
            "{e:?}"
        );
        // Negative counts, a foreign sync marker, an unknown codec, a snappy block too
        // short for its checksum (the reader would panic slicing it).
        assert!(
            matches!(check(&container(None, &[(-3, vec![2; 3])])), Err(Refusal::Corrupt(m)) if m.contains("negative"))
        );
        let mut v = container(None, &[(1, vec![2])]);
        let n = v.len();
        v[n - 1] ^= 1;
        assert!(matches!(check(&v), Err(Refusal::Corrupt(m)) if m.contains("sync marker")));
        for codec in ["bzip2", "xz", "lz4"] {
            assert!(
                matches!(check(&container(Some(codec), &[])), Err(Refusal::Corrupt(m)) if m.contains("not supported")),
                "{codec}"
            );
        }
        assert!(
            matches!(check(&container(Some("snappy"), &[(1, vec![2, 2])])), Err(Refusal::Corrupt(m)) if m.contains("checksum"))
        );
    }

    #[test]
    fn a_block_that_inflates_beyond_the_object_budget_is_refused() {
        // 80 KB of deflate that inflates to 80 MiB, in one block.
        let bomb = zeros_deflated(80);
        assert!(bomb.len() < 200_000, "{}", bomb.len());
        let budget = InflateBudget::default();
        let e = check_container(&container(Some("deflate"), &[(1, bomb)]), &budget).unwrap_err();
        assert_eq!(
            e,
            Refusal::TooLarge(format!(
                "the Avro object inflates to more than {MAX_INFLATED_PER_OBJECT} bytes"
            ))
        );
        // Counted and stopped at the budget, never past it.
        assert!(MAX_INFLATED_PER_JOB - budget.left() <= MAX_INFLATED_PER_OBJECT);
        // The same through zstandard, and a snappy block that states 4 GiB.
        let zbomb = zstd::encode_all(&vec![0u8; 80 * 1024 * 1024][..], 1).unwrap();
        let e = check(&container(Some("zstandard"), &[(1, zbomb)])).unwrap_err();
        assert!(matches!(e, Refusal::TooLarge(_)), "{e:?}");
        let e = check(&container(
            Some("snappy"),
            &[(1, vec![0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0, 0])],
        ))
        .unwrap_err();
        assert!(matches!(e, Refusal::TooLarge(_)), "{e:?}");
    }

    #[test]
    fn the_job_budget_is_shared_by_the_objects_of_a_job() {
        // Each object inflates to 40 MiB (under the object budget), one entry of a 40 MiB
        // fixed; a job budget of 100 MiB takes two of them, not three.
        let obj = container_of(
            r#"{"type":"fixed","name":"f","size":41943040}"#,
            Some("deflate"),
            &[(1, zeros_deflated(40))],
        );
        let budget = InflateBudget::new(100 * 1024 * 1024);
        check_container(&obj, &budget).unwrap();
        check_container(&obj, &budget).unwrap();
        let e = check_container(&obj, &budget).unwrap_err();
        assert!(
            matches!(&e, Refusal::TooLarge(m) if m.contains("capture job")),
            "{e:?}"
        );
    }

    #[test]
    fn entries_are_counted_while_walking_and_the_walk_stops_at_the_limit() {
        let half = (MAX_ENTRIES_PER_OBJECT / 2) as usize;
        let block = (half as i64, vec![2u8; half]);
        assert_eq!(
            check(&container(None, &[block.clone(), block.clone()]))
                .unwrap()
                .entries,
            MAX_ENTRIES_PER_OBJECT
        );
        let one = (1, vec![2u8]);
        let budget = InflateBudget::default();
        let e = check_container(
            &container(None, &[block.clone(), block.clone(), one, block]),
            &budget,
        )
        .unwrap_err();
        assert_eq!(
            e,
            Refusal::TooLarge(format!(
                "the Avro object holds more than {MAX_ENTRIES_PER_OBJECT} entries"
            ))
        );
        // Refused at the third block's header: the fourth was never inflated.
        assert_eq!(MAX_INFLATED_PER_JOB - budget.left(), MAX_ENTRIES_PER_OBJECT);
        // One block claiming more entries than the limit is refused before its bytes count.
        let e = check(&container(None, &[(i64::MAX, vec![2u8; 4])])).unwrap_err();
        assert!(matches!(e, Refusal::TooLarge(_)), "{e:?}");
    }

    /// Avro `long`s, as written.
    fn longs(ns: &[i64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &n in ns {
            let mut z = ((n << 1) ^ (n >> 63)) as u64;
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(b);
                    break;
                }
                out.push(b | 0x80);
            }
        }
        out
    }

    fn record_of(field: &str) -> String {
        format!(r#"{{"type":"record","name":"r","fields":[{{"name":"a","type":{field}}}]}}"#)
    }

    #[test]
    fn an_entry_claiming_a_huge_array_in_a_small_block_is_refused() {
        // One entry whose array of longs claims 500,000,000 items, in a 100-byte block.
        let schema = record_of(r#"{"type":"array","items":"long"}"#);
        let mut block = longs(&[500_000_000]);
        block.resize(100, 0);
        let e = check(&container_of(
            &schema,
            Some("deflate"),
            &[(1, deflated(&block))],
        ))
        .unwrap_err();
        assert!(
            matches!(&e, Refusal::TooLarge(m) if m.contains("claims 500000000 items with 95 bytes left")),
            "{e:?}"
        );
        // The same as a map (of the iceberg manifest's `column_sizes` kind), and in a
        // negative-count block with its byte size.
        let schema = record_of(r#"{"type":"map","values":"long"}"#);
        let e = check(&container_of(&schema, None, &[(1, block.clone())])).unwrap_err();
        assert!(matches!(&e, Refusal::TooLarge(_)), "{e:?}");
        let mut sized = longs(&[-500_000_000, 90]);
        sized.resize(100, 0);
        let e = check(&container_of(&schema, None, &[(1, sized)])).unwrap_err();
        assert!(matches!(&e, Refusal::TooLarge(_)), "{e:?}");
        // An array that fits its bytes passes: three longs, then the end.
        let schema = record_of(r#"{"type":"array","items":"long"}"#);
        let ok = longs(&[3, 1, 2, 3, 0]);
        assert_eq!(
            check(&container_of(&schema, None, &[(1, ok)]))
                .unwrap()
                .entries,
            1
        );
    }

    #[test]
    fn an_array_of_zero_byte_items_is_refused_at_the_cap() {
        for items in [r#""null""#, r#"{"type":"record","name":"e","fields":[]}"#] {
            let schema = record_of(&format!(r#"{{"type":"array","items":{items}}}"#));
            let at = MAX_ZERO_BYTE_ITEMS_PER_OBJECT as i64;
            let c = container_of(&schema, None, &[(1, longs(&[at, 0]))]);
            assert_eq!(check(&c).unwrap().entries, 1, "{items}");
            let c = container_of(&schema, None, &[(1, longs(&[at + 1, 0]))]);
            let e = check(&c).unwrap_err();
            assert!(
                matches!(&e, Refusal::TooLarge(m) if m.contains("items that take no byte")),
                "{items}: {e:?}"
            );
            // A huge count is refused before a single item is walked.
            let c = container_of(&schema, None, &[(1, longs(&[i64::MAX, 0]))]);
            assert!(matches!(check(&c), Err(Refusal::TooLarge(_))), "{items}");
        }
    }

    #[test]
    fn a_string_longer_than_the_bytes_left_is_refused() {
        let schema = record_of(r#""string""#);
        let mut block = longs(&[1000]);
        block.extend(b"abcde");
        let e = check(&container_of(
            &schema,
            Some("deflate"),
            &[(1, deflated(&block))],
        ))
        .unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("1000-byte string with 5 bytes left")),
            "{e:?}"
        );
        // A union branch out of range, an enum index out of range, a value nested past the
        // depth limit, and a schema that is not one.
        let schema = record_of(r#"["null","long"]"#);
        let e = check(&container_of(&schema, None, &[(1, longs(&[2]))])).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("union branch 2")),
            "{e:?}"
        );
        let schema = record_of(r#"{"type":"enum","name":"e","symbols":["A"]}"#);
        let e = check(&container_of(&schema, None, &[(1, longs(&[1]))])).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("enum index 1")),
            "{e:?}"
        );
        let list = r#"{"type":"record","name":"n","fields":[{"name":"next","type":["null","n"]}]}"#;
        let e = check(&container_of(list, None, &[(1, vec![2; 40])])).unwrap_err();
        assert!(
            matches!(&e, Refusal::TooLarge(m) if m.contains("deeper than")),
            "{e:?}"
        );
        let e = check(&container_of("{nope", None, &[])).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("not a valid Avro schema")),
            "{e:?}"
        );
    }

    #[test]
    fn a_block_whose_entries_do_not_take_exactly_its_bytes_is_corrupt() {
        // One long entry in two bytes: a byte left over.
        let e = check(&container(Some("deflate"), &[(1, deflated(&[2, 2]))])).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("1 entries take 1 of its 2 bytes")),
            "{e:?}"
        );
        // Two entries whose second ends inside its number.
        let e = check(&container(None, &[(2, vec![2, 0x80])])).unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("inside a number")),
            "{e:?}"
        );
        // An array block whose stated byte size is not what its items take.
        let schema = record_of(r#"{"type":"array","items":"long"}"#);
        let e = check(&container_of(
            &schema,
            None,
            &[(1, longs(&[-2, 3, 1, 1, 0]))],
        ))
        .unwrap_err();
        assert!(
            matches!(&e, Refusal::Corrupt(m) if m.contains("states 3 bytes")),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_manifest_and_manifest_list_written_by_the_iceberg_crate_pass() {
        use iceberg::io::FileIO;
        use iceberg::spec::{
            DataContentType, DataFileBuilder, DataFileFormat, FormatVersion, Manifest,
            ManifestList, ManifestListWriter, ManifestWriterBuilder, NestedField, PartitionSpec,
            PrimitiveType, Schema, Struct, Type,
        };
        let io = FileIO::new_with_memory();
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let spec = PartitionSpec::unpartition_spec();
        let mut w = ManifestWriterBuilder::new(
            io.new_output("memory:///m0.avro").unwrap(),
            Some(1),
            schema.into(),
            spec,
        )
        .build_v2_data();
        for i in 0..3 {
            let f = DataFileBuilder::default()
                .content(DataContentType::Data)
                .file_format(DataFileFormat::Parquet)
                .file_path(format!("s3://b/t/data/{i}.parquet"))
                .file_size_in_bytes(1024)
                .record_count(10)
                .partition_spec_id(0)
                .partition(Struct::empty())
                .build()
                .unwrap();
            w.add_file(f, 1).unwrap();
        }
        let mf = w.write_manifest_file().await.unwrap();
        let manifest = io
            .new_input("memory:///m0.avro")
            .unwrap()
            .read()
            .await
            .unwrap();
        let mut lw = ManifestListWriter::v2(
            io.new_output("memory:///snap.avro")
                .unwrap()
                .writer()
                .await
                .unwrap(),
            1,
            None,
            1,
        );
        lw.add_manifests(std::iter::repeat_n(mf, 2)).unwrap();
        lw.close().await.unwrap();
        let list = io
            .new_input("memory:///snap.avro")
            .unwrap()
            .read()
            .await
            .unwrap();

        let budget = InflateBudget::default();
        let c = check_container(&manifest, &budget).unwrap();
        assert_eq!(c.entries, 3);
        assert_eq!(Manifest::parse_avro(&manifest).unwrap().entries().len(), 3);
        let c = check_container(&list, &budget).unwrap();
        assert_eq!(c.entries, 2);
        let parsed = ManifestList::parse_with_version(&list, FormatVersion::V2).unwrap();
        assert_eq!(parsed.entries().len(), 2);
    }
}
