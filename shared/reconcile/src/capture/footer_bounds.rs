//! Bounds a Parquet footer before it is decoded.
//!
//! The parquet crate's footer decoder reserves memory for every list at the length the list
//! claims, before reading its elements: a footer of a few hundred bytes that claims two
//! billion schema elements makes it reserve hundreds of GB, and the allocation failure aborts
//! the process. The crate offers no limit, so the footer (thrift compact protocol
//! `FileMetaData`) is walked here first, without allocating, and refused unless:
//!
//! - every list, set and map claims no more elements than the bytes left could hold (each
//!   element takes at least one byte, a map entry two), and every string fits the bytes left;
//! - structs nest at most [`MAX_DEPTH`] deep;
//! - the file declares at most [`MAX_SCHEMA_ELEMENTS`] schema elements, [`MAX_ROW_GROUPS`]
//!   row groups and [`MAX_COLUMN_CHUNKS`] column chunks over all its row groups.
//!
//! The walk reads each byte at most once, so its cost is linear in the footer's size.

/// The most schema elements (columns and groups) a captured file may declare.
pub const MAX_SCHEMA_ELEMENTS: u64 = 50_000;
/// The most row groups a captured file may declare.
pub const MAX_ROW_GROUPS: u64 = 50_000;
/// The most column chunks (row groups times columns) a captured file may declare.
pub const MAX_COLUMN_CHUNKS: u64 = 500_000;
/// The deepest nesting of thrift structs, lists and maps accepted in a footer.
pub const MAX_DEPTH: usize = 32;

// Thrift compact protocol type codes.
const STOP: u8 = 0;
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;
const UUID: u8 = 13;

// FileMetaData and RowGroup field ids that carry the counted lists.
const FILE_SCHEMA: i16 = 2;
const FILE_ROW_GROUPS: i16 = 4;
const ROW_GROUP_COLUMNS: i16 = 1;

/// Where in the footer a struct sits, for the counted lists.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    FileMetaData,
    RowGroup,
    Other,
}

struct Scan<'a> {
    buf: &'a [u8],
    pos: usize,
    column_chunks: u64,
}

/// Checks that the footer `buf` (the thrift `FileMetaData`, without the length and magic)
/// can be decoded within the bounds above. Answers why not otherwise.
pub fn check(buf: &[u8]) -> Result<(), String> {
    let mut scan = Scan {
        buf,
        pos: 0,
        column_chunks: 0,
    };
    scan.structure(Place::FileMetaData, 0)
}

impl Scan<'_> {
    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| "the footer ends inside a value".to_owned())?;
        self.pos += 1;
        Ok(b)
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        if n > self.left() {
            return Err(format!(
                "the footer claims a {n}-byte value with {} bytes left",
                self.left()
            ));
        }
        self.pos += n as usize;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("the footer holds a varint longer than 64 bits".into())
    }

    fn structure(&mut self, place: Place, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("the footer nests deeper than {MAX_DEPTH} levels"));
        }
        let mut last: i16 = 0;
        loop {
            let header = self.byte()?;
            let kind = header & 0x0f;
            if kind == STOP {
                return Ok(());
            }
            let delta = header >> 4;
            let id = if delta == 0 {
                let raw = self.varint()?;
                let zigzag = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
                i16::try_from(zigzag).map_err(|_| "the footer holds a bad field id".to_owned())?
            } else {
                last.saturating_add(i16::from(delta))
            };
            last = id;
            match kind {
                // A boolean field carries its value in its type code.
                BOOL_TRUE | BOOL_FALSE => {}
                LIST | SET => {
                    let limit = match (place, id) {
                        (Place::FileMetaData, FILE_SCHEMA) => {
                            Some(("schema elements", MAX_SCHEMA_ELEMENTS))
                        }
                        (Place::FileMetaData, FILE_ROW_GROUPS) => {
                            Some(("row groups", MAX_ROW_GROUPS))
                        }
                        _ => None,
                    };
                    let inner = if place == Place::FileMetaData && id == FILE_ROW_GROUPS {
                        Place::RowGroup
                    } else {
                        Place::Other
                    };
                    let counts_columns = place == Place::RowGroup && id == ROW_GROUP_COLUMNS;
                    self.list(limit, counts_columns, inner, depth + 1)?;
                }
                _ => self.value(kind, depth + 1)?,
            }
        }
    }

    /// A list or set; `limit` caps its length, `counts_columns` adds it to the column chunks.
    fn list(
        &mut self,
        limit: Option<(&str, u64)>,
        counts_columns: bool,
        inner: Place,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("the footer nests deeper than {MAX_DEPTH} levels"));
        }
        let header = self.byte()?;
        let kind = header & 0x0f;
        let short = u64::from(header >> 4);
        let len = if short == 15 { self.varint()? } else { short };
        if let Some((what, max)) = limit
            && len > max
        {
            return Err(format!(
                "the footer declares {len} {what}; at most {max} are accepted"
            ));
        }
        if counts_columns {
            self.column_chunks = self.column_chunks.saturating_add(len);
            if self.column_chunks > MAX_COLUMN_CHUNKS {
                return Err(format!(
                    "the footer declares more than {MAX_COLUMN_CHUNKS} column chunks"
                ));
            }
        }
        let least = min_size(kind)?;
        if len.saturating_mul(least) > self.left() {
            return Err(format!(
                "the footer claims a list of {len} elements with {} bytes left",
                self.left()
            ));
        }
        for _ in 0..len {
            match kind {
                BOOL_TRUE | BOOL_FALSE => self.skip(1)?,
                STRUCT => self.structure(inner, depth + 1)?,
                _ => self.value(kind, depth + 1)?,
            }
        }
        Ok(())
    }

    fn value(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        match kind {
            BOOL_TRUE | BOOL_FALSE | BYTE => self.skip(1),
            I16 | I32 | I64 => self.varint().map(|_| ()),
            DOUBLE => self.skip(8),
            UUID => self.skip(16),
            BINARY => {
                let len = self.varint()?;
                self.skip(len)
            }
            LIST | SET => self.list(None, false, Place::Other, depth),
            MAP => self.map(depth),
            STRUCT => self.structure(Place::Other, depth),
            other => Err(format!("the footer holds an unknown thrift type {other}")),
        }
    }

    fn map(&mut self, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("the footer nests deeper than {MAX_DEPTH} levels"));
        }
        let len = self.varint()?;
        if len == 0 {
            return Ok(());
        }
        let kinds = self.byte()?;
        let (key, value) = (kinds >> 4, kinds & 0x0f);
        let least = min_size(key)?.saturating_add(min_size(value)?);
        if len.saturating_mul(least) > self.left() {
            return Err(format!(
                "the footer claims a map of {len} entries with {} bytes left",
                self.left()
            ));
        }
        for _ in 0..len {
            self.element(key, depth + 1)?;
            self.element(value, depth + 1)?;
        }
        Ok(())
    }

    /// One element of a list or map: booleans take a byte there.
    fn element(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        match kind {
            BOOL_TRUE | BOOL_FALSE => self.skip(1),
            _ => self.value(kind, depth),
        }
    }
}

/// The largest page a Delta checkpoint's row reader may decompress. The `parquet` crate
/// reserves the uncompressed size a page header states before it decompresses the page (up
/// to 2 GiB for a header of a few bytes), so every page header of a checkpoint is read first
/// ([`check_pages`]).
pub const MAX_PAGE_BYTES: u64 = 64 * 1024 * 1024;

// PageHeader field ids that carry the page's sizes.
const PAGE_UNCOMPRESSED_SIZE: i16 = 2;
const PAGE_COMPRESSED_SIZE: i16 = 3;

/// What a page header states: its sizes, and how many bytes the header itself takes.
#[derive(Debug, PartialEq, Eq)]
pub struct PageSizes {
    pub uncompressed: i64,
    pub compressed: i64,
    pub header_len: usize,
}

/// Reads the thrift `PageHeader` at the start of `buf` within the same bounds as a footer,
/// answering the sizes it states.
pub fn page_header(buf: &[u8]) -> Result<PageSizes, String> {
    let mut scan = Scan {
        buf,
        pos: 0,
        column_chunks: 0,
    };
    let (mut uncompressed, mut compressed) = (None, None);
    let mut last: i16 = 0;
    loop {
        let header = scan.byte()?;
        let kind = header & 0x0f;
        if kind == STOP {
            break;
        }
        let delta = header >> 4;
        let id = if delta == 0 {
            let raw = scan.varint()?;
            let zigzag = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            i16::try_from(zigzag).map_err(|_| "a page header holds a bad field id".to_owned())?
        } else {
            last.saturating_add(i16::from(delta))
        };
        last = id;
        match (kind, id) {
            (I32, PAGE_UNCOMPRESSED_SIZE | PAGE_COMPRESSED_SIZE) => {
                let raw = scan.varint()?;
                let value = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
                if id == PAGE_UNCOMPRESSED_SIZE {
                    uncompressed = Some(value);
                } else {
                    compressed = Some(value);
                }
            }
            (BOOL_TRUE | BOOL_FALSE, _) => {}
            _ => scan.value(kind, 1)?,
        }
    }
    match (uncompressed, compressed) {
        (Some(uncompressed), Some(compressed)) => Ok(PageSizes {
            uncompressed,
            compressed,
            header_len: scan.pos,
        }),
        _ => Err("a page header states no page sizes".into()),
    }
}

/// Reads every page header of every column chunk of `file` (whose footer `metadata` is)
/// before a row reader decodes the pages: each page must lie inside its column chunk, and
/// none may state more than [`MAX_PAGE_BYTES`] uncompressed. Answers why not otherwise.
pub fn check_pages(
    file: &[u8],
    metadata: &parquet::file::metadata::ParquetMetaData,
) -> Result<(), String> {
    for row_group in metadata.row_groups() {
        for column in row_group.columns() {
            // Not `byte_range`: it asserts (panics) on negative offsets, which a footer may state.
            let start = column
                .dictionary_page_offset()
                .unwrap_or_else(|| column.data_page_offset());
            let (Ok(start), Ok(len)) = (
                u64::try_from(start),
                u64::try_from(column.compressed_size()),
            ) else {
                return Err("a column chunk states a negative offset or size".into());
            };
            let end = start
                .checked_add(len)
                .filter(|end| *end <= file.len() as u64)
                .ok_or_else(|| "a column chunk lies outside the file".to_owned())?;
            let (mut pos, end) = (start as usize, end as usize);
            while pos < end {
                let page = page_header(&file[pos..end])?;
                let (Ok(uncompressed), Ok(compressed)) = (
                    u64::try_from(page.uncompressed),
                    u64::try_from(page.compressed),
                ) else {
                    return Err("a page header states a negative size".into());
                };
                if uncompressed > MAX_PAGE_BYTES {
                    return Err(format!(
                        "a page states {uncompressed} uncompressed bytes; at most \
                         {MAX_PAGE_BYTES} are read"
                    ));
                }
                let next = (pos + page.header_len) as u64 + compressed;
                if next > end as u64 {
                    return Err("a page is longer than its column chunk".into());
                }
                pos = next as usize;
            }
        }
    }
    Ok(())
}

/// The fewest bytes one element of a thrift type takes on the wire.
fn min_size(kind: u8) -> Result<u64, String> {
    match kind {
        BOOL_TRUE | BOOL_FALSE | BYTE | I16 | I32 | I64 | BINARY | LIST | SET | MAP | STRUCT => {
            Ok(1)
        }
        DOUBLE => Ok(8),
        UUID => Ok(16),
        // Parquet writers write an empty list with a zero header.
        STOP => Ok(0),
        other => Err(format!("the footer holds an unknown thrift type {other}")),
    }
}

#[cfg(test)]
/// A `FileMetaData` (version 1) that claims `count` schema elements and holds only `body`.
pub(crate) fn schema_bomb(count: u64, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0x15, 0x02, 0x19, 0xfc];
    let mut n = count;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(body);
    out
}

/// A whole Parquet file (magic, footer, length, magic) whose footer of a few hundred bytes
/// claims two billion schema elements.
#[cfg(test)]
pub(crate) fn bomb_file() -> Vec<u8> {
    let meta = schema_bomb(2_000_000_000, &[0u8; 300]);
    let mut file = b"PAR1".to_vec();
    file.extend_from_slice(&meta);
    file.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    file.extend_from_slice(b"PAR1");
    file
}

/// The variable that makes a `*_child` test do its work (it passes trivially otherwise).
#[cfg(test)]
pub(crate) const CHILD: &str = "FLOTILLA_TEST_CHILD";

/// Runs the test named `test` of this test binary in a child process limited to 1 GiB of
/// address space, and asserts that it passed: a decoder that reserved memory at a bomb's
/// claimed lengths would abort the child instead.
#[cfg(test)]
pub(crate) fn run_child_under_memory_limit(test: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("prlimit")
        .arg("--as=1073741824")
        .arg("--")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("prlimit runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {test} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_headers_answer_their_sizes_and_refuse_lies() {
        // type 0, uncompressed 100, compressed 40, then stop.
        let ok = [0x15, 0x00, 0x15, 0xc8, 0x01, 0x15, 0x50, 0x00];
        assert_eq!(
            page_header(&ok).unwrap(),
            PageSizes {
                uncompressed: 100,
                compressed: 40,
                header_len: ok.len(),
            }
        );
        // No sizes at all.
        assert!(page_header(&[0x15, 0x00, 0x00]).is_err());
        // An unknown binary field claiming 1 GiB with nothing behind it.
        let e =
            page_header(&[0x15, 0x00, 0x08, 0xc6, 0x01, 0x80, 0x80, 0x80, 0x80, 0x04]).unwrap_err();
        assert!(e.contains("1073741824-byte value"), "{e}");
        // Cut off inside a size.
        assert!(page_header(&[0x15, 0x00, 0x15, 0xc8]).is_err());
    }

    #[test]
    fn a_list_longer_than_the_bytes_left_is_refused() {
        let bomb = schema_bomb(40_000, &[0u8; 300]);
        let e = check(&bomb).unwrap_err();
        assert!(e.contains("40000 elements"), "{e}");
    }

    #[test]
    fn too_many_schema_elements_are_refused_before_the_bytes_are_counted() {
        let bomb = schema_bomb(2_000_000_000, &[0u8; 300]);
        let e = check(&bomb).unwrap_err();
        assert!(e.contains("2000000000 schema elements"), "{e}");
    }

    #[test]
    fn a_string_longer_than_the_bytes_left_is_refused() {
        // Field 6 (created_by), a binary claiming 1 GiB.
        let e = check(&[0x68, 0x80, 0x80, 0x80, 0x80, 0x04, 0x00]).unwrap_err();
        assert!(e.contains("1073741824-byte value"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        // Field 1 a struct, holding field 1 a struct, ... never closed.
        let e = check(&[0x1c; 100]).unwrap_err();
        assert!(e.contains("nests deeper"), "{e}");
    }

    #[test]
    fn too_many_column_chunks_are_refused() {
        // 20 row groups, each with 30,000 (empty) column chunks: 600,000 in all, each one byte.
        let mut buf = vec![0x15, 0x02, 0x39, 0xfc, 20];
        for _ in 0..20 {
            buf.extend_from_slice(&[0x19, 0xfc, 0xb0, 0xea, 0x01]);
            buf.extend(std::iter::repeat_n(0u8, 30_000));
            buf.push(0);
        }
        buf.push(0);
        let e = check(&buf).unwrap_err();
        assert!(e.contains("more than 500000 column chunks"), "{e}");
        // The same shape with 10 row groups passes.
        let mut ok = vec![0x15, 0x02, 0x39, 0xfc, 10];
        for _ in 0..10 {
            ok.extend_from_slice(&[0x19, 0xfc, 0xb0, 0xea, 0x01]);
            ok.extend(std::iter::repeat_n(0u8, 30_000));
            ok.push(0);
        }
        ok.push(0);
        check(&ok).unwrap();
    }
}
